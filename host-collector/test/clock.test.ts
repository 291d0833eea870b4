import { afterEach, describe, expect, it, vi } from 'vitest';
import { GuestClock } from '../src/collector/clock.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('GuestClock', () => {
  it('is unknown until the first sample', () => {
    vi.useFakeTimers();
    vi.setSystemTime(1_000_000);
    const c = new GuestClock();
    expect(c.known).toBe(false);
    // without a sample, a guest time is placed at "now"
    expect(c.toHost(1234)).toBe(1_000_000);
  });

  it('maps guest times with the first sample', () => {
    const c = new GuestClock();
    c.observe(1000, 501_000);
    expect(c.known).toBe(true);
    expect(c.toHost(1000)).toBe(501_000);
    expect(c.toHost(2500)).toBe(502_500);
  });

  it('keeps the smallest offset (the least delayed sample)', () => {
    const c = new GuestClock();
    c.observe(1000, 501_000); // offset 500000
    c.observe(2000, 502_300); // 500300: delayed in transit, ignored
    expect(c.toHost(0)).toBe(500_000);
    c.observe(3000, 502_900); // 499900: better
    expect(c.toHost(0)).toBe(499_900);
    c.observe(4000, 510_000); // worse again
    expect(c.toHost(0)).toBe(499_900);
  });

  it('uses Date.now() as the default host time', () => {
    vi.useFakeTimers();
    vi.setSystemTime(2_000_000);
    const c = new GuestClock();
    c.observe(500);
    expect(c.toHost(500)).toBe(2_000_000);
  });

  it('a new clock starts a new estimate', () => {
    const a = new GuestClock();
    a.observe(1000, 2000);
    const b = new GuestClock();
    b.observe(1000, 90_000);
    expect(a.toHost(1000)).toBe(2000);
    expect(b.toHost(1000)).toBe(90_000);
  });
});
