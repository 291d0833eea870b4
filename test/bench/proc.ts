// What the benchmarks read about processes from /proc (CPU time, memory, run-queue wait).

import fs from 'node:fs';

/** Clock ticks per second of /proc/<pid>/stat's times (USER_HZ, 100 on Linux). */
const CLK_TCK = 100;

/** The fields of /proc/<pid>/stat after the command name (index 0 is field 3, state). */
function statFields(pid: number | 'self'): string[] {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** CPU time of the process, user + system, in ms (fields 14 and 15). */
export function cpuMs(pid: number): number {
  const f = statFields(pid);
  return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
}

/** CPU time of this process's children that exited and were waited for, in ms (fields 16 and 17). */
export function childrenCpuMs(): number {
  const f = statFields('self');
  return ((Number(f[13]) + Number(f[14])) * 1000) / CLK_TCK;
}

/** Numeric fields of /proc/<pid>/status (kB for the memory ones), NaN for a missing key. */
export function statusFields<K extends string>(pid: number, keys: readonly K[]): Record<K, number> {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const out = {} as Record<K, number>;
  for (const k of keys) out[k] = Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? Number.NaN);
  return out;
}

/** Time the process's main thread spent runnable but waiting for a CPU (ms): what a busy
 *  machine adds to every latency here. From /proc/<pid>/schedstat (run_delay, ns). */
export function runDelayMs(pid: number | 'self'): number {
  return Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6;
}

/** CPU time of each thread (ms, from /proc/<pid>/task/<tid>/schedstat: nanoseconds on a CPU,
 *  finer than stat's 10 ms ticks), by thread id; the main thread's id is the pid. */
export function threadCpuMs(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(Number(tid), Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1e6);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return out;
}

/** A process's anonymous memory by kind (kB), from /proc/<pid>/smaps: anonymous 256 KiB
 *  mappings (V8 allocates its heap in pages of that size), malloc's brk heap, and the rest
 *  (V8's other reservations, thread stacks, mmapped malloc chunks). */
export interface AnonBreakdown {
  v8PagesKb: number;
  v8Pages: number;
  brkKb: number;
  otherKb: number;
}

export function anonBreakdown(pid: number): AnonBreakdown {
  const out: AnonBreakdown = { v8PagesKb: 0, v8Pages: 0, brkKb: 0, otherKb: 0 };
  let sizeKb = 0;
  let name = '';
  for (const line of fs.readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const range = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (range) {
      sizeKb = (Number.parseInt(range[2]!, 16) - Number.parseInt(range[1]!, 16)) / 1024;
      name = range[3]!;
      continue;
    }
    const anon = /^Anonymous:\s+(\d+) kB/.exec(line);
    if (!anon || anon[1] === '0') continue;
    const kb = Number(anon[1]);
    if (name === '[heap]') out.brkKb += kb;
    else if (name === '' && sizeKb === 256) {
      out.v8PagesKb += kb;
      out.v8Pages++;
    } else out.otherKb += kb;
  }
  return out;
}
