// Preloaded into a collector under test (node --expose-gc --import this): on SIGUSR2 it runs a
// full collection and appends the bytes of heap objects still alive to the file named by
// VD_HEAP_AFTER_GC_FILE, one number per line. What survives a full GC is what the process
// holds on to, so two readings apart tell a leak from the GC's own swings, which RSS cannot:
// a 200-session soak's RSS sat 24 % below its median for half a minute with nothing held.
// Compiled code is left out: V8 optimises functions on background threads as they get hot,
// later on a loaded machine, and that growth is not the process holding data.
// Test-only: nothing in host-collector/ knows of it.
import fs from 'node:fs';
import v8 from 'node:v8';

const out = process.env.VD_HEAP_AFTER_GC_FILE;
if (!out || typeof globalThis.gc !== 'function') {
  throw new Error('heap-after-gc.mjs needs --expose-gc and VD_HEAP_AFTER_GC_FILE');
}
const isCode = (space) => space.space_name.startsWith('code_');
process.on('SIGUSR2', () => {
  globalThis.gc();
  const live = v8
    .getHeapSpaceStatistics()
    .filter((s) => !isCode(s))
    .reduce((sum, s) => sum + s.space_used_size, 0);
  fs.appendFileSync(out, `${live}\n`);
});
