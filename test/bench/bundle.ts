// Bundles a TypeScript entry point for a child Node process (the benchmarks run code in
// namespaces and child processes). esbuild's API cannot itself be bundled into the (bundled)
// benchmark, so a child node runs it.

import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { ROOT } from '../harness/collector.js';

/** ESM output that can still require() Node's built-ins (some dependencies do). */
export const REQUIRE_BANNER = "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);";

/** `external`: packages left to be resolved from the output file's folder at run time. */
export function bundleForNode(entry: string, outfile: string, opts: { banner?: string; external?: string[] } = {}): string {
  const code = `require('esbuild').buildSync(${JSON.stringify({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'warning',
    ...(opts.banner ? { banner: { js: opts.banner } } : {}),
    ...(opts.external ? { external: opts.external } : {}),
  })})`;
  const r = spawnSync(process.execPath, ['-e', code], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) throw new Error(`bundling ${path.relative(ROOT, entry)} failed (${r.status})`);
  return outfile;
}
