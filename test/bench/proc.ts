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
