// Times the probe reports are milliseconds since the guest booted: an operator reads
// "bound 1.234 s after boot", and a snapshot's clone shares the timeline it came from.
// /proc/uptime (10 ms resolution) anchors performance.now() (monotonic) once at start.

import fs from 'node:fs';

function readUptimeMs(procRoot: string): number {
  try {
    return Number.parseFloat(fs.readFileSync(`${procRoot}/uptime`, 'latin1')) * 1000;
  } catch {
    return performance.now();
  }
}

export class BootClock {
  private readonly base: number;

  constructor(procRoot = '/proc') {
    this.base = readUptimeMs(procRoot) - performance.now();
  }

  sinceBootMs(): number {
    return Math.round((this.base + performance.now()) * 1000) / 1000;
  }
}
