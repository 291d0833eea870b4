// Bundles the collector and CLI into dist/vsockdiag.js. Its npm dependencies stay external
// (resolved from host-collector/node_modules at run time); proto is bundled in.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8'));
const external = Object.keys(pkg.dependencies).filter((d) => !d.startsWith('@vsockdiag/'));

await build({
  entryPoints: [path.join(here, 'src/index.ts')],
  outfile: path.join(here, 'dist/vsockdiag.js'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external,
  sourcemap: 'linked',
  banner: { js: '#!/usr/bin/env node' },
  logLevel: 'warning',
});
fs.chmodSync(path.join(here, 'dist/vsockdiag.js'), 0o755);
console.log('host-collector: dist/vsockdiag.js');
