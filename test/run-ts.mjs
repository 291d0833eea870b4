// Runs a TypeScript entry point of the test tree (the demo, the benchmarks) with Node 20:
// bundles it with esbuild into test/.build/ and imports the result.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const [entry, ...args] = process.argv.slice(2);
if (!entry) {
  console.error('usage: node test/run-ts.mjs FILE.ts [ARGS...]');
  process.exit(2);
}
const outfile = path.resolve('test/.build', `${path.basename(entry, '.ts')}.mjs`);
await build({
  entryPoints: [entry],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  logLevel: 'warning',
  // Not bundleable (it loads parts of itself by computed paths): resolved from test/node_modules.
  external: ['playwright-core'],
  banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
});
process.argv = [process.argv[0], outfile, ...args];
await import(pathToFileURL(outfile).href);
