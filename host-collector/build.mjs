// Bundles the collector and CLI into dist/vsockdiag.js, and the worker threads it starts next
// to it: dist/dump-worker.js (collector/dump-analyzer.ts finds it there) and
// dist/readiness-worker.js (readiness/thread.ts). npm
// dependencies stay external (resolved from host-collector/node_modules at run time); proto
// is bundled in.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8'));
const external = Object.keys(pkg.dependencies).filter((d) => !d.startsWith('@vsockdiag/'));

const common = { bundle: true, platform: 'node', format: 'esm', target: 'node20', external, sourcemap: 'linked', logLevel: 'warning' };
await build({
  ...common,
  entryPoints: [path.join(here, 'src/index.ts')],
  outfile: path.join(here, 'dist/vsockdiag.js'),
  banner: { js: '#!/usr/bin/env node' },
});
await build({ ...common, entryPoints: [path.join(here, 'src/dumps/dump-worker.ts')], outfile: path.join(here, 'dist/dump-worker.js') });
await build({ ...common, entryPoints: [path.join(here, 'src/readiness/worker.ts')], outfile: path.join(here, 'dist/readiness-worker.js') });
fs.chmodSync(path.join(here, 'dist/vsockdiag.js'), 0o755);
console.log('host-collector: dist/vsockdiag.js, dist/dump-worker.js, dist/readiness-worker.js');
