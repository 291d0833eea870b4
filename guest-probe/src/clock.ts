// Times the probe reports are milliseconds since the guest booted: an operator reads
// "bound 1.234 s after boot", and a snapshot's clone shares the timeline it came from.
// /proc/uptime (10 ms resolution) anchors performance.now() (monotonic) once at start.

import { readUptimeMs } from './proc/system.js';

function uptimeMs(procRoot: string): number {
  try {
    return readUptimeMs(procRoot) ?? performance.now();
  } catch {
    return performance.now();
  }
}

export class BootClock {
  private readonly base: number;
  /** sinceBootMs() minus CLOCK_MONOTONIC in ms: /proc/uptime counts time suspended
   *  (CLOCK_BOOTTIME), the monotonic clock (performance.now(), journal entries) does not. */
  private readonly monotonicOffset: number;

  constructor(procRoot = '/proc') {
    const now = performance.now();
    this.base = uptimeMs(procRoot) - now;
    const originMonotonicMs = Number(process.hrtime.bigint()) / 1e6 - now;
    this.monotonicOffset = this.base - originMonotonicMs;
  }

  sinceBootMs(): number {
    return Math.round((this.base + performance.now()) * 1000) / 1000;
  }

  /** A CLOCK_MONOTONIC time (µs, e.g. a journal entry's __MONOTONIC_TIMESTAMP) on this clock. */
  fromMonotonicUs(us: number): number {
    return Math.max(0, Math.round((us / 1000 + this.monotonicOffset) * 1000) / 1000);
  }
}
