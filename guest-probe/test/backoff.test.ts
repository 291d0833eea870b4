import { describe, expect, it } from 'vitest';
import { Backoff } from '../src/backoff.js';

/** A random source that replays `values` in a loop and counts its calls. */
function seq(...values: number[]) {
  let i = 0;
  const f = () => values[i++ % values.length]!;
  return Object.assign(f, { calls: () => i });
}

const take = (b: Backoff, n: number) => Array.from({ length: n }, () => b.next());

describe('Backoff', () => {
  it('starts in tens of milliseconds by default', () => {
    const low = new Backoff(undefined, undefined, () => 0).next();
    const high = new Backoff(undefined, undefined, () => 0.999999).next();
    expect(low).toBeGreaterThanOrEqual(10);
    expect(high).toBeLessThan(100);
    expect(low).toBeLessThan(high);
  });

  it('doubles on each attempt (random fixed at 0: the fixed half only)', () => {
    const b = new Backoff(20, 1_000_000, () => 0);
    expect(take(b, 6)).toEqual([10, 20, 40, 80, 160, 320]);
  });

  it('doubles on each attempt (random fixed at 1: the whole ceiling)', () => {
    const b = new Backoff(20, 1_000_000, () => 1);
    expect(take(b, 5)).toEqual([20, 40, 80, 160, 320]);
  });

  it('is capped', () => {
    const b = new Backoff(20, 2000, () => 1);
    const delays = take(b, 12);
    expect(delays.slice(0, 7)).toEqual([20, 40, 80, 160, 320, 640, 1280]);
    expect(delays.slice(7)).toEqual([2000, 2000, 2000, 2000, 2000]);
    expect(Math.max(...delays)).toBe(2000);
  });

  it('stays capped (and finite) after very many attempts', () => {
    const b = new Backoff(20, 2000, () => 0.5);
    let last = 0;
    for (let i = 0; i < 5000; i++) last = b.next();
    expect(Number.isFinite(last)).toBe(true);
    expect(last).toBe(1500);
  });

  it('is half fixed, half jitter: ceiling/2 + random·ceiling/2', () => {
    const r = seq(0, 0.25, 0.5, 0.75, 1);
    const b = new Backoff(100, 100, r); // ceiling is 100 every time
    expect(take(b, 5)).toEqual([50, 62.5, 75, 87.5, 100]);
    expect(r.calls()).toBe(5); // one random draw per delay
  });

  it('jitter spreads a fleet: different randoms give different delays within [c/2, c]', () => {
    const delays = [0.1, 0.3, 0.6, 0.9].map((x) => {
      const b = new Backoff(20, 2000, () => x);
      b.next();
      b.next();
      return b.next(); // third attempt: ceiling 80
    });
    expect(new Set(delays).size).toBe(4);
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(40);
      expect(d).toBeLessThanOrEqual(80);
    }
  });

  it('uses Math.random by default and stays within bounds', () => {
    const b = new Backoff(20, 2000);
    for (let attempt = 0; attempt < 12; attempt++) {
      const ceiling = Math.min(2000, 20 * 2 ** attempt);
      const d = b.next();
      expect(d).toBeGreaterThanOrEqual(ceiling / 2);
      expect(d).toBeLessThanOrEqual(ceiling);
    }
  });

  it('reset() starts over from the base delay', () => {
    const b = new Backoff(20, 2000, () => 1);
    take(b, 8);
    expect(b.next()).toBe(2000);
    b.reset();
    expect(take(b, 3)).toEqual([20, 40, 80]);
    b.reset();
    b.reset();
    expect(b.next()).toBe(20);
  });
});
