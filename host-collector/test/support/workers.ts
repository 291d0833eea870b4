// The worker threads for tests that run the collector's code from source: a worker thread
// runs plain Node, which cannot load the .ts sources, so the entry is bundled with esbuild
// into a temporary folder first (as build.mjs does for dist/dump-worker.js and
// dist/readiness-worker.js).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { REQUIRE_BANNER, bundleForNode } from '../../../test/bench/bundle.js';

const here = path.dirname(fileURLToPath(import.meta.url));

export const REAL_WORKER = path.join(here, '../../src/dumps/dump-worker.ts');
export const STALLING_WORKER = path.join(here, 'stalling-dump-worker.ts');
export const READINESS_WORKER = path.join(here, '../../src/readiness/worker.ts');
export const EXITING_READINESS_WORKER = path.join(here, 'exiting-readiness-worker.ts');

/** Bundles `entry` into a temporary folder; `remove` deletes it. */
export async function bundleWorker(entry: string): Promise<{ url: URL; remove: () => void }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-worker-'));
  const outfile = path.join(dir, `${path.basename(entry, '.ts')}.mjs`);
  try {
    // Everything is bundled in (the folder has no node_modules), so the CommonJS dependencies'
    // require() of Node's built-ins needs a require in the ES module.
    bundleForNode(entry, outfile, { banner: REQUIRE_BANNER });
  } catch (err) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return { url: pathToFileURL(outfile), remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}
