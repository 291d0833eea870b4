// Go goroutine dumps, two ways:
//
// - pprofDump(url): GET a pprof goroutine page inside the guest (…/debug/pprof/goroutine?debug=2).
//   Harmless: the target keeps running. Bounded in size and time, one fresh connection.
//
// - SigquitCapture: the Go runtime's own dump. SIGQUIT makes a Go program print every
//   goroutine (with GOTRACEBACK=all, also the runtime's) to its stderr and exit with status 2;
//   its supervisor (systemd Restart=always, runit) then starts it again. So this ends the
//   target, and the dump exists only in the bytes that went to its stderr: the probe feeds
//   every raw stderr chunk it sees (the wrap pipe, a followed log file, the unit's journal)
//   to feed(), which costs nothing while no capture is armed. capture() arms, signals, and
//   collects until the target has exited plus a short drain, or a timeout.

import type http from 'node:http';
import * as lazy from '../lazy-builtins.js';
import type { LogWriter } from '../logs/log-watcher.js';

export const MAX_PPROF_BYTES = 64 * 1024 * 1024;
/** After the target exited, how long to keep collecting (a followed file or the journal
 *  delivers its last bytes a little later than a pipe). */
export const SIGQUIT_DRAIN_MS = 300;

export interface DumpText {
  text: string;
  /** True only when the whole dump is in `text`. */
  complete: boolean;
  error?: string;
}

export interface PprofOptions {
  /** Default MAX_PPROF_BYTES. */
  maxBytes?: number;
}

/**
 * Fetches a pprof text page (http only, no keep-alive). Never rejects: failures resolve with
 * `error` set and whatever arrived before them (complete=false).
 */
export function pprofDump(url: string, timeoutMs: number, opts: PprofOptions = {}): Promise<DumpText> {
  const maxBytes = opts.maxBytes ?? MAX_PPROF_BYTES;
  return new Promise((resolve) => {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      resolve({ text: '', complete: false, error: `bad pprof URL: ${url}` });
      return;
    }
    if (parsed.protocol !== 'http:') {
      resolve({ text: '', complete: false, error: `pprof URL must be http:// (got ${parsed.protocol})` });
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    let req: http.ClientRequest | null = null;
    const finish = (complete: boolean, error?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req?.destroy();
      const text = Buffer.concat(chunks, size).toString('utf8');
      resolve({ text, complete, ...(error ? { error } : {}) });
    };
    const timer = setTimeout(() => finish(false, `pprof ${url} did not answer in full within ${timeoutMs} ms`), timeoutMs);
    try {
      req = lazy.http().get(parsed, { agent: false, headers: { Connection: 'close', Accept: 'text/plain' } }, (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          finish(false, `pprof ${url} answered HTTP ${res.statusCode ?? '?'}`);
          return;
        }
        res.on('data', (chunk: Buffer) => {
          if (done) return;
          const room = maxBytes - size;
          if (chunk.length > room) {
            if (room > 0) {
              chunks.push(chunk.subarray(0, room));
              size += room;
            }
            finish(false, `pprof dump cut at ${maxBytes} bytes`);
            return;
          }
          chunks.push(chunk);
          size += chunk.length;
        });
        res.on('end', () => finish(res.complete, res.complete ? undefined : `pprof ${url}: the answer ended early`));
        res.on('error', (err) => finish(false, `pprof ${url}: ${err.message}`));
        res.on('aborted', () => finish(false, `pprof ${url}: the answer ended early`));
      });
      req.on('error', (err) => finish(false, `pprof ${url}: ${err.message}`));
    } catch (err) {
      finish(false, `pprof ${url}: ${(err as Error).message}`);
    }
  });
}

export interface SigquitOptions {
  /** Give up (complete=false) when the target has not exited and drained by then. */
  timeoutMs: number;
  /** Keep at most this many bytes of the dump (complete=false when more came). */
  maxBytes: number;
  /** Resolves once the target has exited (the wrap child's exit, or its pid gone). */
  exited: Promise<void>;
  /** Collect this long after `exited` (default SIGQUIT_DRAIN_MS). */
  drainMs?: number;
  /** Called every pumpEveryMs while the capture runs, e.g. () => fileFollower.poll(), so a
   *  followed log file is read promptly instead of at the probe's sampling rate. */
  pump?: () => void;
  pumpEveryMs?: number;
  /** The signal (default SIGQUIT). Tests pass 0 (only checks that the pid exists). */
  signal?: NodeJS.Signals | 0;
}

/**
 * Whether a SIGQUIT traceback is there to its end: after the goroutines the Go runtime prints
 * the signalled thread's registers, ending with rip/rflags/cs/fs/gs (amd64) or pc/fault
 * (arm64). Lines may carry a log prefix (a timestamp).
 */
export function tracebackEnded(text: string): boolean {
  const tail = text.slice(-4096);
  return /(?:^|\s)(?:rip|pc) +0x[0-9a-f]+\s*$/m.test(tail);
}

const EMPTY = Buffer.alloc(0);
/** How much of a line is looked at to decide whether it starts a traceback. */
const LINE_PEEK = 512;

/** True for a line that starts a Go traceback: "SIGQUIT: quit" (anywhere: a log file may
 *  prefix timestamps) or a goroutine header "goroutine N [" at the line start. */
function isTracebackStart(buf: Buffer, start: number, end: number): boolean {
  const line = buf.toString('latin1', start, Math.min(end, start + LINE_PEEK));
  return line.includes('SIGQUIT: quit') || /^goroutine \d+ \[/.test(line);
}

interface Armed {
  pid: number;
  maxBytes: number;
  /** Before the traceback's first line: everything, searched line by line. */
  pre: Buffer[];
  preBytes: number;
  /** The unfinished last line, not yet decided (also kept in `pre`). */
  carry: Buffer;
  /** Inside a line already decided not to be a traceback start. */
  skipLine: boolean;
  /** Bytes dropped from the front of `pre` to stay within maxBytes. */
  droppedPre: number;
  /** After it (the traceback's first line onwards). */
  found: boolean;
  body: Buffer[];
  bodyBytes: number;
  cut: boolean;
}

export class SigquitCapture {
  private armed: Armed | null = null;
  /** Bytes seen by feed() while armed, over all captures (for tests and counters). */
  fedBytes = 0;

  /** Whether a capture is running. */
  get busy(): boolean {
    return this.armed !== null;
  }

  /** Every raw chunk of the target's stderr. Copies what it keeps; never throws. */
  feed(chunk: Buffer): void {
    const a = this.armed;
    if (a === null || chunk.length === 0) return;
    this.fedBytes += chunk.length;
    try {
      if (a.found) this.keep(a, chunk);
      else this.scan(a, chunk);
    } catch {
      // never disturb the caller (the wrap pass-through, the file follower)
    }
  }

  /** A LogWriter that passes everything to `writer` and feeds this capture too. */
  tee(writer: LogWriter): LogWriter {
    return {
      feed: (chunk) => {
        writer.feed(chunk);
        this.feed(chunk);
      },
      end: () => writer.end(),
    };
  }

  /**
   * Sends SIGQUIT to `pid` and collects its dump from what feed() gets. Rejects only when a
   * capture is already running; every other failure resolves with `error` set.
   */
  capture(pid: number, opts: SigquitOptions): Promise<DumpText> {
    if (this.armed) {
      return Promise.reject(new Error(`a SIGQUIT dump of pid ${this.armed.pid} is already being captured; one at a time`));
    }
    const a: Armed = {
      pid,
      maxBytes: Math.max(1, Math.floor(opts.maxBytes)),
      pre: [],
      preBytes: 0,
      carry: EMPTY,
      skipLine: false,
      droppedPre: 0,
      found: false,
      body: [],
      bodyBytes: 0,
      cut: false,
    };
    this.armed = a;
    const signal = opts.signal ?? 'SIGQUIT';
    try {
      process.kill(pid, signal);
    } catch (err) {
      this.armed = null;
      return Promise.resolve({ text: '', complete: false, error: `cannot send ${signal} to pid ${pid}: ${(err as Error).message}` });
    }
    return new Promise((resolve) => {
      let settled = false;
      let drainTimer: NodeJS.Timeout | null = null;
      const pumpTimer = opts.pump ? setInterval(() => safe(opts.pump!), opts.pumpEveryMs ?? 50) : null;
      const finish = (exited: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(timeout);
        if (drainTimer) clearTimeout(drainTimer);
        if (pumpTimer) clearInterval(pumpTimer);
        if (opts.pump) safe(opts.pump); // the last bytes of a followed file
        this.armed = null;
        resolve(this.result(a, exited, opts.timeoutMs));
      };
      const timeout = setTimeout(() => finish(false), opts.timeoutMs);
      opts.exited.then(
        () => {
          if (settled) return;
          drainTimer = setTimeout(() => finish(true), opts.drainMs ?? SIGQUIT_DRAIN_MS);
        },
        () => undefined, // an exited promise that fails says nothing; the timeout decides
      );
    });
  }

  private result(a: Armed, exited: boolean, timeoutMs: number): DumpText {
    const parts = a.found ? a.body : a.pre;
    const bytes = a.found ? a.bodyBytes : a.preBytes;
    const text = Buffer.concat(parts, bytes).toString('utf8');
    const errors: string[] = [];
    if (!exited)
      errors.push(`pid ${a.pid} did not exit within ${timeoutMs} ms of SIGQUIT (does it ignore SIGQUIT, or is it not a Go program?)`);
    if (a.cut) errors.push(`dump cut at ${a.maxBytes} bytes`);
    if (!a.found) {
      if (bytes === 0) {
        errors.push("nothing arrived from the target's stderr: is it routed to the probe (wrap mode, --log-file or --journal-unit)?");
      } else if (exited) {
        errors.push('no Go traceback start ("SIGQUIT: quit" or "goroutine N [") in the target\'s stderr; all of it is kept');
      }
      if (a.droppedPre > 0) errors.push(`${a.droppedPre} earlier bytes dropped to stay within ${a.maxBytes} bytes`);
    }
    let ended = true;
    if (a.found && exited && !a.cut) {
      if (!/^(?:.*\s)?goroutine \d+ /m.test(text)) {
        ended = false;
        errors.push('the traceback holds no goroutine (GOTRACEBACK=none?)');
      } else if (!tracebackEnded(text)) {
        ended = false;
        errors.push(
          'the traceback does not end with the register dump the Go runtime prints last: lines were lost on the way (a journald rate limit?) or the target ended another way',
        );
      }
    }
    const complete = exited && a.found && !a.cut && ended;
    return { text, complete, ...(errors.length ? { error: errors.join('; ') } : {}) };
  }

  /** After the traceback started: keep up to maxBytes. */
  private keep(a: Armed, chunk: Buffer): void {
    if (a.cut) return;
    const room = a.maxBytes - a.bodyBytes;
    if (chunk.length > room) {
      if (room > 0) a.body.push(Buffer.from(chunk.subarray(0, room)));
      a.bodyBytes += Math.max(0, room);
      a.cut = true;
      return;
    }
    a.body.push(Buffer.from(chunk));
    a.bodyBytes += chunk.length;
  }

  /**
   * Before the traceback started: keep everything (bounded) and look at each line's start.
   * Only the unfinished last line (at most LINE_PEEK bytes) is carried between chunks, so
   * the cost is linear in the bytes fed.
   */
  private scan(a: Armed, chunk: Buffer): void {
    const data = a.carry.length ? Buffer.concat([a.carry, chunk]) : chunk;
    a.carry = EMPTY;
    let i = 0;
    for (;;) {
      const nl = data.indexOf(0x0a, i);
      const end = nl < 0 ? data.length : nl;
      if (!a.skipLine) {
        if (isTracebackStart(data, i, end)) {
          // Everything before this line is dropped; the carried bytes are in `data`.
          a.found = true;
          a.pre = [];
          a.preBytes = 0;
          this.keep(a, data.subarray(i));
          return;
        }
        if (nl < 0 && end - i < LINE_PEEK) {
          // Not decided yet: the marker may come with the next chunk.
          a.carry = Buffer.from(data.subarray(i));
          break;
        }
      }
      if (nl < 0) {
        a.skipLine = true; // a long line without a marker at its start: not one
        break;
      }
      a.skipLine = false;
      i = nl + 1;
      if (i >= data.length) break;
    }
    // Keep the chunk's own bytes (the carry is already kept from the chunk before).
    a.pre.push(Buffer.from(chunk));
    a.preBytes += chunk.length;
    // No traceback yet: bound what is kept by dropping the oldest bytes.
    while (a.preBytes > a.maxBytes) {
      const first = a.pre[0]!;
      const over = a.preBytes - a.maxBytes;
      if (first.length <= over) {
        a.pre.shift();
        a.preBytes -= first.length;
        a.droppedPre += first.length;
      } else {
        a.pre[0] = first.subarray(over);
        a.preBytes -= over;
        a.droppedPre += over;
      }
    }
  }
}

function safe(f: () => void): void {
  try {
    f();
  } catch {
    // a pump that fails must not end the capture
  }
}
