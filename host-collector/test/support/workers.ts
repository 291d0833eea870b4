// The dump worker for tests that run the collector's code from source: a worker thread
// runs plain Node, which cannot load the .ts sources, so the entry is bundled with esbuild
// into a temporary folder first (as build.mjs does for dist/dump-worker.js).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));

export const REAL_WORKER = path.join(here, '../../src/dumps/dump-worker.ts');
export const STALLING_WORKER = path.join(here, 'stalling-dump-worker.ts');

/** Bundles `entry` into a temporary folder; `remove` deletes it. */
export async function bundleWorker(entry: string): Promise<{ url: URL; remove: () => void }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-worker-'));
  const outfile = path.join(dir, 'dump-worker.mjs');
  try {
    await build({ entryPoints: [entry], outfile, bundle: true, platform: 'node', format: 'esm', target: 'node20', logLevel: 'warning' });
  } catch (err) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return { url: pathToFileURL(outfile), remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}
