// Follows a systemd unit's journal through
//   journalctl -b -u UNIT -f --no-tail -o json --output-fields=MESSAGE --all --no-pager
// and hands each entry's message, with the time the journal gave it, to `onEntry`.
//
// - From the probe's own start, not from "now": at boot envd logs its first lines before
//   journalctl is even running, and those are the lines that matter. journalctl reads this
//   boot's entries from the start (`-b --no-tail`; a seek by wall clock is not used, since
//   envd steps that clock in /init) and entries older than `sinceMonotonicUs` are skipped.
// - The journal's timestamps are kept: an entry's __MONOTONIC_TIMESTAMP (CLOCK_MONOTONIC,
//   the clock this boot's entries share) goes through `toBootMs` to the probe's own clock,
//   so a phase read late is still placed when envd logged it.
// - Nothing lost or repeated across journalctl's restarts: the cursor of the last entry
//   handed on is kept in memory, and a restarted journalctl goes on `--after-cursor` it.
//   A partial last line (journalctl killed mid-write) is dropped; its entry comes again.
// If journalctl exits it is started again after a capped backoff (1 s doubling to 30 s,
// back to 1 s after a run longer than the cap). If journalctl is not installed, that is
// said once and the follower stops.

import type { ChildProcess } from 'node:child_process';
import * as lazy from '../lazy-builtins.js';
import { monotonicMs } from '../clock.js';

/** One JSON line longer than this is not an entry we can use (journald's LineMax is 48 KiB
 *  per message; --all prints it whole): it is skipped and counted. */
export const MAX_JOURNAL_JSON_LINE = 1024 * 1024;

/** A journal entry's message (newline-terminated bytes) and its time on the probe's clock. */
export type JournalEntryHandler = (message: Buffer, tMs: number | undefined) => void;

export interface JournalFollowerOptions {
  /** The journalctl to run (default: "journalctl", looked up on PATH). */
  command?: string;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Entries logged before this CLOCK_MONOTONIC time (µs) are skipped (default: this
   *  process's start). */
  sinceMonotonicUs?: number;
  /** Maps a journal __MONOTONIC_TIMESTAMP (µs) to the time reported with the entry. */
  toBootMs?: (monotonicUs: number) => number;
}

export interface JournalFollowerCounters {
  /** journalctl processes started. */
  starts: number;
  /** …and how many of them ended. */
  exits: number;
  /** Entries handed on. */
  entries: number;
  /** Entries from before sinceMonotonicUs, not handed on. */
  skipped: number;
  /** Lines that were not a journal entry (too long, not JSON, no cursor). */
  bad: number;
}

/** CLOCK_MONOTONIC (µs) when this process started (process.uptime() counts from there). */
export function processStartMonotonicUs(): number {
  return Math.round((monotonicMs() - process.uptime() * 1000) * 1000);
}

const NEWLINE = 0x0a;

export class JournalFollower {
  readonly counters: JournalFollowerCounters = { starts: 0, exits: 0, entries: 0, skipped: 0, bad: 0 };
  private child: ChildProcess | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private delayMs: number;
  /** The last entry handed on: where a restarted journalctl goes on from. */
  private cursor: string | null = null;
  /** Bytes of the current, not yet complete, JSON line. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  /** The current line outgrew MAX_JOURNAL_JSON_LINE: drop it up to its newline. */
  private skippingLine = false;
  private readonly minBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly command: string;
  private readonly sinceUs: number;
  private readonly toBootMs: ((monotonicUs: number) => number) | undefined;

  constructor(
    readonly unit: string,
    private readonly onEntry: JournalEntryHandler,
    private readonly log: (level: 'info' | 'warn', message: string) => void,
    opts: JournalFollowerOptions = {},
  ) {
    this.command = opts.command ?? 'journalctl';
    this.minBackoffMs = opts.minBackoffMs ?? 1000;
    this.maxBackoffMs = opts.maxBackoffMs ?? 30_000;
    this.delayMs = this.minBackoffMs;
    this.sinceUs = opts.sinceMonotonicUs ?? processStartMonotonicUs();
    this.toBootMs = opts.toBootMs;
    this.start();
  }

  /** The running journalctl's pid, if one runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** journalctl's arguments for the next start. */
  args(): string[] {
    const args = ['-b', '-u', this.unit, '-f', '--no-tail', '-o', 'json', '--output-fields=MESSAGE', '--all', '--no-pager'];
    if (this.cursor !== null) args.push(`--after-cursor=${this.cursor}`);
    return args;
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const pid = this.child?.pid;
    this.child = null;
    if (pid !== undefined) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // already gone
      }
    }
  }

  private start(): void {
    if (this.closed) return;
    let child: ChildProcess;
    try {
      child = lazy.childProcess().spawn(this.command, this.args(), { stdio: ['ignore', 'pipe', 'ignore'] });
    } catch (err) {
      // Synchronous spawn failures (e.g. EAGAIN): retry like an exit.
      this.log('warn', `cannot start ${this.command}: ${(err as Error).message}`);
      this.scheduleRestart(0);
      return;
    }
    this.child = child;
    this.counters.starts++;
    this.resetLine();
    const startedAt = monotonicMs();
    let missing = false;
    child.stdout!.on('data', (chunk: Buffer) => {
      if (this.child === child) this.feed(chunk);
    });
    child.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') {
        missing = true;
        this.closed = true;
        this.log('warn', `${this.command} not found: not following the journal of ${this.unit}`);
      } else if (child.pid === undefined) {
        this.log('warn', `cannot start ${this.command}: ${err.message}`);
      }
    });
    // 'close' comes after the process ended and its stdout was read to the end (also after
    // a failed spawn).
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      if (this.child !== child) return; // closed by us
      this.child = null;
      this.resetLine(); // a cut-off last line: its entry comes again after the cursor
      if (missing || this.closed) return;
      this.counters.exits++;
      const ranMs = monotonicMs() - startedAt;
      this.log('warn', `${this.command} -u ${this.unit} ended (${signal ?? `exit ${code}`}); restarting`);
      this.scheduleRestart(ranMs);
    });
  }

  private resetLine(): void {
    this.partial = [];
    this.partialBytes = 0;
    this.skippingLine = false;
  }

  private feed(chunk: Buffer): void {
    let from = 0;
    while (from < chunk.length) {
      const nl = chunk.indexOf(NEWLINE, from);
      const end = nl < 0 ? chunk.length : nl;
      if (!this.skippingLine) {
        if (this.partialBytes + (end - from) > MAX_JOURNAL_JSON_LINE) {
          this.skippingLine = true;
          this.partial = [];
          this.partialBytes = 0;
        } else if (end > from) {
          this.partial.push(chunk.subarray(from, end));
          this.partialBytes += end - from;
        }
      }
      if (nl < 0) return; // the rest of this line comes with the next chunk
      if (this.skippingLine) this.counters.bad++;
      else if (this.partialBytes > 0)
        this.entry(this.partial.length === 1 ? this.partial[0]! : Buffer.concat(this.partial, this.partialBytes));
      this.resetLine();
      from = nl + 1;
    }
  }

  private entry(line: Buffer): void {
    let e: Record<string, unknown>;
    try {
      e = JSON.parse(line.toString('utf8')) as Record<string, unknown>;
    } catch {
      this.counters.bad++;
      return;
    }
    if (typeof e !== 'object' || e === null || typeof e.__CURSOR !== 'string') {
      this.counters.bad++;
      return;
    }
    this.cursor = e.__CURSOR;
    const monoUs = Number(e.__MONOTONIC_TIMESTAMP);
    if (Number.isFinite(monoUs) && monoUs < this.sinceUs) {
      this.counters.skipped++;
      return;
    }
    const message = messageBytes(e.MESSAGE);
    if (message === null) return;
    this.counters.entries++;
    this.onEntry(message, Number.isFinite(monoUs) && this.toBootMs ? this.toBootMs(monoUs) : undefined);
  }

  private scheduleRestart(ranMs: number): void {
    if (this.closed) return;
    if (ranMs > this.maxBackoffMs) this.delayMs = this.minBackoffMs;
    const delay = this.delayMs;
    this.delayMs = Math.min(this.maxBackoffMs, this.delayMs * 2);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.start();
    }, delay);
    this.timer.unref?.();
  }
}

/** journalctl -o json prints MESSAGE as a string, as an array of byte values when it is
 *  not valid UTF-8, or (a field given twice) as an array of those. Newline-terminated. */
function messageBytes(value: unknown): Buffer | null {
  if (typeof value === 'string') return Buffer.from(`${value}\n`, 'utf8');
  if (!Array.isArray(value) || value.length === 0) return null;
  if (value.every((b) => typeof b === 'number')) return Buffer.concat([Buffer.from(value as number[]), Buffer.from('\n')]);
  const parts = value.map(messageBytes).filter((b): b is Buffer => b !== null);
  return parts.length ? Buffer.concat(parts) : null;
}
