/**
 * Finding a process by name. A full scan of /proc/* costs ~17 ms at 500 processes: do it once,
 * then watch the found pid with readPidStat and rescan only after it is gone.
 */
import { procBuffer, readProcInto } from './read.js';
import { readPidStat } from './stat.js';
import { listPids } from './fds.js';

/** The kernel keeps comm as at most TASK_COMM_LEN - 1 = 15 bytes. */
const COMM_MAX_BYTES = 15;
/** PID_MAX_LIMIT on 64-bit kernels. */
const PID_MAX = 4_194_304;

function bytesEqual(buf: Uint8Array, start: number, end: number, want: Uint8Array): boolean {
  if (end - start !== want.length) return false;
  for (let k = 0; k < want.length; k++) {
    if (buf[start + k] !== want[k]) return false;
  }
  return true;
}

/**
 * Classifies pid against the name: 0 = no match, 1 = comm matches only, 2 = comm and the
 * basename of argv[0] match. Kernel threads and zombies (empty cmdline) are 0.
 */
function matchPid(pid: number, procRoot: string, comm: Uint8Array, full: Uint8Array): number {
  let n = readProcInto(`${procRoot}/${pid}/comm`, 64);
  if (n < 0) return 0;
  let buf = procBuffer();
  if (n > 0 && buf[n - 1] === 0x0a) n--;
  if (!bytesEqual(buf, 0, n, comm)) return 0;

  n = readProcInto(`${procRoot}/${pid}/cmdline`, 4096);
  if (n <= 0) return 0; // gone, kernel thread, or zombie
  buf = procBuffer();
  let argEnd = 0;
  while (argEnd < n && buf[argEnd] !== 0) argEnd++;
  let base = argEnd;
  while (base > 0 && buf[base - 1] !== 0x2f /* / */) base--;
  return bytesEqual(buf, base, argEnd, full) ? 2 : 1;
}

/**
 * Finds the oldest process (lowest start time, then lowest pid) called `name`.
 *
 * A process matches when /proc/<pid>/comm equals `name` cut to 15 bytes (the kernel's limit).
 * When `name` is longer than 15 bytes, the basename of argv[0] (/proc/<pid>/cmdline) must also
 * equal `name`; otherwise processes whose argv[0] basename also equals `name` win over those
 * that match only by comm (e.g. a process that renamed argv). Skips the calling process, kernel
 * threads and zombies (both have an empty cmdline). Returns null when there is no match.
 */
export function findProcessByName(name: string, procRoot = '/proc'): number | null {
  const full = Buffer.from(name, 'utf8');
  if (full.length === 0) return null;
  const comm = full.subarray(0, COMM_MAX_BYTES);
  const needArgv0 = full.length > COMM_MAX_BYTES;
  const self = process.pid;

  let bestPid = -1;
  let bestRank = 0;
  let bestStart = Infinity;
  for (const pid of listPids(procRoot)) {
    if (pid === self) continue;
    const rank = matchPid(pid, procRoot, comm, full);
    if (rank === 0 || (needArgv0 && rank < 2) || rank < bestRank) continue;
    const st = readPidStat(pid, procRoot);
    if (st === null) continue; // exited meanwhile
    const start = st.startTimeTicks;
    if (rank > bestRank || start < bestStart || (start === bestStart && pid < bestPid)) {
      bestPid = pid;
      bestRank = rank;
      bestStart = start;
    }
  }
  return bestPid < 0 ? null : bestPid;
}

/**
 * Reads a pid file: surrounding whitespace is ignored, and the rest must be a decimal pid in
 * 1 … 4194304 (no sign, no other characters). Returns null for a missing file or junk; other
 * errors (e.g. EACCES) are thrown.
 */
export function readPidFile(path: string): number | null {
  const n = readProcInto(path, 4096);
  if (n <= 0) return null;
  const buf = procBuffer();
  let i = 0;
  let end = n;
  while (i < end && isSpace(buf[i]!)) i++;
  while (end > i && isSpace(buf[end - 1]!)) end--;
  if (i === end || end - i > 7) return null;
  let v = 0;
  for (; i < end; i++) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) return null;
    v = v * 10 + d;
  }
  return v >= 1 && v <= PID_MAX ? v : null;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x09 || c === 0x0d || c === 0x0b || c === 0x0c;
}
