// The hardened probe, small, inside `make test`: every row must hold.

import { expect, it } from 'vitest';
import { run } from './probe.js';

it('the probe stays bounded whatever it is fed, and through a long time alone', async () => {
  const rows = await run({ full: false, log: () => undefined });
  expect(rows).toHaveLength(3);
  for (const r of rows) expect(r.held, `${r.scenario}: ${r.figure}`).toBe(true);
}, 300_000);
