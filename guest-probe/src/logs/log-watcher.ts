// Turns captured output (the wrapped target's stdout/stderr, a followed log file, a unit's
// journal) into events, within fixed bounds whatever the target prints:
//
//   writer.feed(chunk) ─► LineSplitter ─► line ─┬─► phase pattern matches? ─► `phase` event now
//                                              ├─► tail (last N lines, kept in memory)
//                                              └─► pending batch ─► flush() ─► `log.lines` event
//
// Phase lines are emitted at once (at most maxPhasesPerSecond; the rest are counted and
// reported in a notice), at the time stamp() gave their stream if it gave one (the journal
// knows when envd logged a line; the probe may read it later), else at the time seen. Ordinary lines wait for flush(), which the probe calls about once
// a second: one `log.lines` event per stream holding at most MAX_LOG_LINES_PER_BATCH lines;
// lines over the per-stream budget (maxLinesPerSecond) or over the batch size are counted
// in the batch's `dropped`, never kept.

import { MAX_LOG_LINES_PER_BATCH, MAX_TEXT, type EventBody } from '@vsockdiag/proto';
import { LineSplitter } from './lines.js';
import { phaseFromLine } from './phase-pattern.js';
import { monotonicMs } from '../clock.js';

export const LOG_STREAMS = ['stdout', 'stderr', 'file', 'journal'] as const;
export type LogStream = (typeof LOG_STREAMS)[number];

/** Where bytes of one stream go. feed() copies what it needs, so a chunk may be reused. */
export interface LogWriter {
  feed(chunk: Buffer): void;
  /** The stream ended (or a followed file was replaced): report a final partial line. */
  end(): void;
}

export interface LogWatcherOptions {
  pattern: RegExp;
  /** `t`: when the line was logged (ms since boot), if its stream was stamped. */
  emit: (e: EventBody, t?: number) => void;
  /** Lines kept for tail() (default 200). */
  tailLines?: number;
  /** Lines per second and stream that go into batches (default 200); the rest are counted. */
  maxLinesPerSecond?: number;
  /** Phase events per second, all streams together (default 50); the rest are counted. */
  maxPhasesPerSecond?: number;
  /** tick() flushes when this long has passed since the last flush (default 1000 ms). */
  flushIntervalMs?: number;
  /** Monotonic milliseconds (tests pass their own). */
  now?: () => number;
}

export interface LogWatcherCounters {
  /** Lines seen, all streams. */
  lines: number;
  /** Bytes fed, all streams. */
  bytes: number;
  /** Lines cut to MAX_LOG_LINE. */
  cut: number;
  /** Phase events emitted. */
  phases: number;
  /** Phase lines over the phase rate limit, not emitted as phases. */
  phasesDropped: number;
  /** Lines sent in `log.lines` batches. */
  sent: number;
  /** Lines not sent (over the rate budget or the batch size). */
  dropped: number;
  /** `log.lines` events emitted. */
  batches: number;
}

export interface TailLine {
  stream: LogStream;
  line: string;
}

class StreamState {
  readonly splitter: LineSplitter;
  pending: string[] = [];
  dropped = 0;
  windowStart = -Infinity;
  windowCount = 0;
  /** When the lines being fed were logged (stamp()); undefined: now. */
  at: number | undefined;
  readonly writer: LogWriter;

  constructor(onLine: (line: string, cut: boolean) => void, counters: LogWatcherCounters) {
    this.splitter = new LineSplitter(onLine);
    this.writer = {
      feed: (chunk) => {
        counters.bytes += chunk.length;
        this.splitter.feed(chunk);
      },
      end: () => this.splitter.end(),
    };
  }
}

const WINDOW_MS = 1000;

export class LogWatcher {
  readonly counters: LogWatcherCounters = {
    lines: 0,
    bytes: 0,
    cut: 0,
    phases: 0,
    phasesDropped: 0,
    sent: 0,
    dropped: 0,
    batches: 0,
  };
  private readonly streams = new Map<LogStream, StreamState>();
  private readonly pattern: RegExp;
  private readonly emitEvent: (e: EventBody, t?: number) => void;
  private readonly tailLines: number;
  private readonly maxLinesPerSecond: number;
  private readonly maxPhasesPerSecond: number;
  private readonly now: () => number;
  /** Ring of the last tailLines lines; `tailNext` is where the next one goes. */
  private readonly tailRing: Array<TailLine | undefined>;
  private tailNext = 0;
  private phaseWindowStart = -Infinity;
  private phaseWindowCount = 0;
  /** Phase lines over the limit since the last notice. */
  private phasesDroppedUnreported = 0;
  private readonly flushIntervalMs: number;
  private lastFlush: number;

  constructor(opts: LogWatcherOptions) {
    this.pattern = opts.pattern;
    this.emitEvent = opts.emit;
    this.tailLines = Math.max(0, Math.floor(opts.tailLines ?? 200));
    this.maxLinesPerSecond = opts.maxLinesPerSecond ?? 200;
    this.maxPhasesPerSecond = opts.maxPhasesPerSecond ?? 50;
    this.now = opts.now ?? (() => monotonicMs());
    this.tailRing = new Array<TailLine | undefined>(this.tailLines);
    this.flushIntervalMs = opts.flushIntervalMs ?? 1000;
    this.lastFlush = this.now();
  }

  /** For the probe's sampling loop (any rate): flushes about once per flushIntervalMs. */
  tick(): void {
    if (this.now() - this.lastFlush >= this.flushIntervalMs) this.flush();
  }

  /** The writer for one stream; the same writer each time for the same stream. */
  input(stream: LogStream): LogWriter {
    let state = this.streams.get(stream);
    if (!state) {
      state = new StreamState((line, cut) => this.line(stream, line, cut), this.counters);
      this.streams.set(stream, state);
    }
    return state.writer;
  }

  /** Lines of `stream` fed from now on were logged at `t` (ms since boot), until the next
   *  stamp. For a source that knows each line's time: stamp, then feed that line. */
  stamp(stream: LogStream, t: number | undefined): void {
    this.input(stream);
    this.streams.get(stream)!.at = t;
  }

  /** The last tailLines lines, oldest first. */
  tail(): TailLine[] {
    const out: TailLine[] = [];
    const n = this.tailRing.length;
    for (let i = 0; i < n; i++) {
      const entry = this.tailRing[(this.tailNext + i) % n];
      if (entry) out.push(entry);
    }
    return out;
  }

  /** Sends what is pending: at most one `log.lines` event per stream. */
  flush(): void {
    this.lastFlush = this.now();
    for (const [stream, state] of this.streams) {
      if (state.pending.length === 0 && state.dropped === 0) continue;
      const lines = state.pending;
      const dropped = state.dropped;
      state.pending = [];
      state.dropped = 0;
      this.counters.sent += lines.length;
      this.counters.batches++;
      this.emitEvent({ kind: 'log.lines', stream, lines, ...(dropped > 0 ? { dropped } : {}) });
    }
    if (this.phasesDroppedUnreported > 0) {
      const n = this.phasesDroppedUnreported;
      this.phasesDroppedUnreported = 0;
      const message = `${n} log line${n === 1 ? '' : 's'} matching the phase pattern over ${this.maxPhasesPerSecond}/s not reported as phases`;
      this.emitEvent({ kind: 'probe.notice', level: 'warn', message: message.slice(0, MAX_TEXT) });
    }
  }

  private line(stream: LogStream, line: string, cut: boolean): void {
    const state = this.streams.get(stream)!;
    this.counters.lines++;
    if (cut) this.counters.cut++;
    const now = this.now();

    const phase = phaseFromLine(this.pattern, line);
    if (phase) {
      if (now - this.phaseWindowStart >= WINDOW_MS) {
        this.phaseWindowStart = now;
        this.phaseWindowCount = 0;
      }
      if (this.phaseWindowCount < this.maxPhasesPerSecond) {
        this.phaseWindowCount++;
        this.counters.phases++;
        this.emitEvent({ kind: 'phase', source: 'log', ...phase }, state.at);
      } else {
        this.counters.phasesDropped++;
        this.phasesDroppedUnreported++;
      }
    }

    if (this.tailLines > 0) {
      this.tailRing[this.tailNext] = { stream, line };
      this.tailNext = (this.tailNext + 1) % this.tailLines;
    }

    if (now - state.windowStart >= WINDOW_MS) {
      state.windowStart = now;
      state.windowCount = 0;
    }
    if (state.windowCount < this.maxLinesPerSecond && state.pending.length < MAX_LOG_LINES_PER_BATCH) {
      state.windowCount++;
      state.pending.push(line);
    } else {
      state.dropped++;
      this.counters.dropped++;
    }
  }
}
