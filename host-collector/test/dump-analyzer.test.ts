// The dump worker (collector/dump-analyzer.ts, dumps/dump-work.ts): a dump is gzipped and
// analysed off the main thread, exactly as analyzeDump does it on the main thread; its bytes
// are kept and counted as they arrived; a request over the time limit ends the worker, the
// dump is still kept with its text, marked as not analysed, and the next request gets a new
// worker. The worker is bundled from source for these tests (support/workers.ts).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import zlib from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AnalysisError, DumpAnalyzer } from '../src/collector/dump-analyzer.js';
import { analyzeDump, diffAnalyses } from '../src/dumps/analyze.js';
import { bundleWorker, REAL_WORKER, STALLING_WORKER } from './support/workers.js';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'dumps');
const fixture = (name: string) => readFileSync(path.join(fixtures, name));
const GO = fixture('fake-envd-go1.19-sigquit-cgroup-hang.txt');
const THREADS_1 = fixture('threads-fake-envd-x86_64-1.txt');
const THREADS_2 = fixture('threads-fake-envd-x86_64-2.txt');

/** `bytes` as chunks of at most `size`, the way they arrive. */
function chunked(bytes: Buffer, size = 4096): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(bytes.subarray(at, at + size));
  return out;
}

const gz = (b: Buffer) => zlib.gzipSync(b);

let real: { url: URL; remove: () => void };
let stalling: { url: URL; remove: () => void };
const analyzers: DumpAnalyzer[] = [];
const analyzer = (opts: ConstructorParameters<typeof DumpAnalyzer>[0]) => {
  const a = new DumpAnalyzer(opts);
  analyzers.push(a);
  return a;
};

beforeAll(async () => {
  real = await bundleWorker(REAL_WORKER);
  stalling = await bundleWorker(STALLING_WORKER);
}, 60_000);
afterEach(async () => {
  for (const a of analyzers.splice(0)) await a.close();
});
afterAll(() => {
  real?.remove();
  stalling?.remove();
});

describe('the dump worker', () => {
  it('gzips and analyses a dump as analyzeDump does', async () => {
    const a = analyzer({ workerUrl: real.url });
    for (const bytes of [GO, THREADS_1, GO]) {
      const got = await a.ingest(chunked(bytes));
      expect(got.bytes).toBe(bytes.length);
      expect(zlib.gunzipSync(got.gz).equals(bytes)).toBe(true);
      expect(got.analysis).toEqual(analyzeDump(bytes.toString('utf8')));
      expect(got.notAnalysed).toBeUndefined();
    }
    expect((await a.ingest([])).analysis).toBeNull();
  });

  it('keeps and counts the bytes that arrived, invalid UTF-8 included (not their decoded text)', async () => {
    const a = analyzer({ workerUrl: real.url });
    const bytes = Buffer.concat([THREADS_1, Buffer.alloc(100_000, 0xff)]);
    const got = await a.ingest(chunked(bytes));
    expect(got.bytes).toBe(bytes.length);
    const back = zlib.gunzipSync(got.gz);
    expect(back.length).toBe(bytes.length); // not 300,000 bytes of U+FFFD
    expect(back.equals(bytes)).toBe(true);
    expect(got.analysis?.kind).toBe('threads');
  });

  it('diffs two stored dumps as diffAnalyses does', async () => {
    const a = analyzer({ workerUrl: real.url });
    expect(await a.diff(gz(THREADS_1), gz(THREADS_2))).toEqual(diffAnalyses(THREADS_1.toString(), THREADS_2.toString()));
    expect(await a.diff(gz(GO), gz(GO))).toEqual(diffAnalyses(GO.toString(), GO.toString()));
  });
});

describe('the time limit', () => {
  const stall = (head: string) => Buffer.concat([Buffer.from(head), Buffer.alloc(1_000_000, 0x61)]);

  it('a dump over it is kept with its text, not analysed; the next request gets a new worker', async () => {
    const a = analyzer({ workerUrl: stalling.url, timeLimitMs: 1000 });
    for (const head of ['STALL', 'STALL-AFTER-GZIP']) {
      const bytes = stall(head);
      const got = await a.ingest(chunked(bytes, 256 * 1024));
      expect(got.analysis).toEqual({ kind: 'unknown' });
      expect(got.notAnalysed).toBe('the analysis took longer than 1.0s');
      expect(got.bytes).toBe(bytes.length);
      expect(zlib.gunzipSync(got.gz).equals(bytes)).toBe(true);
      // The stuck worker was ended; a new one answers.
      const next = await a.ingest(chunked(THREADS_1));
      expect(next.analysis).toEqual(analyzeDump(THREADS_1.toString()));
    }
  });

  it('requests waiting behind a stalled one are served after it, each within its own limit', async () => {
    const a = analyzer({ workerUrl: stalling.url, timeLimitMs: 1000 });
    const [stalled, after, diff] = await Promise.all([a.ingest([stall('STALL')]), a.ingest([GO]), a.diff(gz(THREADS_1), gz(THREADS_2))]);
    expect(stalled.notAnalysed).toMatch(/took longer than/);
    expect(after.analysis).toEqual(analyzeDump(GO.toString()));
    expect(diff).toEqual(diffAnalyses(THREADS_1.toString(), THREADS_2.toString()));
  });

  it('a diff over it fails with TIMEOUT, and the next diff is answered', async () => {
    const a = analyzer({ workerUrl: stalling.url, timeLimitMs: 1000 });
    const err = await a.diff(gz(THREADS_1), gz(stall('STALL'))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AnalysisError);
    expect(err).toMatchObject({ code: 'ANALYSIS_TIMEOUT', message: 'the diff took longer than 1.0s' });
    expect((await a.diff(gz(THREADS_1), gz(THREADS_2))).kind).toBe('threads');
  });

  it('a worker started ahead (prestart) serves the requests; without its file nothing starts, and a dump says why', async () => {
    const a = analyzer({ workerUrl: real.url });
    a.prestart();
    a.prestart(); // one worker, however often
    for (const bytes of [GO, THREADS_1]) expect((await a.ingest(chunked(bytes))).analysis).toEqual(analyzeDump(bytes.toString('utf8')));
    const missing = analyzer({ workerUrl: pathToFileURL(path.join(fixtures, 'no-such-worker.mjs')) });
    missing.prestart();
    const got = await missing.ingest(chunked(THREADS_1));
    expect(got.analysis).toEqual({ kind: 'unknown' });
    expect(got.notAnalysed).toMatch(/dump worker/);
  });

  it('without a worker a dump is still kept with its text; a diff fails with FAILED', async () => {
    const a = analyzer({ workerUrl: pathToFileURL(path.join(fixtures, 'no-such-worker.mjs')) });
    const got = await a.ingest(chunked(THREADS_1));
    expect(got.analysis).toEqual({ kind: 'unknown' });
    expect(got.notAnalysed).toMatch(/dump worker/);
    expect(zlib.gunzipSync(got.gz).equals(THREADS_1)).toBe(true);
    await expect(a.diff(gz(THREADS_1), gz(THREADS_2))).rejects.toMatchObject({ code: 'ANALYSIS_FAILED' });
  });
});
