// BootClock: the probe's times are ms since boot; journal entries come in CLOCK_MONOTONIC µs.
import { describe, expect, it } from 'vitest';
import { BootClock } from '../src/clock.js';

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
});
