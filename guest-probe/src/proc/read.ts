/**
 * One shared, reusable read buffer for /proc files.
 *
 * /proc files are generated at read time, so the cost that matters is per read: an open +
 * read(s) + close for a file read once (readProcInto), or, for a file the probe reads every
 * tick (the target's stat, the socket totals), reads at offset 0 of a descriptor kept open
 * (ProcFile): the kernel generates the content afresh at each, and the open and close, a
 * path walk through procfs and two syscalls, are paid once. Neither makes a fresh Buffer per
 * call. The buffer grows (power of two) only when a file is larger than it, and is kept for
 * later reads up to RETAIN_MAX_BYTES; a rare larger read (e.g. /proc/net/tcp with thousands of
 * sockets) uses a one-off buffer so that a single big read does not pin memory for the life of
 * the probe.
 *
 * Everything here is synchronous and not re-entrant: callers must finish with the bytes of one
 * read before starting the next.
 */
import { closeSync, openSync, readSync } from 'node:fs';

const INITIAL_BYTES = 4096;
/** Largest buffer kept between reads (1 MiB ≈ 7,000 lines of /proc/net/tcp). */
const RETAIN_MAX_BYTES = 1 << 20;
/** Default cap on one read. */
export const DEFAULT_MAX_BYTES = 32 << 20;

let shared: Buffer = Buffer.allocUnsafe(INITIAL_BYTES);
let last: Buffer = shared;
/** Probe read used when the buffer is exactly full, so a file that fits exactly does not grow it. */
const probe: Buffer = Buffer.allocUnsafe(256);

function isGone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ESRCH';
}

/**
 * Reads up to `maxBytes` of `path` into the shared buffer and returns the number of bytes read,
 * or -1 when the file does not exist (ENOENT) or its process is gone (ESRCH). Any other error is
 * thrown. The bytes are in `procBuffer()` at [0, n) until the next read.
 */
export function readProcInto(path: string, maxBytes: number = DEFAULT_MAX_BYTES): number {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if (isGone(err)) return -1;
    throw err;
  }
  try {
    return fill(fd, maxBytes);
  } finally {
    closeSync(fd);
  }
}

/**
 * A /proc file read again and again through one descriptor. Each read starts at offset 0
 * (pread), where the kernel generates the file afresh, so it sees what a fresh open would;
 * and a process's file keeps naming that process, never one that reuses its pid. Close it when
 * done with it.
 *
 * Only for files the kernel shows in one piece (single_open: a process's stat, the socket
 * totals), read every tick: a read that returns less than it asked for then had the whole
 * file, and the read that would only find the end is not made. (A file shown record by record
 * may return short before its end.)
 */
export class ProcFile {
  private fd = -1;

  constructor(readonly path: string) {}

  /** As readProcInto: the bytes are in procBuffer() at [0, n), or -1 when the file is gone
   *  (ENOENT, or ESRCH once its process has exited: the descriptor is then closed, and the
   *  next read opens the path again). Any other error is thrown. */
  read(maxBytes: number = DEFAULT_MAX_BYTES): number {
    if (this.fd < 0) {
      try {
        this.fd = openSync(this.path, 'r');
      } catch (err) {
        if (isGone(err)) return -1;
        throw err;
      }
    }
    const n = fill(this.fd, maxBytes, true);
    if (n < 0) this.close();
    return n;
  }

  close(): void {
    if (this.fd < 0) return;
    closeSync(this.fd);
    this.fd = -1;
  }
}

/** Reads `fd` to its end (at most maxBytes) into the shared buffer: from where it is, or for a
 *  ProcFile (`kept`) from offset 0 whatever was read before, a short read being the end.
 *  -1 when its process is gone. */
function fill(fd: number, maxBytes: number, kept = false): number {
  let buf = shared;
  let n = 0;
  try {
    for (;;) {
      const room = Math.min(buf.length, maxBytes) - n;
      if (room <= 0) {
        if (n >= maxBytes) break; // truncated at maxBytes
        // Buffer full: is there more? Only grow when there is.
        const extra = readSync(fd, probe, 0, Math.min(probe.length, maxBytes - n), kept ? n : null);
        if (extra === 0) break;
        let size = buf.length * 2;
        while (size < n + extra) size *= 2;
        const bigger = Buffer.allocUnsafe(size);
        buf.copy(bigger, 0, 0, n);
        probe.copy(bigger, n, 0, extra);
        n += extra;
        buf = bigger;
        if (size <= RETAIN_MAX_BYTES) shared = bigger;
        continue;
      }
      const got = readSync(fd, buf, n, room, kept ? n : null);
      if (got === 0) break;
      n += got;
      if (kept && got < room) break;
    }
  } catch (err) {
    if (isGone(err)) return -1;
    throw err;
  }
  last = buf;
  return n;
}

/** The buffer holding the bytes of the most recent successful `readProcInto`. */
export function procBuffer(): Buffer {
  return last;
}

/**
 * Reads a whole /proc (or other small) file as UTF-8 text through the shared buffer.
 * Returns null when the file is missing (ENOENT) or its process is gone (ESRCH); throws on any
 * other error (EACCES, EISDIR, …). `maxBytes` caps the read (the text is then truncated).
 */
export function readProcFile(path: string, maxBytes?: number): string | null {
  const n = readProcInto(path, maxBytes);
  if (n < 0) return null;
  return last.toString('utf8', 0, n);
}
