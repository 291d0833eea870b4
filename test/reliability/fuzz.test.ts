// The fuzzer's fixed-seed small set (a few thousand frames) against a live collector; the
// full run (a million frames) is `make reliability`.
import { describe, expect, it } from 'vitest';
import { run } from './fuzz.js';

describe('reliability: fuzz (small)', () => {
  it('a collector fed hostile frames neither crashes, hangs nor grows, and still serves a well-behaved probe', async () => {
    const lines: string[] = [];
    const [row] = await run({ full: false, log: (l) => lines.push(l) });
    expect(row, lines.join('\n')).toMatchObject({ area: 'hostile input', held: true });
  }, 180_000);
});
