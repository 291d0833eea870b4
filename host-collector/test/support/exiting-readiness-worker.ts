// The readiness thread, and a way to lose it as a crash would: it exits (code 7) when the main
// thread tells it that a sandbox named "exit-now" is gone. A restarted thread is sent the
// fleet as it is, never a removal, so it stays up. For the restart test.
import { parentPort } from 'node:worker_threads';
import type { MirrorUpdate } from '../../src/readiness/messages.js';
import '../../src/readiness/worker.js';

parentPort!.on('message', (u: MirrorUpdate) => {
  if (u.removed.includes('exit-now')) process.exit(7);
});
