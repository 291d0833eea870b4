// Entry point of the dump worker thread (dump-analyzer.ts starts it; build.mjs bundles it as
// dist/dump-worker.js, next to dist/vsockdiag.js).

import { parentPort } from 'node:worker_threads';
import { answer, type DumpWorkRequest } from './dump-work.js';

const port = parentPort;
if (!port) throw new Error('dump-worker.js runs as a worker thread of the collector');
port.on('message', (req: DumpWorkRequest) => answer(req, port));
port.postMessage({ id: 0, op: 'ready' });
