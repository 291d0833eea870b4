// vsockdiag-probe.js, the file init runs: loads the probe bundle with V8's code cache.
//
// Why: the probe starts before envd on every boot, and most of its own start-up cost is V8
// compiling the bundle (its top level, then each function on its first call). A code cache
// holds that bytecode; with it, compiling is a lookup. Node 20 has no compile cache of its
// own (module.enableCompileCache is Node 22), so this file does what it would: compile the
// bundle through vm.Script with the cache the build produced beside it.
//
// The cache is only an accelerator. V8 checks it against the bundle's source, its own version
// and flags, and rejects it if anything differs (another Node, another architecture, a rebuilt
// bundle); then the bundle compiles as if there were none. V8 does not check the bytes
// themselves (release builds skip that), and a damaged cache can crash it, so the file carries
// a checksum of its own, checked by the addon as it reads the file:
//   "VDC2" | checksum of the rest (a 64-bit hash, 16 hex digits) | V8's cached data
// Nothing here writes a cache at run time unless asked (VSOCKDIAG_CODE_CACHE=write, used by
// guest-probe/code-cache.mjs), so a read-only root filesystem is fine. VSOCKDIAG_CODE_CACHE=report
// says on stderr whether the cache was used.
//
// The bundle's text is compiled from the file's own pages: V8 keeps a script's source as long
// as the script lives, and a copy in V8's heap would be 156 KiB of the probe's anonymous
// memory for its whole life. The build writes the bundle as a function expression called on
// its last line (build.mjs); the addon maps the file and hands V8 all of it but that line, as
// an external string (native/src/source.c). Without the addon, or for a bundle not written
// that way, the file is read into the heap and wrapped here as Node wraps a module.
//
// Bundled on its own as CommonJS (guest-probe/build.mjs); it imports nothing of the probe.

import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import vm from 'node:vm';
import type { NativeAddon } from './native.js';

const bundle = path.join(__dirname, 'vsockdiag-probe.bundle.js');
const cacheFile = path.join(__dirname, 'vsockdiag-probe.bundle.cache');
const MAGIC = 'VDC2';
const mode = process.env.VSOCKDIAG_CODE_CACHE;
const require = createRequire(bundle);
/** The bundle's last line (build.mjs defines it). */
declare const BUNDLE_TRAILER: string;

function loadAddon(): NativeAddon | null {
  try {
    // The same file the probe loads later (require caches it): no extra cost at start.
    return require(path.join(__dirname, 'vsockdiag.node')) as NativeAddon;
  } catch {
    return null; // the probe will say why the addon does not load
  }
}

/** The cache's V8 data if the file is whole, else why not. */
function readCache(addon: NativeAddon | null): { data: Buffer } | { state: 'missing' | 'corrupt' | 'unchecked' } {
  if (!addon) return { state: 'unchecked' };
  // Read and checked in one call: Node's first fs.readFileSync of a Buffer costs more (0.3 ms).
  const data = addon.readSealed(cacheFile, MAGIC);
  return typeof data === 'string' ? { state: data } : { data };
}

/** The bundle as a function expression: mapped by the addon, else read here. */
function bundleSource(addon: NativeAddon | null): string {
  const mapped = addon?.mapSource(bundle, BUNDLE_TRAILER);
  if (mapped) return mapped;
  let text: string;
  try {
    text = fs.readFileSync(bundle, 'utf8');
  } catch (err) {
    process.stderr.write(
      `vsockdiag-probe: cannot read ${bundle} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): ` +
        'install vsockdiag-probe.bundle.js beside vsockdiag-probe.js\n',
    );
    process.exit(1);
  }
  if (text.endsWith(BUNDLE_TRAILER)) return text.slice(0, -BUNDLE_TRAILER.length);
  // Any other CommonJS file: the same wrapper Node puts around a module, so it sees the usual globals.
  return `(function (exports, require, module, __filename, __dirname) {${text}\n})`;
}

const addon = loadAddon();
const cache = mode === 'write' ? { state: 'missing' as const } : readCache(addon);
const source = bundleSource(addon);
const script = new vm.Script(source, { filename: bundle, ...('data' in cache ? { cachedData: cache.data } : {}) });

if (mode === 'report') {
  const state = 'data' in cache ? (script.cachedDataRejected ? 'rejected' : 'accepted') : cache.state;
  process.stderr.write(`vsockdiag-probe: code cache ${state}\n`);
}
if (mode === 'write') {
  if (!addon) throw new Error('writing the code cache needs vsockdiag.node (its checksum) beside the launcher');
  const sealer = addon;
  // At exit the cache holds every function compiled so far: the whole start-up path.
  process.once('exit', () => {
    const data = script.createCachedData();
    const tmp = `${cacheFile}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, Buffer.concat([Buffer.from(MAGIC + sealer.checksum(data), 'latin1'), data]));
    fs.renameSync(tmp, cacheFile);
  });
}

const module = { exports: {} };
(script.runInThisContext() as (...args: unknown[]) => void)(module.exports, require, module, bundle, __dirname);
