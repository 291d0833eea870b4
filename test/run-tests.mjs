// Runs every suite in one vitest run and ends with one line of totals across all of them,
// exactly "N passed, N failed, N skipped", because CI reads that line, not vitest's summary.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const report = path.join(root, 'test/results/vitest.json');
fs.mkdirSync(path.dirname(report), { recursive: true });
fs.rmSync(report, { force: true });

const run = spawnSync(
  'pnpm',
  ['exec', 'vitest', 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, ...process.argv.slice(2)],
  { cwd: root, stdio: 'inherit' },
);

let passed = 0;
let failed = 0;
let skipped = 0;
if (fs.existsSync(report)) {
  const r = JSON.parse(fs.readFileSync(report, 'utf8'));
  passed = r.numPassedTests;
  failed = r.numFailedTests;
  skipped = r.numPendingTests + r.numTodoTests;
  // A suite that failed to load has no tests to count: count it as a failure.
  for (const suite of r.testResults) if (suite.status === 'failed' && suite.assertionResults.length === 0) failed++;
}
if (run.status !== 0 && failed === 0) failed = 1; // vitest itself failed (config, crash)
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 ? 1 : 0);
