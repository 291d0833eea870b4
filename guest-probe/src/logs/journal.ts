// Follows a systemd unit's journal through `journalctl -u UNIT -f -o cat --no-pager -n 0`
// (new entries only, message text only), feeding its output to a LogWriter. If journalctl
// exits it is started again after a capped backoff (1 s doubling to 30 s, back to 1 s after
// a run longer than the cap); lines logged while it was down are not seen. If journalctl is
// not installed, that is said once and the follower stops.

import type { ChildProcess } from 'node:child_process';
import type { LogWriter } from './log-watcher.js';
import * as lazy from '../lazy-builtins.js';

export interface JournalFollowerOptions {
  /** The journalctl to run (default: "journalctl", looked up on PATH). */
  command?: string;
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

export interface JournalFollowerCounters {
  /** journalctl processes started. */
  starts: number;
  /** …and how many of them ended. */
  exits: number;
}

export class JournalFollower {
  readonly counters: JournalFollowerCounters = { starts: 0, exits: 0 };
  private child: ChildProcess | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private delayMs: number;
  private readonly minBackoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly command: string;

  constructor(
    readonly unit: string,
    private readonly writer: LogWriter,
    private readonly log: (level: 'info' | 'warn', message: string) => void,
    opts: JournalFollowerOptions = {},
  ) {
    this.command = opts.command ?? 'journalctl';
    this.minBackoffMs = opts.minBackoffMs ?? 1000;
    this.maxBackoffMs = opts.maxBackoffMs ?? 30_000;
    this.delayMs = this.minBackoffMs;
    this.start();
  }

  /** The running journalctl's pid, if one runs. */
  get pid(): number | undefined {
    return this.child?.pid;
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
    const args = ['-u', this.unit, '-f', '-o', 'cat', '--no-pager', '-n', '0'];
    let child: ChildProcess;
    try {
      child = lazy.childProcess().spawn(this.command, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    } catch (err) {
      // Synchronous spawn failures (e.g. EAGAIN): retry like an exit.
      this.log('warn', `cannot start ${this.command}: ${(err as Error).message}`);
      this.scheduleRestart(0);
      return;
    }
    this.child = child;
    this.counters.starts++;
    const startedAt = performance.now();
    let missing = false;
    child.stdout!.on('data', (chunk: Buffer) => {
      if (this.child === child) this.writer.feed(chunk);
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
      this.writer.end();
      if (missing || this.closed) return;
      this.counters.exits++;
      const ranMs = performance.now() - startedAt;
      this.log('warn', `${this.command} -u ${this.unit} ended (${signal ?? `exit ${code}`}); restarting`);
      this.scheduleRestart(ranMs);
    });
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
