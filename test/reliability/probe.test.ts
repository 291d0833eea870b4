// The hardened probe, small, inside `make test`: every row must hold.

import { expect, it } from 'vitest';
import { PARTS, run } from './probe.js';

it.each(Object.entries(PARTS))(
  'the probe stays bounded: %s',
  async (_name, part) => {
    const rows = await run({ full: false, log: () => undefined }, [part]);
    expect(rows).toHaveLength(1);
    for (const r of rows) expect(r.held, `${r.scenario}: ${r.figure}`).toBe(true);
  },
  300_000,
);
