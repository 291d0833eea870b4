// BootClock: the probe's times are ms since boot; journal entries come in CLOCK_MONOTONIC µs.
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import { BootClock, monotonicMs } from '../src/clock.js';

describe('BootClock', () => {
  it('places a CLOCK_MONOTONIC time on its own timeline', () => {
    const clock = new BootClock();
    const mono = Number(process.hrtime.bigint() / 1000n);
    const now = clock.sinceBootMs();
    // /proc/uptime anchors the clock to 10 ms; both readings are within a few ms of each other.
    expect(Math.abs(clock.fromMonotonicUs(mono) - now)).toBeLessThan(50);
    // A time 2.5 s earlier on the monotonic clock is 2.5 s earlier here too.
    expect(clock.fromMonotonicUs(mono - 2_500_000)).toBeCloseTo(clock.fromMonotonicUs(mono) - 2500, 3);
  });

  it('reads ms since boot, anchored to /proc/uptime, and moves with the monotonic clock', async () => {
    const clock = new BootClock();
    const uptimeMs = Number(fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0]) * 1000;
    // /proc/uptime has 10 ms steps; the two readings are a few ms apart at most.
    expect(Math.abs(clock.sinceBootMs() - uptimeMs)).toBeLessThan(50);
    const [b0, m0] = [clock.sinceBootMs(), monotonicMs()];
    await new Promise((r) => setTimeout(r, 200));
    const [b1, m1] = [clock.sinceBootMs(), monotonicMs()];
    expect(b1 - b0).toBeGreaterThanOrEqual(199);
    // Room for a preemption between the paired readings on a busy machine.
    expect(Math.abs(b1 - b0 - (m1 - m0))).toBeLessThan(25);
  });
});
