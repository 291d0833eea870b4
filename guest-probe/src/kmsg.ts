// Kernel messages worth an operator's attention (OOM kills, hung tasks, segfaults), read from
// /dev/kmsg without blocking on every probe tick.
//
// /dev/kmsg (a character device) hands out one record per read():
//   "PRIO,SEQ,TIMESTAMP_US,FLAGS[,…];MESSAGE\n" then optional " KEY=value\n" dictionary lines.
// A new reader starts at the oldest record still in the kernel's buffer, so an OOM kill from
// just before the probe (re)started is still reported. EAGAIN: nothing new. EPIPE: records
// were overwritten before we read them (counted; the next read continues at the oldest one).
// EINVAL: the buffer is smaller than the record (8 KiB is far above the kernel's ~1 KiB
// records; grown once to 64 KiB if it ever happens).
//
// Any other path (tests, or a captured log) is read as a growing regular file: new bytes since
// the last poll, split into lines in the same record format; dmesg-style "[  12.345678] text"
// lines and bare messages are accepted too. Lines are processed once their newline is
// written (or, for a final line without one, once it has not changed over a poll).
//
// Work per poll is bounded (records and bytes), so a flood of kernel messages or a 10 MB line
// cannot stall the probe: the rest is read on later polls.

import fs from 'node:fs';
import { MAX_NAME, MAX_TEXT, type EventBody } from '@vsockdiag/proto';

export type KernelEvent = Extract<EventBody, { kind: 'kernel' }>;
type Log = (level: 'info' | 'warn', message: string) => void;

export const KMSG_PATH = '/dev/kmsg';
/** Records (lines) handled per poll at most; the rest waits for the next poll. */
export const KMSG_MAX_RECORDS_PER_POLL = 1000;
/** Bytes read per poll at most from a regular file. */
export const KMSG_MAX_BYTES_PER_POLL = 1 << 20;
/** A file line longer than this is cut (and the rest of it skipped). */
export const KMSG_MAX_LINE = 8192;
/** An oom-kill summary and a "Killed process" line naming the same pid within this many
 *  records are one kill, reported once. */
export const OOM_PAIR_WINDOW = 16;

const DEVICE_BUFFER = 8192;
const DEVICE_BUFFER_MAX = 65536;
const FILE_CHUNK = 65536;
const MAX_PID = 0x3fffffff;
const MAX_MS = 1e13;

export interface KmsgOptions {
  /** /dev/kmsg, or a regular file in the same format (tests). */
  path?: string;
  emit: (body: EventBody) => void;
  log: Log;
  /** Report only records with a SEQ above this (e.g. the last one seen by a previous reader). */
  afterSeq?: number;
  maxRecordsPerPoll?: number;
  maxBytesPerPoll?: number;
  /** One read of the device: bytes read, or null when nothing waits; throws other errors
   *  (with their `code`). The addon's readNow where it loads: fs.readSync says EAGAIN, which
   *  ends nearly every poll, with an exception that took ~130 µs to make with the probe's
   *  compilers off, against ~15 µs for the addon's call. */
  readNow?: (fd: number, buffer: Buffer) => number | null;
}

/** readNow with node:fs alone (no addon). */
function readSyncNow(fd: number, buffer: Buffer): number | null {
  // EAGAIN ends nearly every poll: no stack trace is captured for it.
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return fs.readSync(fd, buffer, 0, buffer.length, null);
  } catch (err) {
    const code = errCode(err);
    if (code === 'EAGAIN' || code === 'EWOULDBLOCK' || code === 'EINTR') return null;
    throw err;
  } finally {
    Error.stackTraceLimit = limit;
  }
}

export interface KmsgCounters {
  /** Records read (continuation lines not counted). */
  records: number;
  /** Kernel events emitted. */
  reported: number;
  /** OOM lines folded into an event already reported for the same kill. */
  deduped: number;
  /** Records skipped because their SEQ was not above the last one seen. */
  old: number;
  /** EPIPE from /dev/kmsg: the kernel overwrote records before we read them. */
  overwritten: number;
  /** Records known lost from gaps in SEQ (after EPIPE, or in a file). */
  lost: number;
  /** Lines cut to KMSG_MAX_LINE. */
  truncated: number;
}

/** A parsed record: its message and what the record format told about it. */
export interface KmsgRecord {
  message: string;
  seq?: number;
  /** Syslog facility (PRIO >> 3); 0 is the kernel. Unknown for dmesg-style and bare lines. */
  facility?: number;
  kernelMs?: number;
}

const STRUCTURED = /^(\d{1,10}),(\d{1,20}),(\d{1,20}),[^;]{0,256};/;
const DMESG = /^\[\s*(\d{1,12})\.(\d{1,9})\]\s?/;

/** Parses one line (no trailing newline) as a /dev/kmsg record, a dmesg line or a bare message. */
export function parseKmsgLine(line: string): KmsgRecord {
  let m = STRUCTURED.exec(line);
  if (m) {
    const rec: KmsgRecord = { message: line.slice(m[0].length), seq: Number(m[2]), facility: Number(m[1]) >> 3 };
    const ms = Number(m[3]) / 1000;
    if (ms <= MAX_MS) rec.kernelMs = ms;
    return rec;
  }
  m = DMESG.exec(line);
  if (m) {
    const ms = Number(m[1]) * 1000 + Number(`0.${m[2]}`) * 1000;
    const rec: KmsgRecord = { message: line.slice(m[0].length) };
    if (ms <= MAX_MS) rec.kernelMs = Math.round(ms * 1000) / 1000;
    return rec;
  }
  return { message: line };
}

function toPid(digits: string | undefined): number | undefined {
  if (!digits || digits.length > 10) return undefined;
  const n = Number(digits);
  return Number.isInteger(n) && n >= 1 && n <= MAX_PID ? n : undefined;
}

function kernelEvent(what: KernelEvent['what'], message: string, process: string | undefined, pid: number | undefined): KernelEvent {
  const ev: KernelEvent = { kind: 'kernel', what, message: message.slice(0, MAX_TEXT) };
  if (process) ev.process = process.slice(0, MAX_NAME);
  if (pid !== undefined) ev.pid = pid;
  return ev;
}

/** "(comm)" at `open` (index of the '('): comm may itself contain ')' (it is any ≤15 bytes). */
function parenName(msg: string, open: number): string | undefined {
  const from = open + 1;
  let close = msg.indexOf(') total-vm:', from);
  if (close < 0 || close - from > 64) {
    const m = /^(.{0,64}?)\)(?=[\s,]|$)/.exec(msg.slice(from, from + 80));
    if (!m) return undefined;
    close = from + m[1]!.length;
  }
  return msg.slice(from, close);
}

const KILLED = /(?:^|: )Killed process (\d+) \(/;
const SEGFAULT = /\[(\d+)\]: (?:segfault at |unhandled exception: )/;
const TRAPS = /^traps: (.{0,64}?)\[(\d+)\] (?:general protection fault|trap )/;
const OOM_PID = /,pid=(\d+)(?:,|$)/g;

/**
 * Classifies one kernel message (the text after the record prefix). Returns the event without
 * kernelMs, or null for everything that is not an OOM kill, a hung task or a segfault.
 * Forms recognised (as kernels from 4.x to 6.x print them):
 *  - "Out of memory: Killed process 1234 (envd) total-vm:…" (also "Memory cgroup out of
 *    memory: …", "Out of memory (oom_kill_allocating_task): …", and the older bare
 *    "Killed process 1234 (envd) total-vm:…"); the older "Kill process … or sacrifice child"
 *    is only the choice of victim and is not reported;
 *  - "oom-kill:constraint=…,task=envd,pid=1234,uid=0" (the OOM summary line);
 *  - "INFO: task envd:1234 blocked for more than 120 seconds.";
 *  - "envd[1234]: segfault at 0 ip … sp … error 4 in envd[…]", arm64's
 *    "envd[1234]: unhandled exception: …", and x86 "traps: envd[1234] general protection
 *    fault ip:…" / "traps: envd[1234] trap invalid opcode ip:…" (all fatal, unhandled faults).
 */
export function classifyKernelMessage(msg: string): KernelEvent | null {
  if (msg.includes('Killed process ')) {
    const m = KILLED.exec(msg);
    if (m) return kernelEvent('oom', msg, parenName(msg, m.index + m[0].length - 1), toPid(m[1]));
  }
  if (msg.startsWith('oom-kill:')) {
    let pidAt = -1;
    let pid: string | undefined;
    for (const m of msg.matchAll(OOM_PID)) {
      pidAt = m.index;
      pid = m[1];
    }
    let process: string | undefined;
    if (pidAt >= 0) {
      const taskAt = msg.lastIndexOf(',task=', pidAt);
      if (taskAt >= 0) process = msg.slice(taskAt + 6, pidAt);
    }
    return kernelEvent('oom', msg, process, toPid(pid));
  }
  if (msg.startsWith('INFO: task ')) {
    const end = msg.indexOf(' blocked for more than ', 11);
    if (end > 0) {
      const who = msg.slice(11, end);
      const colon = who.lastIndexOf(':');
      if (colon >= 0) {
        const pid = /^\d+$/.test(who.slice(colon + 1)) ? toPid(who.slice(colon + 1)) : undefined;
        return kernelEvent('hung-task', msg, who.slice(0, colon), pid);
      }
      return kernelEvent('hung-task', msg, who, undefined);
    }
  }
  if (msg.includes(']: segfault at ') || msg.includes(']: unhandled exception: ')) {
    const m = SEGFAULT.exec(msg);
    if (m) return kernelEvent('segfault', msg, msg.slice(0, m.index), toPid(m[1]));
  }
  if (msg.startsWith('traps: ')) {
    const m = TRAPS.exec(msg);
    if (m) return kernelEvent('segfault', msg, m[1], toPid(m[2]));
  }
  return null;
}

interface PendingSummary {
  event: KernelEvent;
  pid: number;
  at: number;
  /** Polls that ended while it waited for its "Killed process" line. */
  polls: number;
}

function errCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}

export class KmsgReader {
  readonly path: string;
  readonly counters: KmsgCounters = { records: 0, reported: 0, deduped: 0, old: 0, overwritten: 0, lost: 0, truncated: 0 };
  private fd: number | null = null;
  /** Tried to open and failed, or a read failed for good: poll() does nothing from then on. */
  private dead = false;
  private device = false;
  private buf: Buffer = Buffer.alloc(0);
  private seq: number;
  /** Records seen so far (also ignored ones): the clock of the OOM pair window. */
  private index = 0;
  private pending: PendingSummary | null = null;
  /** Recently reported OOM kills: pid → record index. */
  private readonly recentOom = new Map<number, number>();
  private epipeLogged = false;
  // Regular-file state.
  private offset = 0;
  /** Inside a line longer than KMSG_MAX_LINE: its head was handled, skip to its newline. */
  private skipping = false;
  /** A final line without newline: where and how long it was at the last poll. */
  private tailAt = -1;
  private tailLen = -1;
  private readonly maxRecords: number;
  private readonly maxBytes: number;

  constructor(private readonly opts: KmsgOptions) {
    this.path = opts.path ?? KMSG_PATH;
    this.seq = opts.afterSeq ?? -1;
    this.maxRecords = opts.maxRecordsPerPoll ?? KMSG_MAX_RECORDS_PER_POLL;
    this.maxBytes = opts.maxBytesPerPoll ?? KMSG_MAX_BYTES_PER_POLL;
  }

  /** Highest SEQ seen (-1: none yet). Pass it as afterSeq to a new reader to skip what was seen. */
  get lastSeq(): number {
    return this.seq;
  }

  /** False once the path could not be opened or read: polling has stopped for good. */
  get active(): boolean {
    return !this.dead;
  }

  /** Reads what is new (bounded) and emits kernel events. Never throws. Returns records read. */
  poll(): number {
    if (this.dead) return 0;
    if (this.fd === null && !this.open()) return 0;
    const before = this.counters.records;
    try {
      if (this.device) this.readDevice();
      else this.readFile();
    } catch (err) {
      this.fail(`reading ${this.path} failed: ${(err as Error).message}; kernel messages are not watched`);
    }
    if (this.pending && ++this.pending.polls >= 2) this.flushPending();
    return this.counters.records - before;
  }

  close(): void {
    this.flushPending();
    if (this.fd !== null) {
      try {
        fs.closeSync(this.fd);
      } catch {
        // already gone
      }
    }
    this.fd = null;
    this.dead = true;
  }

  private open(): boolean {
    try {
      this.fd = fs.openSync(this.path, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      this.device = fs.fstatSync(this.fd).isCharacterDevice();
    } catch (err) {
      this.fail(`cannot read kernel messages from ${this.path}: ${(err as Error).message}`);
      return false;
    }
    this.buf = Buffer.allocUnsafe(this.device ? DEVICE_BUFFER : FILE_CHUNK);
    return true;
  }

  private fail(message: string): void {
    this.opts.log('warn', message);
    this.close();
  }

  /** /dev/kmsg: one record per read() until EAGAIN. */
  private readDevice(): void {
    const fd = this.fd!;
    const readNow = this.opts.readNow ?? readSyncNow;
    for (let i = 0; i < this.maxRecords; ) {
      let n: number | null;
      try {
        n = readNow(fd, this.buf);
      } catch (err) {
        const code = errCode(err);
        if (code === 'EPIPE') {
          this.counters.overwritten++;
          i++;
          if (!this.epipeLogged) {
            this.epipeLogged = true;
            this.opts.log('warn', `kernel messages were overwritten before ${this.path} was read (counted from now on)`);
          }
          continue;
        }
        if (code === 'EINVAL' && this.buf.length < DEVICE_BUFFER_MAX) {
          this.buf = Buffer.allocUnsafe(DEVICE_BUFFER_MAX);
          continue;
        }
        throw err;
      }
      if (n === null || n === 0) return;
      i++;
      let end = this.buf.indexOf(0x0a);
      if (end < 0 || end > n) end = n;
      // The kernel escapes every byte outside printable ASCII as \xNN: latin1 is exact.
      this.handleLine(this.buf.toString('latin1', 0, end));
    }
  }

  /** A regular file: lines appended since the last poll. */
  private readFile(): void {
    const fd = this.fd!;
    const buf = this.buf;
    let records = 0;
    let budget = this.maxBytes;
    while (records < this.maxRecords && budget > 0) {
      const want = Math.min(buf.length, budget);
      const n = fs.readSync(fd, buf, 0, want, this.offset);
      if (n === 0) return;
      budget -= n;
      let start = 0;
      if (this.skipping) {
        const nl = buf.indexOf(0x0a);
        if (nl < 0 || nl >= n) {
          this.offset += n;
          continue;
        }
        this.skipping = false;
        start = nl + 1;
      }
      for (;;) {
        if (records >= this.maxRecords) {
          this.offset += start; // the rest is read again next poll
          return;
        }
        let nl = buf.indexOf(0x0a, start);
        if (nl >= n) nl = -1;
        if (nl < 0) break;
        if (nl - start > KMSG_MAX_LINE) {
          this.counters.truncated++;
          if (this.handleLine(buf.toString('utf8', start, start + KMSG_MAX_LINE))) records++;
        } else if (this.handleLine(buf.toString('utf8', start, nl))) records++;
        start = nl + 1;
      }
      const rest = n - start;
      if (rest >= KMSG_MAX_LINE) {
        // An over-long line: handle its head now and skip the rest of it up to its newline.
        this.counters.truncated++;
        if (this.handleLine(buf.toString('utf8', start, start + KMSG_MAX_LINE))) records++;
        this.skipping = true;
        this.offset += n;
        continue;
      }
      this.offset += start;
      if (rest === 0) continue;
      // A partial line: at the end of a full chunk, read again from its start.
      if (n === want) {
        if (start > 0) continue;
        return; // out of budget
      }
      // At end of file: a final line without newline is taken once it stayed the same a poll.
      if (this.offset === this.tailAt && rest === this.tailLen) {
        this.tailAt = this.tailLen = -1;
        this.offset += rest;
        this.handleLine(buf.toString('utf8', start, n));
      } else {
        this.tailAt = this.offset;
        this.tailLen = rest;
      }
      return;
    }
  }

  /** One line of a record stream. Returns true when it was a record (not a continuation). */
  private handleLine(line: string): boolean {
    if (line.length === 0 || line.charCodeAt(0) === 0x20) return false; // empty, or " KEY=value"
    this.counters.records++;
    this.index++;
    const rec = parseKmsgLine(line);
    if (rec.seq !== undefined) {
      if (rec.seq <= this.seq) {
        this.counters.old++;
        return true;
      }
      if (this.seq >= 0 && rec.seq > this.seq + 1) this.counters.lost += rec.seq - this.seq - 1;
      this.seq = rec.seq;
      // Userspace may write to /dev/kmsg too (facility ≥ 1): only the kernel's own count.
      if (rec.facility !== 0) return true;
    }
    const event = classifyKernelMessage(rec.message);
    if (!event) return true;
    if (rec.kernelMs !== undefined) event.kernelMs = rec.kernelMs;
    if (event.what === 'oom' && event.pid !== undefined) this.oom(event, event.pid, rec.message.startsWith('oom-kill:'));
    else this.report(event);
    return true;
  }

  /** The summary line and the "Killed process" line of one kill become one event. */
  private oom(event: KernelEvent, pid: number, summary: boolean): void {
    const seenAt = this.recentOom.get(pid);
    if (seenAt !== undefined && this.index - seenAt <= OOM_PAIR_WINDOW) {
      this.counters.deduped++;
      return;
    }
    const pending = this.pending;
    if (pending && pending.pid === pid && summary) {
      this.counters.deduped++; // the same summary twice
      return;
    }
    if (pending && pending.pid === pid && this.index - pending.at <= OOM_PAIR_WINDOW) {
      // "Killed process" line (with sizes) first, the summary (constraint, cgroup) after it.
      this.pending = null;
      this.counters.deduped++;
      event.message = `${event.message}\n${pending.event.message}`.slice(0, MAX_TEXT);
      if (!event.process && pending.event.process) event.process = pending.event.process;
      this.report(event);
      return;
    }
    this.flushPending();
    if (summary) this.pending = { event, pid, at: this.index, polls: 0 };
    else this.report(event);
  }

  private flushPending(): void {
    const pending = this.pending;
    if (!pending) return;
    this.pending = null;
    this.report(pending.event);
  }

  private report(event: KernelEvent): void {
    if (event.what === 'oom' && event.pid !== undefined) {
      this.recentOom.set(event.pid, this.index);
      if (this.recentOom.size > 32) {
        for (const [pid, at] of this.recentOom) if (this.index - at > OOM_PAIR_WINDOW) this.recentOom.delete(pid);
      }
    }
    this.counters.reported++;
    this.opts.emit(event);
  }
}
