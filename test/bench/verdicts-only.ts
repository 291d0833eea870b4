// Runs only the verdict boots (verdicts.ts) and prints their figures, every boot's too: for
// working on bind → ready and the stall timer without the whole `make bench`:
//   node test/run-ts.mjs test/bench/verdicts-only.ts [BOOTS] [PARALLEL]
import { measureVerdicts } from './verdicts.js';

const progress = (msg: string) => process.stderr.write(`bench: ${msg}\n`);
const v = await measureVerdicts(Number(process.argv[2] ?? 50), Number(process.argv[3] ?? 5), progress);
for (const name of ['bindToReady', 'stuckLag', 'clockLag'] as const) {
  const s = v[name];
  const sorted = [...v.values[name]].sort((a, b) => a - b);
  process.stdout.write(`${name}: p50 ${s.p50} / p99 ${s.p99} / max ${s.max} ms (n ${s.n}); sorted: ${sorted.join(' ')}\n`);
}
process.stdout.write(
  `probe run-queue wait by ready: p50 ${v.cpuWait.probeMs.p50.toFixed(1)} / max ${v.cpuWait.probeMs.max.toFixed(1)} ms; ` +
    `collector waiting ${(v.cpuWait.collectorShare * 100).toFixed(1)} % of the time\n`,
);
