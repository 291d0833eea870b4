/**
 * /proc/<pid>/stat — the cheap per-tick view of one known process (≈0.03 ms per read).
 */
import { type ProcFile, procBuffer, readProcInto } from './read.js';
import { cursor, parseDec, skipToken } from './scan.js';

/**
 * USER_HZ: the unit of the tick fields in /proc/<pid>/stat. Linux fixes it at 100 on every
 * architecture the probe runs on (x86_64, aarch64), whatever the kernel's internal HZ.
 */
export const CLOCK_TICKS = 100;

/**
 * Bytes per page, the unit of `rssPages`. 4 KiB on x86_64 and on the usual aarch64 guest
 * kernels (Firecracker guests). An aarch64 kernel built with 16 KiB or 64 KiB pages would need
 * 16384 / 65536 here (`getconf PAGESIZE`); the probe does not support those kernels.
 */
export const PAGE_SIZE = 4096;

export interface PidStat {
  pid: number;
  /** Executable name as the kernel keeps it (at most 15 bytes); may contain spaces and ')'. */
  comm: string;
  /** One of R S D Z T t X I (W/x/K/P on old kernels). */
  state: string;
  ppid: number;
  /** User CPU time in CLOCK_TICKS. */
  utimeTicks: number;
  /** System CPU time in CLOCK_TICKS. */
  stimeTicks: number;
  threads: number;
  /** Start time after boot in CLOCK_TICKS; with pid it identifies a process across pid reuse. */
  startTimeTicks: number;
  /** Resident set size in pages of PAGE_SIZE (0 for a zombie). */
  rssPages: number;
  /**
   * Field 52, the exit status in waitpid() encoding (`(code << 8) | signal`, see
   * decodeExitCode), for a zombie (state 'Z'); the kernel shows 0 when the reader may not
   * ptrace the process. null for any other state (the fields after rss are not parsed: the
   * target's stat is read every tick, and they were half its parse), and when the kernel does
   * not have the field (before Linux 3.5).
   */
  exitCode: number | null;
}

// Field numbers as in proc(5) (1-based; field 2 is comm).
const F_STATE = 3;
const F_PPID = 4;
const F_UTIME = 14;
const F_STIME = 15;
const F_THREADS = 20;
const F_STARTTIME = 22;
const F_RSS = 24;
const F_EXIT_CODE = 52;

/**
 * Parses /proc/<pid>/stat. Returns null when the process is gone (or the file is too malformed
 * to hold the fields up to rss).
 */
export function readPidStat(pid: number, procRoot = '/proc'): PidStat | null {
  const n = readProcInto(`${procRoot}/${pid}/stat`);
  if (n < 0) return null;
  return parseStatBytes(procBuffer(), n);
}

/** The same from a stat file kept open (the followed target's, read every tick): null when
 *  its process is gone. */
export function pidStatOf(file: ProcFile): PidStat | null {
  const n = file.read();
  if (n < 0) return null;
  return parseStatBytes(procBuffer(), n);
}

/** Parses the bytes of a stat file in buf[0, end). Exported for tests. */
export function parseStatBytes(buf: Buffer, end: number): PidStat | null {
  // comm is between the first '(' and the LAST ')': it may itself contain ')' and spaces.
  let open = 0;
  while (open < end && buf[open] !== 0x28) open++;
  let close = end - 1;
  while (close > open && buf[close] !== 0x29) close--;
  if (open >= end || close <= open) return null;

  const pid = parseDec(buf, 0, open);
  if (Number.isNaN(pid)) return null;
  const comm = buf.toString('utf8', open + 1, close);

  // After ") " come fields 3, 4, … separated by single spaces.
  let i = close + 1;
  let state = '';
  let ppid = NaN;
  let utime = NaN;
  let stime = NaN;
  let threads = NaN;
  let start = NaN;
  let rss = NaN;
  let exitCode: number | null = null;
  for (let field = F_STATE; field <= F_EXIT_CODE; field++) {
    if (i >= end || buf[i] !== 0x20) break;
    i++;
    switch (field) {
      case F_STATE: {
        skipToken(buf, i, end);
        if (cursor.pos - i !== 1) return null;
        state = String.fromCharCode(buf[i]!);
        i = cursor.pos;
        continue;
      }
      case F_PPID:
        ppid = parseDec(buf, i, end);
        break;
      case F_UTIME:
        utime = parseDec(buf, i, end);
        break;
      case F_STIME:
        stime = parseDec(buf, i, end);
        break;
      case F_THREADS:
        threads = parseDec(buf, i, end);
        break;
      case F_STARTTIME:
        start = parseDec(buf, i, end);
        break;
      case F_RSS:
        rss = parseDec(buf, i, end);
        break;
      case F_EXIT_CODE: {
        const v = parseDec(buf, i, end);
        if (!Number.isNaN(v)) exitCode = v;
        break;
      }
      default:
        skipToken(buf, i, end);
    }
    i = cursor.pos;
    if (field === F_RSS && state !== 'Z') break;
  }
  if (
    state === '' ||
    Number.isNaN(ppid) ||
    Number.isNaN(utime) ||
    Number.isNaN(stime) ||
    Number.isNaN(threads) ||
    Number.isNaN(start) ||
    Number.isNaN(rss)
  ) {
    return null;
  }
  return {
    pid,
    comm,
    state,
    ppid,
    utimeTicks: utime,
    stimeTicks: stime,
    threads,
    startTimeTicks: start,
    rssPages: rss,
    exitCode,
  };
}

/**
 * Splits a waitpid()-style status (PidStat.exitCode) into the exit code (normal exit) or the
 * terminating signal.
 */
export function decodeExitCode(status: number): { code: number | null; signal: number | null } {
  const sig = status & 0x7f;
  if (sig === 0) return { code: (status >> 8) & 0xff, signal: null };
  return { code: null, signal: sig };
}
