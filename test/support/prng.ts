// A small seeded PRNG (mulberry32) for fuzzers and property tests on either side: the same
// seed gives the same inputs on every machine, so a failure is reproduced by its seed alone.

export class Prng {
  private state: number;

  constructor(readonly seed: number) {
    this.state = seed >>> 0;
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** A float in [0, 1). */
  float(): number {
    return this.u32() / 2 ** 32;
  }

  /** An integer in [lo, hi] (inclusive). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.float() * items.length)]!;
  }

  bytes(n: number): Buffer {
    const out = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) out[i] = this.u32() & 0xff;
    return out;
  }
}

/** A seed from the environment (VD_SEED) or the clock, for runs that print the one they used. */
export function seedFromEnv(fallback = Date.now()): number {
  const given = process.env.VD_SEED;
  return given !== undefined && /^\d+$/.test(given) ? Number(given) >>> 0 : fallback >>> 0;
}
