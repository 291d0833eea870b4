// A dump worker for the time-limit tests: the real one, except that it never finishes a dump
// whose text starts with "STALL" (before gzipping it) or "STALL-AFTER-GZIP" (after sending
// the gzipped text), nor a diff whose newer dump starts with "STALL", as a hostile dump that
// takes forever to parse would.
import { parentPort } from 'node:worker_threads';
import zlib from 'node:zlib';
import { answer, type DumpWorkRequest, type ReplyPort } from '../../src/dumps/dump-work.js';

const port = parentPort!;

function stall(): never {
  for (;;);
}

port.on('message', (req: DumpWorkRequest) => {
  const text =
    req.op === 'ingest'
      ? Buffer.from(req.bytes.buffer, req.bytes.byteOffset, req.bytes.byteLength).toString('latin1', 0, 16)
      : zlib.gunzipSync(req.newer).toString('latin1', 0, 16);
  if (text.startsWith('STALL-AFTER-GZIP')) {
    const stallAfterGzip: ReplyPort = {
      postMessage(m, transfer) {
        port.postMessage(m, transfer);
        if (m.op === 'compressed') stall();
      },
    };
    return answer(req, stallAfterGzip);
  }
  if (text.startsWith('STALL')) stall();
  answer(req, port);
});
port.postMessage({ id: 0, op: 'ready' });
