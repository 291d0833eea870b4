// The collector's side of the dump worker (dumps/dump-worker.ts): one worker thread, started
// ahead of the first dump (prestart) or on first use, and kept, does the work of dumps/dump-work.ts one request at a time, each
// within a time limit. A request over its limit ends the worker (a thread busy in a loop can
// be stopped no other way) and the next request starts a new one. A dump whose analysis is
// given up, or that the worker cannot take, is still kept with its text, marked as not
// analysed; a diff that is given up is an error.

import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { Worker } from 'node:worker_threads';
import zlib from 'node:zlib';
import { formatDuration } from '@vsockdiag/proto';
import type { AnalysisErrorCode } from '../catalogue.js';
import type { DumpAnalysis } from '../dumps/analyze.js';
import type { DumpDiff, DumpWorkReply, DumpWorkRequest } from '../dumps/dump-work.js';
import type { Logger } from './logger.js';

/** How long one dump's analysis (or one diff) may take in the worker. */
export const DUMP_ANALYSIS_TIME_LIMIT_MS = 10_000;
/** How long a new worker may take to load (a few tens of ms, normally). */
export const DUMP_WORKER_START_LIMIT_MS = 10_000;
/** Requests waiting for the worker beyond which more are refused: each holds a dump's bytes. */
export const MAX_WAITING_ANALYSES = 32;

/** Next to the bundle (dist/vsockdiag.js, dist/dump-worker.js); tests from source pass a built one. */
const BUNDLED_WORKER = new URL('./dump-worker.js', import.meta.url);

const gzip = promisify(zlib.gzip);

export class AnalysisError extends Error {
  constructor(
    readonly code: AnalysisErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface Ingested {
  /** The bytes as they arrived, gzipped. */
  gz: Buffer;
  /** How many bytes arrived. */
  bytes: number;
  /** null for an empty dump; { kind: 'unknown' } when it was not analysed. */
  analysis: DumpAnalysis | null;
  /** Why the dump was not analysed, when it was not. */
  notAnalysed?: string;
}

export interface DumpAnalyzerOptions {
  workerUrl?: URL;
  timeLimitMs?: number;
  log?: Logger;
}

interface Job {
  request: DumpWorkRequest;
  transfer: ArrayBuffer[];
  /** Takes one reply; true once the job has all it waits for. */
  onReply(m: DumpWorkReply): boolean;
  onFail(err: AnalysisError): void;
}

interface Running {
  job: Job;
  timer: NodeJS.Timeout | null;
}

export class DumpAnalyzer {
  private worker: Worker | null = null;
  private online: Promise<Worker> | null = null;
  private waiting: Job[] = [];
  private running: Running | null = null;
  private nextId = 1;
  private closed = false;

  constructor(private readonly opts: DumpAnalyzerOptions = {}) {}

  private get timeLimitMs(): number {
    return this.opts.timeLimitMs ?? DUMP_ANALYSIS_TIME_LIMIT_MS;
  }

  /**
   * Starts the worker ahead of the first request, so that request does not wait for its start
   * (60–110 ms: the bundle loaded and compiled in a new isolate). Idle, it costs about 10 MiB
   * of RSS. Where the worker's file is missing (the collector's code run from source, as most
   * tests do), nothing is started: a request would fail with the reason, not this.
   */
  prestart(): void {
    const url = this.opts.workerUrl ?? BUNDLED_WORKER;
    if (this.closed || this.online || (url.protocol === 'file:' && !existsSync(url))) return;
    // A worker that does not come up is forgotten (lost) and the next request starts another.
    this.start().catch(() => undefined);
  }

  /** Gzips and analyses a dump's chunks off the main thread. Never rejects: the text is kept in any case. */
  async ingest(chunks: readonly Buffer[]): Promise<Ingested> {
    const bytes = chunks.reduce((n, c) => n + c.length, 0);
    if (bytes === 0) return { gz: await gzip(Buffer.alloc(0)), bytes, analysis: null };
    // The chunks are views of the frames they came in; one copy into a buffer of their own
    // is handed over without another (transferred).
    const copy = new Uint8Array(bytes);
    let at = 0;
    for (const c of chunks) {
      copy.set(c, at);
      at += c.length;
    }
    let gz: Buffer | undefined;
    try {
      const analysis = await new Promise<DumpAnalysis | null>((resolve, reject) =>
        this.enqueue({
          request: { id: 0, op: 'ingest', bytes: copy },
          transfer: [copy.buffer],
          onReply: (m) => {
            if (m.op === 'compressed') {
              gz = Buffer.from(m.gz.buffer, m.gz.byteOffset, m.gz.byteLength);
              return false;
            }
            if (m.op === 'analysed') resolve(m.analysis);
            else reject(unexpected(m));
            return true;
          },
          onFail: reject,
        }),
      );
      if (gz) return { gz, bytes, analysis };
      throw new AnalysisError('ANALYSIS_FAILED', 'the dump worker sent no compressed text');
    } catch (err) {
      // zlib's async gzip runs on libuv's thread pool, not on the event loop.
      return {
        gz: gz ?? (await gzip(Buffer.concat(chunks))),
        bytes,
        analysis: { kind: 'unknown' },
        notAnalysed: (err as Error).message,
      };
    }
  }

  /** What did not move between two stored (gzipped) dumps, worked out off the main thread. */
  diff(olderGz: Buffer, newerGz: Buffer): Promise<DumpDiff> {
    return new Promise((resolve, reject) =>
      this.enqueue({
        request: { id: 0, op: 'diff', older: olderGz, newer: newerGz },
        transfer: [],
        onReply: (m) => {
          if (m.op === 'diffed') resolve(m.diff);
          else reject(unexpected(m));
          return true;
        },
        onFail: reject,
      }),
    );
  }

  /** Ends the worker; what is still waiting fails. */
  async close(): Promise<void> {
    this.closed = true;
    const stopping = new AnalysisError('ANALYSIS_FAILED', 'the collector is stopping');
    for (const job of this.waiting.splice(0)) job.onFail(stopping);
    if (this.running) this.finish(this.running, stopping);
    await this.discard()?.terminate();
  }

  private enqueue(job: Job): void {
    if (this.closed) return job.onFail(new AnalysisError('ANALYSIS_FAILED', 'the collector is stopping'));
    if (this.waiting.length >= MAX_WAITING_ANALYSES) {
      return job.onFail(new AnalysisError('ANALYSIS_FAILED', `${MAX_WAITING_ANALYSES} dump analyses are already waiting`));
    }
    job.request.id = this.nextId++;
    this.waiting.push(job);
    this.next();
  }

  private next(): void {
    if (this.running || this.closed) return;
    const job = this.waiting.shift();
    if (!job) return;
    const what = job.request.op === 'diff' ? 'diff' : 'analysis';
    const running: Running = { job, timer: null };
    this.running = running;
    running.timer = setTimeout(
      () => this.timeOut(running, `the dump worker did not start within ${formatDuration(DUMP_WORKER_START_LIMIT_MS)}`),
      DUMP_WORKER_START_LIMIT_MS,
    );
    this.start().then(
      (worker) => {
        if (this.running !== running) return; // the worker died while starting
        // The request's limit counts from here: a worker's start-up is not its doing.
        clearTimeout(running.timer!);
        running.timer = setTimeout(
          () => this.timeOut(running, `the ${what} took longer than ${formatDuration(this.timeLimitMs)}`),
          this.timeLimitMs,
        );
        worker.postMessage(job.request, job.transfer);
      },
      (err: Error) => this.finish(running, new AnalysisError('ANALYSIS_FAILED', `the dump worker did not start: ${err.message}`)),
    );
  }

  private start(): Promise<Worker> {
    if (this.online) return this.online;
    const worker = new Worker(this.opts.workerUrl ?? BUNDLED_WORKER);
    // An idle worker does not keep the process alive.
    worker.unref();
    this.worker = worker;
    this.online = new Promise((resolve, reject) => {
      worker.on('message', (m: DumpWorkReply) => {
        if (m.op === 'ready') return resolve(worker);
        const running = this.running;
        if (worker !== this.worker || !running || running.job.request.id !== m.id) return; // late, from a request given up
        if (running.job.onReply(m)) this.finish(running);
      });
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`exited with code ${code}`)));
    });
    worker.on('error', (err) => this.lost(worker, `the dump worker failed: ${err.message}`));
    worker.on('exit', (code) => this.lost(worker, `the dump worker exited with code ${code}`));
    return this.online;
  }

  private timeOut(running: Running, why: string): void {
    if (this.running !== running) return;
    void this.discard()?.terminate();
    this.opts.log?.warn({ op: running.job.request.op, err: why }, 'dump worker over its time limit: ended');
    this.finish(running, new AnalysisError('ANALYSIS_TIMEOUT', why));
  }

  /** A worker that failed or exited by itself: the request it had fails; the next one starts another. */
  private lost(worker: Worker, why: string): void {
    if (worker !== this.worker) return; // one we ended ourselves
    void this.discard()?.terminate();
    this.opts.log?.warn({ err: why }, 'dump worker lost');
    if (this.running) this.finish(this.running, new AnalysisError('ANALYSIS_FAILED', why));
  }

  /** Forgets the worker (the caller ends it). */
  private discard(): Worker | null {
    const worker = this.worker;
    this.worker = null;
    this.online = null;
    return worker;
  }

  /** Ends the running request, with `err` or (its replies all in) without, and starts the next. */
  private finish(running: Running, err?: AnalysisError): void {
    if (this.running !== running) return;
    if (running.timer) clearTimeout(running.timer);
    this.running = null;
    if (err) running.job.onFail(err);
    this.next();
  }
}

function unexpected(m: DumpWorkReply): AnalysisError {
  return new AnalysisError('ANALYSIS_FAILED', m.op === 'failed' ? m.error : `unexpected reply "${m.op}" from the dump worker`);
}
