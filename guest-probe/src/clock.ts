// Times the probe reports are milliseconds since the guest booted: an operator reads
// "bound 1.234 s after boot", and a snapshot's clone shares the timeline it came from.
// /proc/uptime (10 ms resolution) anchors CLOCK_MONOTONIC once at start.
//
// monotonicMs() is the probe's one monotonic clock, read from process.hrtime rather than
// performance.now(): the first access to the global `performance` loads node:perf_hooks
// (about a millisecond), and the clock is read on the way to the probe's first hello.

import { readUptimeMs } from './proc/system.js';

/** CLOCK_MONOTONIC in ms. */
export function monotonicMs(): number {
  const [s, ns] = process.hrtime();
  return s * 1000 + ns / 1e6;
}

function uptimeMs(procRoot: string): number {
  try {
    return readUptimeMs(procRoot) ?? monotonicMs();
  } catch {
    return monotonicMs();
  }
}

/** `read()` (a clock in ms) minus monotonicMs() at the same instant: taken between two
 *  monotonicMs() readings, the closest of a few tries, so that being descheduled in
 *  between (a busy boot) does not shift every time the probe reports. */
function bracketed(read: () => number): number {
  let best = Infinity;
  let out = 0;
  for (let i = 0; i < 3 && best > 1; i++) {
    const before = monotonicMs();
    const value = read();
    const after = monotonicMs();
    if (after - before < best) {
      best = after - before;
      out = value - (before + after) / 2;
    }
  }
  return out;
}

export class BootClock {
  /** sinceBootMs() minus CLOCK_MONOTONIC in ms: /proc/uptime counts time suspended
   *  (CLOCK_BOOTTIME), the monotonic clock (and a journal entry's stamp) does not. */
  private readonly base: number;

  constructor(procRoot = '/proc') {
    this.base = bracketed(() => uptimeMs(procRoot));
  }

  sinceBootMs(): number {
    return Math.round((this.base + monotonicMs()) * 1000) / 1000;
  }

  /** A CLOCK_MONOTONIC time (µs, e.g. a journal entry's __MONOTONIC_TIMESTAMP) on this clock. */
  fromMonotonicUs(us: number): number {
    return Math.max(0, Math.round((us / 1000 + this.base) * 1000) / 1000);
  }
}
