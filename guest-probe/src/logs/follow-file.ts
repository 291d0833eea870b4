// Follows a log file (runit's ./log/main/current, a file the target writes) like `tail -F`,
// one cheap step per probe tick: a stat() of the path, and positional reads of only the new
// bytes into one reused buffer, at most maxBytesPerPoll per tick so that a huge append is
// read over several ticks instead of stalling the probe.
//
// - Starts at the end of a file that exists when the follower is made (a runit log holds
//   previous boots); a file that appears later is read from its start.
// - Truncation (the size shrank below what was read): reads again from the start.
// - Rotation (the path names another inode, or is gone): the rest of the old file is read
//   first, then the new file from its start.
// - A missing file is retried quietly on every poll.
// Not noticed: a truncation after which the file grew past the old size within one tick
// (copytruncate under heavy writing); those bytes are skipped, as tail -F would.

import fs from 'node:fs';
import type { LogWriter } from './log-watcher.js';

export interface FileFollowerOptions {
  /** Bytes read per poll at most (default 256 KiB). */
  maxBytesPerPoll?: number;
  /** Read a file that exists at the start from its beginning instead of its end. */
  fromStart?: boolean;
  /** Told once per kind of failure other than "missing" (e.g. EACCES). */
  log?: (level: 'info' | 'warn', message: string) => void;
}

export interface FileFollowerCounters {
  bytes: number;
  opens: number;
  truncations: number;
  rotations: number;
}

const READ_BUFFER = 64 * 1024;

export class FileFollower {
  readonly counters: FileFollowerCounters = { bytes: 0, opens: 0, truncations: 0, rotations: 0 };
  private fd: number | null = null;
  private ino = 0;
  private dev = 0;
  private pos = 0;
  /** The path now names another file (or none): finish the open one, then switch. */
  private replaced = false;
  private closed = false;
  private readonly buf: Buffer;
  private readonly maxBytesPerPoll: number;
  private readonly reported = new Set<string>();

  constructor(
    readonly path: string,
    private readonly writer: LogWriter,
    private readonly opts: FileFollowerOptions = {},
  ) {
    this.maxBytesPerPoll = Math.max(1, opts.maxBytesPerPoll ?? 256 * 1024);
    this.buf = Buffer.allocUnsafe(Math.min(READ_BUFFER, this.maxBytesPerPoll));
    this.open(!opts.fromStart);
  }

  /** One step: read what was appended since the last poll (bounded). */
  poll(): void {
    if (this.closed) return;
    if (this.fd === null) {
      if (!this.open(false)) return;
    }
    let budget = this.maxBytesPerPoll;
    if (!this.replaced) {
      const st = this.stat();
      if (st && st.ino === this.ino && st.dev === this.dev) {
        if (st.size < this.pos) {
          // Truncated: report what was read of a last unfinished line, then start over.
          this.counters.truncations++;
          this.writer.end();
          this.pos = 0;
        }
        if (st.size > this.pos) this.read(Math.min(budget, st.size - this.pos));
        return;
      }
      // Gone or replaced; the open file may still hold bytes written before the switch.
      this.replaced = true;
    }
    budget -= this.read(budget);
    if (budget <= 0) return; // more of the old file next time
    if (!this.stat()) return; // not recreated yet: keep the old file, it may still grow
    this.counters.rotations++;
    this.writer.end();
    this.closeFd();
    this.replaced = false;
    if (this.open(false)) this.read(budget);
  }

  /** poll(), under the name the probe's sampling loop calls. */
  tick(): void {
    this.poll();
  }

  close(): void {
    this.closed = true;
    this.closeFd();
  }

  /** Opens the path; at its end when `atEnd`. False when it cannot be opened (yet). */
  private open(atEnd: boolean): boolean {
    let fd: number;
    try {
      fd = fs.openSync(this.path, 'r');
    } catch (err) {
      this.failed(err, 'open');
      return false;
    }
    try {
      const st = fs.fstatSync(fd);
      this.fd = fd;
      this.ino = st.ino;
      this.dev = st.dev;
      this.pos = atEnd ? st.size : 0;
      this.counters.opens++;
      return true;
    } catch (err) {
      fs.closeSync(fd);
      this.failed(err, 'fstat');
      return false;
    }
  }

  private stat(): fs.Stats | undefined {
    try {
      return fs.statSync(this.path, { throwIfNoEntry: false });
    } catch (err) {
      this.failed(err, 'stat');
      return undefined;
    }
  }

  /** Reads up to `max` bytes from pos into the writer; returns how many were read. */
  private read(max: number): number {
    let total = 0;
    while (total < max && this.fd !== null) {
      let n: number;
      try {
        n = fs.readSync(this.fd, this.buf, 0, Math.min(this.buf.length, max - total), this.pos);
      } catch (err) {
        // Unreadable now (e.g. EIO): try again from the same place next poll.
        this.failed(err, 'read');
        return total;
      }
      if (n <= 0) break;
      this.pos += n;
      total += n;
      this.counters.bytes += n;
      this.writer.feed(this.buf.subarray(0, n));
    }
    return total;
  }

  private closeFd(): void {
    if (this.fd === null) return;
    try {
      fs.closeSync(this.fd);
    } catch {
      // already gone
    }
    this.fd = null;
  }

  private failed(err: unknown, what: string): void {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    if (code === 'ENOENT') return; // missing: retried quietly
    const key = `${what}:${code}`;
    if (this.reported.has(key)) return;
    this.reported.add(key);
    this.opts.log?.('warn', `log file ${this.path}: ${what} failed: ${(err as Error).message}`);
  }
}
