// Bundles the probe into one file (dist/vsockdiag-probe.js) with the native addon beside it
// (dist/vsockdiag.node): the whole guest install is these two files plus a Node binary.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, 'dist');
fs.mkdirSync(out, { recursive: true });

await build({
  entryPoints: [path.join(here, 'src/index.ts')],
  outfile: path.join(out, 'vsockdiag-probe.js'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  banner: { js: '#!/usr/bin/env node' },
  logLevel: 'warning',
});
fs.chmodSync(path.join(out, 'vsockdiag-probe.js'), 0o755);
// Replace the addon by rename, never in place: a running probe has it mapped, and
// overwriting the file under it would crash that probe.
fs.copyFileSync(path.join(here, 'native/build/Release/vsockdiag.node'), path.join(out, 'vsockdiag.node.tmp'));
fs.renameSync(path.join(out, 'vsockdiag.node.tmp'), path.join(out, 'vsockdiag.node'));
const size = fs.statSync(path.join(out, 'vsockdiag-probe.js')).size;
console.log(`guest-probe: dist/vsockdiag-probe.js ${(size / 1024).toFixed(1)} KiB + dist/vsockdiag.node`);
