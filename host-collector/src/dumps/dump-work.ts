// The work the dump worker does (dump-worker.ts runs it in a worker thread; dump-analyzer.ts
// is the collector's side): everything a dump costs that grows with its size. A 64 MiB
// answer meant seconds of decoding, gzip and parsing, and a hostile one was worse; on the
// collector's main thread that stalled every session and the API.
//
// A dump is kept as the bytes the probe sent, gzipped: decoding them (invalid UTF-8 becomes
// U+FFFD) happens once here for the analysis and again when the text is read back, never on
// the way in, so what is stored and counted is what arrived.

import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { analyzeDump, diffAnalyses, type DumpAnalysis } from './analyze.js';

export type DumpDiff = ReturnType<typeof diffAnalyses>;

const gzip = promisify(zlib.gzip);

export type DumpWorkRequest =
  /** A dump as it arrived: gzip it and, meanwhile, decode and analyse it. */
  | { id: number; op: 'ingest'; bytes: Uint8Array }
  /** Two stored dumps (gzipped): what did not move from the older to the newer. */
  | { id: number; op: 'diff'; older: Uint8Array; newer: Uint8Array };

export type DumpWorkReply =
  /** Sent once, when the worker listens: request time limits count from there. */
  | { id: 0; op: 'ready' }
  /** Sent right before 'analysed' (the gzip ran beside the analysis). A dump whose analysis is given up
   *  never gets it: the collector then gzips the text itself. */
  | { id: number; op: 'compressed'; gz: Uint8Array }
  | { id: number; op: 'analysed'; analysis: DumpAnalysis | null }
  | { id: number; op: 'diffed'; diff: DumpDiff }
  | { id: number; op: 'failed'; error: string };

export interface ReplyPort {
  postMessage(m: DumpWorkReply, transfer?: ArrayBuffer[]): void;
}

/** Does one request and posts its replies; never rejects. */
export async function answer(req: DumpWorkRequest, port: ReplyPort): Promise<void> {
  try {
    if (req.op === 'ingest') {
      const raw = Buffer.from(req.bytes.buffer, req.bytes.byteOffset, req.bytes.byteLength);
      // Gzipped on libuv's threadpool while this thread analyses: a 10,000-goroutine dump
      // (8 MiB) took 70 ms of gzip before 300 ms of parsing, one after the other. Its reply
      // comes once the analysis is done; an analysis given up (the worker ended at its time
      // limit) loses it, and the collector gzips the dump itself (dump-analyzer.ts ingest).
      const gzipping = gzip(raw);
      gzipping.catch(() => undefined);
      const text = raw.toString('utf8');
      const analysis = text ? analyzeDump(text) : null;
      const gz = owned(await gzipping);
      port.postMessage({ id: req.id, op: 'compressed', gz }, [gz.buffer as ArrayBuffer]);
      port.postMessage({ id: req.id, op: 'analysed', analysis });
    } else {
      const older = zlib.gunzipSync(req.older).toString('utf8');
      const newer = zlib.gunzipSync(req.newer).toString('utf8');
      port.postMessage({ id: req.id, op: 'diffed', diff: diffAnalyses(older, newer) });
    }
  } catch (err) {
    port.postMessage({ id: req.id, op: 'failed', error: (err as Error).message });
  }
}

/** The bytes in an ArrayBuffer of their own: a small Buffer is a view of a shared pool, which must not be transferred. */
function owned(b: Buffer): Uint8Array {
  if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength) return b;
  const copy = new Uint8Array(b.byteLength);
  copy.set(b);
  return copy;
}
