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

  constructor(procRoot = '/proc') {
    this.base = uptimeMs(procRoot) - performance.now();
  }

  sinceBootMs(): number {
    return Math.round((this.base + performance.now()) * 1000) / 1000;
  }
}
