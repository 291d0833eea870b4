import { describe, expect, it } from 'vitest';
import { Prng } from './prng.js';

describe('Prng', () => {
  it('is the same sequence for the same seed, and another for another', () => {
    const a = new Prng(42);
    const b = new Prng(42);
    const c = new Prng(43);
    const xs = Array.from({ length: 100 }, () => a.u32());
    expect(Array.from({ length: 100 }, () => b.u32())).toEqual(xs);
    expect(Array.from({ length: 100 }, () => c.u32())).not.toEqual(xs);
  });

  it('int() stays in range and reaches both ends', () => {
    const r = new Prng(1);
    const seen = new Set<number>();
    for (let i = 0; i < 2000; i++) {
      const v = r.int(-3, 3);
      expect(v).toBeGreaterThanOrEqual(-3);
      expect(v).toBeLessThanOrEqual(3);
      seen.add(v);
    }
    expect([...seen].sort()).toEqual([-1, -2, -3, 0, 1, 2, 3].sort());
  });
});
