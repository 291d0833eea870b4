// The Firecracker faults, small (one round each), inside `make test`: every row must hold.

import { expect, it } from 'vitest';
import { run } from './faults.js';

it('the probe and the collector come through each Firecracker fault', async () => {
  const rows = await run({ full: false, log: () => undefined });
  expect(rows.length).toBeGreaterThanOrEqual(6);
  for (const r of rows) expect(r.held, `${r.scenario}: ${r.figure}`).toBe(true);
}, 300_000);
