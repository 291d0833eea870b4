/**
 * System-wide /proc readers. All are single small reads through the shared buffer, cheap enough
 * for every sampling tick (readSockstat ≈0.04 ms).
 */
import { ProcFile, procBuffer, readProcInto } from './read.js';
import { cursor, findLabel, labelledDec, parseDec, skipBlanks, skipToken, startsWithAscii } from './scan.js';

/** /proc/sys/kernel/random/boot_id (a UUID, new on every boot); null when missing/empty. */
export function readBootId(procRoot = '/proc'): string | null {
  const n = readProcInto(`${procRoot}/sys/kernel/random/boot_id`, 128);
  if (n < 0) return null;
  const buf = procBuffer();
  let end = n;
  while (end > 0 && (buf[end - 1] === 0x0a || buf[end - 1] === 0x20)) end--;
  return end === 0 ? null : buf.toString('latin1', 0, end);
}

/**
 * Parses an unsigned decimal with up to 3 fractional digits at buf[i] (e.g. "1234.56") as an
 * integer number of thousandths; NaN when malformed. cursor.pos is left after it.
 */
function parseMilli(buf: Uint8Array, i: number, end: number): number {
  const whole = parseDec(buf, i, end);
  if (Number.isNaN(whole) || whole < 0) return NaN;
  i = cursor.pos;
  let milli = whole * 1000;
  if (i < end && buf[i] === 0x2e /* . */) {
    i++;
    let scale = 100;
    const start = i;
    while (i < end) {
      const d = buf[i]! - 0x30;
      if (d < 0 || d > 9) break;
      milli += d * scale; // digits past the third add 0 (scale < 1 floors away below)
      scale /= 10;
      i++;
    }
    if (i === start) return NaN;
    milli = Math.floor(milli);
  }
  cursor.pos = i;
  return milli;
}

/** Time since boot from /proc/uptime in milliseconds (10 ms resolution); null if unreadable. */
export function readUptimeMs(procRoot = '/proc'): number | null {
  const n = readProcInto(`${procRoot}/uptime`, 256);
  if (n < 0) return null;
  const buf = procBuffer();
  const ms = parseMilli(buf, skipBlanks(buf, 0, n), n);
  return Number.isNaN(ms) ? null : ms;
}

/** The 1, 5 and 15 minute load averages from /proc/loadavg; null if unreadable. */
export function readLoadAvg(procRoot = '/proc'): [number, number, number] | null {
  const n = readProcInto(`${procRoot}/loadavg`, 256);
  if (n < 0) return null;
  const buf = procBuffer();
  let i = skipBlanks(buf, 0, n);
  const a = parseMilli(buf, i, n);
  i = skipBlanks(buf, cursor.pos, n);
  const b = parseMilli(buf, i, n);
  i = skipBlanks(buf, cursor.pos, n);
  const c = parseMilli(buf, i, n);
  if (Number.isNaN(a) || Number.isNaN(b) || Number.isNaN(c)) return null;
  return [a / 1000, b / 1000, c / 1000];
}

export interface MemInfo {
  totalKb: number;
  /** MemAvailable: the kernel's estimate of memory available without swapping. */
  availableKb: number;
}

/** MemTotal and MemAvailable from /proc/meminfo; null if unreadable or either is missing. */
export function readMemInfo(procRoot = '/proc'): MemInfo | null {
  const n = readProcInto(`${procRoot}/meminfo`);
  if (n < 0) return null;
  const buf = procBuffer();
  const totalKb = labelledDec(buf, n, 'MemTotal:');
  const availableKb = labelledDec(buf, n, 'MemAvailable:');
  if (Number.isNaN(totalKb) || Number.isNaN(availableKb)) return null;
  return { totalKb, availableKb };
}

export interface SockstatTcp {
  /** TCP sockets in use (not TIME_WAIT), IPv4 + IPv6 (the "TCP:" line counts IPv4 only). */
  tcpInUse: number;
  /** Orphaned sockets (closed by the application, still finishing); both families. */
  tcpOrphan: number;
  /** TIME_WAIT sockets; both families. */
  tcpTimeWait: number;
  /** Allocated TCP sockets (full sockets, orphans included, TIME_WAIT not); both families. */
  tcpAlloc: number;
}

/** /proc/net/sockstat and sockstat6, kept open: read every tick (they name the network
 *  namespace they were opened in). */
export interface SockstatFiles {
  v4: ProcFile;
  v6: ProcFile;
}

export function sockstatFiles(procRoot = '/proc'): SockstatFiles {
  return { v4: new ProcFile(`${procRoot}/net/sockstat`), v6: new ProcFile(`${procRoot}/net/sockstat6`) };
}

/**
 * TCP totals of the calling thread's network namespace from /proc/net/sockstat, with the
 * "TCP6: inuse" of /proc/net/sockstat6 added to tcpInUse (sockstat6 missing → IPv6 counts 0).
 * Returns null when sockstat is unreadable or has no complete "TCP:" line.
 */
export function readSockstat(files: SockstatFiles): SockstatTcp | null {
  let n = files.v4.read(4096);
  if (n < 0) return null;
  let buf = procBuffer();
  let at = findLabel(buf, n, 'TCP:');
  if (at < 0) return null;
  let inuse = NaN;
  let orphan = NaN;
  let tw = NaN;
  let alloc = NaN;
  // "TCP: inuse 1 orphan 0 tw 0 alloc 1 mem 0": key/value pairs until the end of the line.
  let i = skipBlanks(buf, at, n);
  while (i < n && buf[i] !== 0x0a) {
    const key = i;
    const keyLen = skipToken(buf, i, n);
    if (keyLen === 0) break;
    i = skipBlanks(buf, cursor.pos, n);
    const v = parseDec(buf, i, n);
    if (Number.isNaN(v)) break;
    i = skipBlanks(buf, cursor.pos, n);
    if (keyLen === 5 && startsWithAscii(buf, key, n, 'inuse')) inuse = v;
    else if (keyLen === 6 && startsWithAscii(buf, key, n, 'orphan')) orphan = v;
    else if (keyLen === 2 && startsWithAscii(buf, key, n, 'tw')) tw = v;
    else if (keyLen === 5 && startsWithAscii(buf, key, n, 'alloc')) alloc = v;
  }
  if (Number.isNaN(inuse) || Number.isNaN(orphan) || Number.isNaN(tw) || Number.isNaN(alloc)) {
    return null;
  }

  n = files.v6.read(4096);
  if (n >= 0) {
    buf = procBuffer();
    at = findLabel(buf, n, 'TCP6:');
    if (at >= 0) {
      i = skipBlanks(buf, at, n);
      if (startsWithAscii(buf, i, n, 'inuse')) {
        const v6 = parseDec(buf, skipBlanks(buf, i + 5, n), n);
        if (!Number.isNaN(v6)) inuse += v6;
      }
    }
  }
  return { tcpInUse: inuse, tcpOrphan: orphan, tcpTimeWait: tw, tcpAlloc: alloc };
}
