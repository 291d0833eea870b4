// Threads dumps: the probe reads /proc for every task of the target and prints this
// text itself (the probe side emits exactly this format; this module parses it).
//
// Format (lines end with "\n"; blank lines are allowed anywhere and ignored):
//
//   threads of pid <pid> (<comm>) arch=<arch>
//   task <tid> (<comm>) state=<S> wchan=<symbol|0|?> syscall=<nr|running|none|?> [<arg> ...]
//     [<0>] <kernel stack frame>
//     ...
//   task <tid> (<comm>) ...
//
//   # <note>      comment lines, e.g. "# target exited during the dump", "# cut: …"
//                 (the probe puts them last); kept in the dump's `comments`.
//
//   <pid>, <tid>  decimal; <comm> is the kernel's comm, printed as is inside parentheses
//                 (it may itself contain spaces or ')': the parser takes the text up to the
//                 last ") state=", as for /proc/<pid>/stat).
//   arch=<arch>   `uname -m` of the guest: x86_64 or aarch64 (arm64 accepted too).
//                 Optional; without it syscall numbers are not named.
//   state=<S>     the state letter of /proc/<pid>/task/<tid>/stat (R S D T t Z X I P …).
//   wchan=        /proc/<pid>/task/<tid>/wchan: a kernel symbol, 0 when not waiting, ?
//                 when unreadable.
//   syscall=      from /proc/<pid>/task/<tid>/syscall: the syscall number the task is
//                 blocked in followed by its six arguments as the file prints them (hex;
//                 the probe leaves out sp and pc — extra fields are kept if present);
//                 "running" when the task is on a CPU; "none" (or -1, the raw form) when
//                 blocked but not in a syscall; "?" when unreadable.
//   stack lines   /proc/<pid>/task/<tid>/stack, one line per frame, indented by two spaces:
//                 "[<0>] futex_wait_queue+0x60/0x90" (the address shows as 0 unless the
//                 reader has CAP_SYSLOG; older kernels print a real address). None when
//                 the file is unreadable.
//   Other indented lines under a task ("  ! stack: EACCES") are kept as the task's notes.
//
// parseThreads never throws; unrecognised lines are counted in skippedLines, and lines
// longer than MAX_DUMP_LINE_CHARS (lines.ts) are not read: skipped, and counted in longLines.

import {
  firstLineTerminator,
  isDigit,
  isSpace,
  lastLineTerminator,
  MAX_DUMP_LINE_CHARS,
  skipNonSpace,
  skipSpace,
  trimmedEnd,
} from './lines.js';

export type Arch = 'x86_64' | 'aarch64';

export type ThreadSyscall =
  /** Blocked in syscall `nr` (named when the arch is known). */
  | { kind: 'syscall'; nr: number; name?: string; args: string[] }
  /** On a CPU. */
  | { kind: 'running' }
  /** Blocked, but not in a syscall (syscall=none or -1). */
  | { kind: 'none' }
  /** Not readable or not printed. */
  | { kind: 'unknown' };

export interface ThreadTask {
  tid: number;
  comm: string;
  state: string;
  /** Kernel symbol the task sleeps in; undefined when wchan=0, ? or absent. */
  wchan?: string;
  syscall: ThreadSyscall;
  /** Kernel stack, innermost first, as printed after "[<…>] " ("futex_wait_queue+0x60/0x90"). */
  stack: string[];
  notes?: string[];
}

export interface ThreadsDump {
  /** NaN when the header is missing. */
  pid: number;
  comm: string;
  arch?: Arch;
  tasks: ThreadTask[];
  /** The "# …" lines, without the "# " (e.g. "target exited during the dump"). */
  comments?: string[];
  skippedLines: number;
  /** Lines longer than MAX_DUMP_LINE_CHARS, not read (also counted in skippedLines). */
  longLines?: number;
}

export interface ThreadGroup {
  count: number;
  /** The first (lowest) 20 tids, ascending. */
  tids: number[];
  /** Distinct thread names in the group, first 5. */
  comms: string[];
  state: string;
  wchan?: string;
  syscall: ThreadSyscall;
  /** Kernel stack of the first member. */
  stack: string[];
  /** wchan, else the first stack frame's symbol, else the syscall name (or "running", "?"). */
  blockedIn: string;
}

// ---- syscall names ----

// biome-ignore format: a lookup table, several numbers a line
/** Common syscalls by number: x86_64 (arch/x86/entry/syscalls/syscall_64.tbl) and aarch64 (asm-generic/unistd.h). */
export const SYSCALL_NAMES: Readonly<Record<Arch, Readonly<Record<number, string>>>> = {
  x86_64: {
    0: 'read', 1: 'write', 2: 'open', 3: 'close', 4: 'stat', 5: 'fstat', 7: 'poll', 8: 'lseek',
    9: 'mmap', 10: 'mprotect', 11: 'munmap', 12: 'brk', 13: 'rt_sigaction', 14: 'rt_sigprocmask',
    16: 'ioctl', 17: 'pread64', 18: 'pwrite64', 19: 'readv', 20: 'writev', 23: 'select',
    22: 'pipe', 24: 'sched_yield', 26: 'msync', 28: 'madvise', 32: 'dup', 33: 'dup2', 34: 'pause', 35: 'nanosleep', 39: 'getpid',
    40: 'sendfile', 41: 'socket', 42: 'connect', 43: 'accept', 44: 'sendto', 45: 'recvfrom',
    46: 'sendmsg', 47: 'recvmsg', 48: 'shutdown', 49: 'bind', 50: 'listen', 56: 'clone', 59: 'execve',
    60: 'exit', 61: 'wait4', 62: 'kill', 72: 'fcntl', 73: 'flock', 74: 'fsync', 75: 'fdatasync',
    128: 'rt_sigtimedwait', 130: 'rt_sigsuspend', 131: 'sigaltstack', 165: 'mount', 166: 'umount2',
    186: 'gettid', 202: 'futex', 204: 'sched_getaffinity', 208: 'io_getevents', 217: 'getdents64',
    219: 'restart_syscall', 228: 'clock_gettime', 230: 'clock_nanosleep', 231: 'exit_group', 232: 'epoll_wait',
    233: 'epoll_ctl', 234: 'tgkill', 247: 'waitid', 257: 'openat', 258: 'mkdirat', 262: 'newfstatat', 263: 'unlinkat', 267: 'readlinkat', 270: 'pselect6',
    271: 'ppoll', 275: 'splice', 281: 'epoll_pwait', 288: 'accept4', 290: 'eventfd2',
    291: 'epoll_create1', 292: 'dup3', 293: 'pipe2', 299: 'recvmmsg', 307: 'sendmmsg', 318: 'getrandom',
    332: 'statx', 426: 'io_uring_enter', 435: 'clone3', 441: 'epoll_pwait2', 449: 'futex_waitv',
  },
  aarch64: {
    4: 'io_getevents', 19: 'eventfd2', 20: 'epoll_create1', 21: 'epoll_ctl', 22: 'epoll_pwait',
    23: 'dup', 24: 'dup3', 25: 'fcntl', 29: 'ioctl', 32: 'flock', 34: 'mkdirat', 35: 'unlinkat', 39: 'umount2', 40: 'mount', 56: 'openat',
    57: 'close', 59: 'pipe2', 61: 'getdents64', 62: 'lseek', 63: 'read', 64: 'write', 65: 'readv',
    66: 'writev', 67: 'pread64', 68: 'pwrite64', 71: 'sendfile', 72: 'pselect6', 73: 'ppoll',
    76: 'splice', 78: 'readlinkat', 79: 'newfstatat', 80: 'fstat', 82: 'fsync', 83: 'fdatasync', 93: 'exit',
    94: 'exit_group', 95: 'waitid', 98: 'futex', 101: 'nanosleep', 113: 'clock_gettime', 115: 'clock_nanosleep',
    123: 'sched_getaffinity', 124: 'sched_yield', 128: 'restart_syscall', 129: 'kill', 131: 'tgkill',
    132: 'sigaltstack', 133: 'rt_sigsuspend', 134: 'rt_sigaction', 135: 'rt_sigprocmask',
    137: 'rt_sigtimedwait', 172: 'getpid', 178: 'gettid', 198: 'socket', 200: 'bind', 201: 'listen',
    202: 'accept', 203: 'connect', 206: 'sendto', 207: 'recvfrom', 210: 'shutdown', 211: 'sendmsg',
    212: 'recvmsg', 214: 'brk', 215: 'munmap', 220: 'clone', 221: 'execve', 222: 'mmap',
    226: 'mprotect', 227: 'msync', 233: 'madvise', 242: 'accept4', 243: 'recvmmsg', 260: 'wait4',
    269: 'sendmmsg', 278: 'getrandom', 291: 'statx', 426: 'io_uring_enter', 435: 'clone3',
    441: 'epoll_pwait2', 449: 'futex_waitv',
  },
};

/** Normalises `uname -m` spellings; undefined for anything else. */
export function normalizeArch(arch: string | undefined): Arch | undefined {
  switch (arch?.trim().toLowerCase()) {
    case 'x86_64':
    case 'amd64':
    case 'x86-64':
      return 'x86_64';
    case 'aarch64':
    case 'arm64':
      return 'aarch64';
    default:
      return undefined;
  }
}

/** The name of syscall `nr` on `arch`, if it is in the table. */
export function syscallName(arch: Arch | string | undefined, nr: number): string | undefined {
  const a = normalizeArch(arch);
  return a ? SYSCALL_NAMES[a][nr] : undefined;
}

// ---- parsing ----

// The header, task and stack lines are scanned by hand: as regular expressions they
// backtracked quadratically on hostile lines (lines.ts). Each function gives what its old
// pattern (quoted) captured.

/** ^threads of pid (\d+) \((.*)\)(?:\s+arch=(\S+))?\s*$ — the comm runs to the last ")" the rest allows. */
export function parseThreadsHeader(line: string): { pid: number; comm: string; arch?: string } | undefined {
  const prefix = 'threads of pid ';
  if (!line.startsWith(prefix)) return undefined;
  const digitsEnd = skipDigits(line, prefix.length);
  if (digitsEnd === prefix.length || !line.startsWith(' (', digitsEnd)) return undefined;
  const pid = Number(line.slice(prefix.length, digitsEnd));
  const commStart = digitsEnd + 2;
  // The comm was ".*": it holds no line terminator.
  const commLimit = firstLineTerminator(line, commStart);
  const end = trimmedEnd(line);
  // "…)" and only whitespace after it.
  const last = end - 1;
  if (last >= commStart && last <= commLimit && line.charCodeAt(last) === 41 /* ) */) return { pid, comm: line.slice(commStart, last) };
  // "…) arch=X": the last word, after whitespace that follows the ")".
  let word = end;
  while (word > 0 && !isSpace(line.charCodeAt(word - 1))) word--;
  if (!line.startsWith('arch=', word) || end - word <= 'arch='.length) return undefined;
  let close = word;
  while (close > 0 && isSpace(line.charCodeAt(close - 1))) close--;
  close--;
  if (close === word - 1 || close < commStart || close > commLimit || line.charCodeAt(close) !== 41) return undefined;
  return { pid, comm: line.slice(commStart, close), arch: line.slice(word + 'arch='.length, end) };
}

interface TaskLine {
  tid: number;
  comm: string;
  state: string;
  wchan?: string;
  syscall?: string;
  rest: string;
}

/**
 * ^task (\d+) \((.*)\) state=(\S+)(?:\s+wchan=(\S*))?(?:\s+syscall=(\S*))?(.*)$ — the comm
 * runs to the last ") state=" the rest allows (comms may hold ")" and spaces).
 */
export function parseTaskLine(line: string): TaskLine | undefined {
  if (!line.startsWith('task ')) return undefined;
  const digitsEnd = skipDigits(line, 'task '.length);
  if (digitsEnd === 'task '.length || !line.startsWith(' (', digitsEnd)) return undefined;
  const commStart = digitsEnd + 2;
  const commLimit = firstLineTerminator(line, commStart);
  const lastLT = lastLineTerminator(line);
  const marker = ') state=';
  // Latest first; what each try reads stops at the next ") state=" (its space ends the runs).
  for (let at = line.lastIndexOf(marker); at >= commStart; at = line.lastIndexOf(marker, at - 1)) {
    if (at > commLimit) continue;
    const t = taskTail(line, at + marker.length, lastLT);
    if (t) return { tid: Number(line.slice('task '.length, digitsEnd)), comm: line.slice(commStart, at), ...t };
  }
  return undefined;
}

/** state=(\S+)(?:\s+wchan=(\S*))?(?:\s+syscall=(\S*))?(.*)$ from `from`; "." takes no line terminator. */
function taskTail(line: string, from: number, lastLT: number): Omit<TaskLine, 'tid' | 'comm'> | undefined {
  const stateEnd = skipNonSpace(line, from);
  if (stateEnd === from) return undefined;
  const state = line.slice(from, stateEnd);
  const rest = (at: number) => (lastLT < at ? line.slice(at) : undefined);
  const wchanEnd = itemEnd(line, stateEnd, 'wchan=');
  if (wchanEnd >= 0) {
    const wchan = line.slice(skipSpace(line, stateEnd) + 'wchan='.length, wchanEnd);
    const syscallEnd = itemEnd(line, wchanEnd, 'syscall=');
    const afterSyscall = syscallEnd >= 0 ? rest(syscallEnd) : undefined;
    if (afterSyscall !== undefined) {
      return { state, wchan, syscall: line.slice(skipSpace(line, wchanEnd) + 'syscall='.length, syscallEnd), rest: afterSyscall };
    }
    const afterWchan = rest(wchanEnd);
    if (afterWchan !== undefined) return { state, wchan, rest: afterWchan };
  }
  const syscallEnd = itemEnd(line, stateEnd, 'syscall=');
  const afterSyscall = syscallEnd >= 0 ? rest(syscallEnd) : undefined;
  if (afterSyscall !== undefined) {
    return { state, syscall: line.slice(skipSpace(line, stateEnd) + 'syscall='.length, syscallEnd), rest: afterSyscall };
  }
  const afterState = rest(stateEnd);
  return afterState === undefined ? undefined : { state, rest: afterState };
}

/** \s+NAME(\S*) at `at`: the end of the value, or -1. */
function itemEnd(line: string, at: number, name: string): number {
  const w = skipSpace(line, at);
  if (w === at || !line.startsWith(name, w)) return -1;
  return skipNonSpace(line, w + name.length);
}

/** ^\s*\[<[0-9a-fA-Fx]*>\]\s+(\S.*?)\s*$ — the frame after "[<addr>]", trailing whitespace dropped. */
export function parseStackLine(line: string): string | undefined {
  let i = skipSpace(line, 0);
  if (!line.startsWith('[<', i)) return undefined;
  i += 2;
  for (
    let c = line.charCodeAt(i);
    isDigit(c) || c === 120 /* x */ || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
    c = line.charCodeAt(++i)
  );
  if (!line.startsWith('>]', i)) return undefined;
  const from = skipSpace(line, i + 2);
  const end = trimmedEnd(line);
  if (from === i + 2 || end <= from || firstLineTerminator(line, from) < end) return undefined;
  return line.slice(from, end);
}

function skipDigits(line: string, from: number): number {
  let i = from;
  while (i < line.length && isDigit(line.charCodeAt(i))) i++;
  return i;
}

function parseSyscall(value: string | undefined, rest: string, arch: Arch | undefined): ThreadSyscall {
  if (value === undefined || value === '' || value === '?') return { kind: 'unknown' };
  if (value === 'running') return { kind: 'running' };
  if (value === 'none') return { kind: 'none' };
  if (!/^-?\d+$/.test(value)) return { kind: 'unknown' };
  const nr = Number(value);
  if (nr < 0) return { kind: 'none' };
  const args = rest.trim() ? rest.trim().split(/\s+/) : [];
  const out: ThreadSyscall = { kind: 'syscall', nr, args };
  const name = syscallName(arch, nr);
  if (name) out.name = name;
  return out;
}

/** Parses a threads dump as far as it goes. Never throws. */
export function parseThreads(text: string): ThreadsDump {
  const dump: ThreadsDump = { pid: NaN, comm: '', tasks: [], skippedLines: 0 };
  if (typeof text !== 'string') return dump;
  let cur: ThreadTask | undefined;
  for (const line of text.split(/\r?\n/)) {
    if (line.length > MAX_DUMP_LINE_CHARS) {
      dump.skippedLines++;
      dump.longLines = (dump.longLines ?? 0) + 1;
      continue;
    }
    if (line.trim() === '') continue;
    if (line.startsWith('#')) {
      (dump.comments ??= []).push(line.replace(/^#\s?/, '').trimEnd());
      continue;
    }
    const t = parseTaskLine(line);
    if (t) {
      cur = { tid: t.tid, comm: t.comm, state: t.state, syscall: parseSyscall(t.syscall, t.rest, dump.arch), stack: [] };
      if (t.wchan && t.wchan !== '0' && t.wchan !== '?') cur.wchan = t.wchan;
      dump.tasks.push(cur);
      continue;
    }
    const h = parseThreadsHeader(line);
    if (h) {
      dump.pid = h.pid;
      dump.comm = h.comm;
      const arch = normalizeArch(h.arch);
      if (arch) dump.arch = arch;
      cur = undefined;
      continue;
    }
    if (cur && (line.charCodeAt(0) === 32 || line.charCodeAt(0) === 9)) {
      const frame = parseStackLine(line);
      if (frame !== undefined) cur.stack.push(frame);
      else (cur.notes ??= []).push(line.trim());
      continue;
    }
    dump.skippedLines++;
  }
  return dump;
}

// ---- grouping ----

/** "futex_wait_queue+0x60/0x90" → "futex_wait_queue". */
export function stackSymbol(frame: string): string {
  const plus = frame.indexOf('+');
  return (plus > 0 ? frame.slice(0, plus) : frame).trim();
}

function syscallKey(s: ThreadSyscall): string {
  return s.kind === 'syscall' ? String(s.nr) : s.kind;
}

/** The identity diffThreads compares: state, wchan and the stack's symbols. */
export function taskPlaceKey(t: ThreadTask): string {
  return `${t.state}\u0000${t.wchan ?? ''}\u0000${t.stack.map(stackSymbol).join('\u0001')}`;
}

function argsOf(s: ThreadSyscall): string {
  return s.kind === 'syscall' ? s.args.join(' ') : '';
}

function groupKey(t: ThreadTask): string {
  return `${taskPlaceKey(t)}\u0000${syscallKey(t.syscall)}`;
}

function blockedInOf(t: ThreadTask): string {
  if (t.wchan) return t.wchan;
  const top = t.stack[0];
  if (top) return stackSymbol(top);
  switch (t.syscall.kind) {
    case 'syscall':
      return t.syscall.name ?? `syscall ${t.syscall.nr}`;
    case 'running':
      return 'running';
    case 'none':
      return 'not in a syscall';
    default:
      return '?';
  }
}

/** Groups tasks by (state, wchan, syscall nr, stack): D (uninterruptible) first, then by count, then lowest tid. */
export function groupThreads(dump: ThreadsDump | readonly ThreadTask[]): ThreadGroup[] {
  const tasks = Array.isArray(dump) ? (dump as readonly ThreadTask[]) : (dump as ThreadsDump).tasks;
  const byKey = new Map<string, { first: ThreadTask; tids: number[]; comms: Set<string>; argsAgree: boolean }>();
  for (const t of tasks) {
    const key = groupKey(t);
    let acc = byKey.get(key);
    if (!acc) {
      acc = { first: t, tids: [], comms: new Set(), argsAgree: true };
      byKey.set(key, acc);
    } else if (acc.argsAgree && argsOf(acc.first.syscall) !== argsOf(t.syscall)) {
      acc.argsAgree = false;
    }
    acc.tids.push(t.tid);
    if (acc.comms.size < 5) acc.comms.add(t.comm);
  }
  const groups: ThreadGroup[] = [];
  for (const acc of byKey.values()) {
    const t = acc.first;
    const tids = acc.tids.sort((a, b) => a - b);
    // The syscall arguments stay only where every member had the same (futex addresses differ per thread).
    const syscall: ThreadSyscall =
      t.syscall.kind === 'syscall' ? { ...t.syscall, args: acc.argsAgree ? t.syscall.args.slice() : [] } : t.syscall;
    const g: ThreadGroup = {
      count: tids.length,
      tids: tids.slice(0, 20),
      comms: [...acc.comms],
      state: t.state,
      syscall,
      stack: t.stack.slice(),
      blockedIn: blockedInOf(t),
    };
    if (t.wchan) g.wchan = t.wchan;
    groups.push(g);
  }
  return groups.sort(
    (a, b) => Number(b.state === 'D') - Number(a.state === 'D') || b.count - a.count || (a.tids[0] ?? 0) - (b.tids[0] ?? 0),
  );
}

function syscallLabel(s: ThreadSyscall): string {
  switch (s.kind) {
    case 'syscall':
      return s.name ?? `#${s.nr}`;
    case 'running':
      return 'running';
    case 'none':
      return '-';
    default:
      return '?';
  }
}

/** One line per group: "COUNT  STATE  SYSCALL  blocked in X  [comm, …]", columns aligned. */
export function summarizeThreads(groups: readonly ThreadGroup[], options: { limit?: number } = {}): string {
  const shown = groups.slice(0, Math.max(0, options.limit ?? groups.length));
  const rows = shown.map(
    (g) => [String(g.count), g.state, syscallLabel(g.syscall), `blocked in ${g.blockedIn}`, g.comms.join(', ')] as const,
  );
  const w0 = Math.max(0, ...rows.map((r) => r[0].length));
  const w1 = Math.max(0, ...rows.map((r) => r[1].length));
  const w2 = Math.max(0, ...rows.map((r) => r[2].length));
  const w3 = Math.max(0, ...rows.map((r) => r[3].length));
  const lines = rows.map((r) => `${r[0].padStart(w0)}  ${r[1].padEnd(w1)}  ${r[2].padEnd(w2)}  ${r[3].padEnd(w3)}  [${r[4]}]`);
  const rest = groups.slice(shown.length);
  if (rest.length > 0) {
    const n = rest.reduce((s, g) => s + g.count, 0);
    lines.push(`… ${rest.length} more group${rest.length === 1 ? '' : 's'} (${n} thread${n === 1 ? '' : 's'})`);
  }
  return lines.join('\n');
}
