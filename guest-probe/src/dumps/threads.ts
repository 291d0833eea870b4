// The harmless dump: what every task (thread) of the target is doing, read from /proc only.
// Never signals or ptraces the target; it keeps running undisturbed while this reads.
//
// Text format (the host parser is written against it; keep it exact):
//
//   threads of pid <pid> (<comm>) arch=<x86_64|aarch64>
//   task <tid> (<comm>) state=<S> wchan=<wchan> syscall=<nr|running|none> <arg1> ... <arg6>
//     [<0>] futex_wait_queue+0x60/0x90          ← kernel stack lines, two spaces + as read
//   task …
//   # …                                         ← notes (cut, target exited), always last
//
// - wchan: /proc/<pid>/task/<tid>/wchan, '0' when the task waits nowhere; '?' when the file
//   cannot be read (a kernel without it, or no permission).
// - syscall: from /proc/<pid>/task/<tid>/syscall, which reads "nr a1 … a6 sp pc": shown as
//   `syscall=<nr> <a1> … <a6>` (hex args as the kernel prints them, sp and pc left out);
//   "running" → `syscall=running`; "-1 sp pc" (blocked, but not in a system call) →
//   `syscall=none`; unreadable → `syscall=?`. Only the nr form has arguments.
// - The kernel stack needs root (CAP_SYS_ADMIN); when it cannot be read its lines are just
//   missing.
// - comm is the kernel's (at most 15 bytes) and may itself contain spaces or ')': a parser
//   takes the text up to the LAST ") " of the line's head, as for /proc/<pid>/stat.
//
// A target that exits while this reads: the dump stops at that point, complete=false, and
// the last line is `# target exited during the dump`. A single thread that ends meanwhile
// is just left out (the process goes on). Bounded: at most MAX_TASKS tasks and MAX_TEXT_BYTES
// of text (then complete=false and a `# cut: …` line).
//
// Synchronous: about 4 small /proc reads per task (≈10 µs each), so 10,000 tasks hold the
// event loop for a few hundred milliseconds at most.

import { existsSync } from 'node:fs';
import { procBuffer, readProcInto } from '../proc/read.js';
import { listPids } from '../proc/fds.js';
import { type PidStat, parseStatBytes, readPidStat } from '../proc/stat.js';

export const MAX_TASKS = 10_000;
export const MAX_TEXT_BYTES = 16 * 1024 * 1024;
const MAX_STAT_BYTES = 4096;
const MAX_WCHAN_BYTES = 512;
const MAX_SYSCALL_BYTES = 512;
const MAX_STACK_BYTES = 64 * 1024;

export const TARGET_EXITED_LINE = '# target exited during the dump';

export interface ThreadsDumpOptions {
  /** Where /proc is (tests use a fixture folder). Default '/proc'. */
  procRoot?: string;
  /** process.arch-style name ('x64', 'arm64'); default process.arch. */
  arch?: string;
  /** Bounds (defaults MAX_TASKS and MAX_TEXT_BYTES). */
  maxTasks?: number;
  maxBytes?: number;
  /** Test seam: called after each task was read (a test makes the target vanish here). */
  afterTask?: (tid: number) => void;
}

export interface ThreadsDump {
  text: string;
  /** False when the target exited during the dump or a bound cut it. */
  complete: boolean;
  /** Tasks written. */
  tasks: number;
}

/** The arch name shown in the dump's first line (the kernel's names, as `uname -m`). */
export function archName(nodeArch: string = process.arch): string {
  if (nodeArch === 'x64') return 'x86_64';
  if (nodeArch === 'arm64') return 'aarch64';
  return nodeArch;
}

/** Thrown when the target is not there when the dump starts. */
export class NoSuchProcessError extends Error {
  constructor(readonly pid: number) {
    super(`no process ${pid} (it is not running, or it exited)`);
    this.name = 'NoSuchProcessError';
  }
}

/**
 * Whether the target process has exited: gone from /proc, replaced by another process with
 * the same pid, or a zombie with no thread left (a zombie leader whose other threads still
 * run has threads > 1 and counts as running).
 */
export function processExited(pid: number, procRoot: string, startTimeTicks: number): boolean {
  let now: PidStat | null;
  try {
    now = readPidStat(pid, procRoot);
  } catch {
    return false; // unreadable for another reason (EACCES…): not evidence of an exit
  }
  if (!now || now.startTimeTicks !== startTimeTicks) return true;
  return (now.state === 'Z' || now.state === 'X') && now.threads <= 1;
}

/** Small /proc file as text; null when gone (ENOENT/ESRCH); undefined when unreadable. */
function readSmall(path: string, max: number): string | null | undefined {
  let n: number;
  try {
    n = readProcInto(path, max);
  } catch {
    return undefined;
  }
  if (n < 0) return null;
  return procBuffer().toString('utf8', 0, n);
}

/** The `syscall=…` value (without the key) from the text of a task's syscall file. */
export function formatSyscall(raw: string | undefined): string {
  if (raw === undefined) return '?';
  const t = raw.trim();
  if (t === '') return '?';
  if (t === 'running') return 'running';
  const parts = t.split(/\s+/);
  const nr = parts[0]!;
  if (nr.startsWith('-')) return 'none';
  if (!/^\d+$/.test(nr)) return '?';
  // nr a1 … a6 sp pc: keep nr and the six arguments.
  return parts.slice(0, 7).join(' ');
}

/** The process's thread ids, ascending; null when it is gone. */
function taskIds(pid: number, procRoot: string): number[] | null {
  try {
    return listPids(`${procRoot}/${pid}/task`);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ESRCH' || code === 'ENOTDIR') return null;
    throw err;
  }
}

/**
 * Reads every task of `pid` from /proc. Throws NoSuchProcessError when the process is not
 * there at the start; any later disappearance ends the dump with complete=false instead.
 */
export function threadsDump(pid: number, opts: ThreadsDumpOptions = {}): ThreadsDump {
  const procRoot = opts.procRoot ?? '/proc';
  const maxTasks = opts.maxTasks ?? MAX_TASKS;
  const maxBytes = opts.maxBytes ?? MAX_TEXT_BYTES;
  const leader = readPidStat(pid, procRoot);
  if (!leader) throw new NoSuchProcessError(pid);

  const lines: string[] = [`threads of pid ${pid} (${leader.comm}) arch=${archName(opts.arch)}`];
  let bytes = Buffer.byteLength(lines[0]!) + 1;
  let tasks = 0;
  let complete = true;
  const exited = () => processExited(pid, procRoot, leader.startTimeTicks);

  const tids = taskIds(pid, procRoot);
  if (tids === null) {
    lines.push(TARGET_EXITED_LINE);
    return { text: lines.join('\n') + '\n', complete: false, tasks: 0 };
  }

  let missed = 0;
  let stoppedForExit = false;
  let cut: string | null = null;
  for (const tid of tids) {
    if (tasks >= maxTasks) {
      cut = `# cut: more than ${maxTasks} tasks (${tids.length} listed)`;
      break;
    }
    const base = `${procRoot}/${pid}/task/${tid}`;
    const task = readTask(base);
    if (task === null) {
      // This thread ended; if the whole process did, stop here.
      missed++;
      if (exited()) {
        stoppedForExit = true;
        break;
      }
      opts.afterTask?.(tid);
      continue;
    }
    const head = `task ${tid} (${task.comm}) state=${task.state} wchan=${task.wchan} syscall=${task.syscall}`;
    let add = Buffer.byteLength(head) + 1;
    const stackLines: string[] = [];
    if (task.stack) {
      for (const l of task.stack.split('\n')) {
        if (l === '') continue;
        const line = `  ${l}`;
        stackLines.push(line);
        add += Buffer.byteLength(line) + 1;
      }
    }
    if (bytes + add > maxBytes) {
      cut = `# cut: dump over ${maxBytes} bytes after ${tasks} of ${tids.length} tasks`;
      break;
    }
    lines.push(head);
    for (const l of stackLines) lines.push(l);
    bytes += add;
    tasks++;
    opts.afterTask?.(tid);
  }

  // Threads that vanished are only a loss if the process itself is gone by now.
  if (stoppedForExit || (missed > 0 && exited())) {
    complete = false;
    if (cut) lines.push(cut);
    lines.push(TARGET_EXITED_LINE);
  } else if (cut) {
    complete = false;
    lines.push(cut);
  }
  return { text: lines.join('\n') + '\n', complete, tasks };
}

interface TaskFacts {
  comm: string;
  state: string;
  wchan: string;
  syscall: string;
  stack: string | null;
}

/** One task's facts, or null when the task is gone. */
function readTask(base: string): TaskFacts | null {
  let n: number;
  try {
    n = readProcInto(`${base}/stat`, MAX_STAT_BYTES);
  } catch {
    n = -2;
  }
  if (n === -1) return null;
  const st = n >= 0 ? parseStatBytes(procBuffer(), n) : null;
  if (!st) return existsSync(base) ? { comm: '?', state: '?', wchan: '?', syscall: '?', stack: null } : null;

  // A file that is missing while the task's folder is still there is one this kernel does
  // not have (or cannot show): '?'; missing together with the folder: the task ended.
  const wchanRaw = readSmall(`${base}/wchan`, MAX_WCHAN_BYTES);
  if (wchanRaw === null && !existsSync(base)) return null;
  let wchan = wchanRaw ? wchanRaw.trim() : wchanRaw === '' ? '0' : '?';
  if (wchan === '') wchan = '0';
  if (/\s/.test(wchan)) wchan = wchan.replace(/\s+/g, '_');

  const syscallRaw = readSmall(`${base}/syscall`, MAX_SYSCALL_BYTES);
  if (syscallRaw === null && !existsSync(base)) return null;
  const syscall = formatSyscall(syscallRaw ?? undefined);

  // Root only; any failure just leaves the stack out.
  const stackRaw = readSmall(`${base}/stack`, MAX_STACK_BYTES);
  return { comm: st.comm, state: st.state, wchan, syscall, stack: stackRaw || null };
}
