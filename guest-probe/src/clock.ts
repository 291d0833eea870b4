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

/** `read()` (a clock in ms) minus performance.now() at the same instant: taken between two
 *  performance.now() readings, the closest of a few tries, so that being descheduled in
 *  between (a busy boot) does not shift every time the probe reports. */
function bracketed(read: () => number): number {
  let best = Infinity;
  let out = 0;
  for (let i = 0; i < 3 && best > 1; i++) {
    const before = performance.now();
    const value = read();
    const after = performance.now();
    if (after - before < best) {
      best = after - before;
      out = value - (before + after) / 2;
    }
  }
  return out;
}

export class BootClock {
  private readonly base: number;
  /** sinceBootMs() minus CLOCK_MONOTONIC in ms: /proc/uptime counts time suspended
   *  (CLOCK_BOOTTIME), the monotonic clock (performance.now(), journal entries) does not. */
  private readonly monotonicOffset: number;

  constructor(procRoot = '/proc') {
    this.base = bracketed(() => uptimeMs(procRoot));
    // performance.now() counts CLOCK_MONOTONIC from the process's start.
    const originMonotonicMs = bracketed(() => Number(process.hrtime.bigint()) / 1e6);
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
