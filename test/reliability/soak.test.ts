// The soak run small (400 sessions for 50 s); the full one (5,000 for 10 minutes) is `make reliability`.
import { describe, expect, it } from 'vitest';
import { run } from './soak.js';

describe('reliability: soak (small)', () => {
  it('sessions held for a while lose no event and the live heap of the collector does not grow', async () => {
    const lines: string[] = [];
    const [row] = await run({ full: false, log: (l) => lines.push(l) });
    expect(row, `${row?.figure}\n${lines.join('\n')}`).toMatchObject({ area: 'load', held: true });
  }, 180_000);
});
