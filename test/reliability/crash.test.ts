// Crash safety, small (a fixed seed, few rounds), inside `make test`: every row must hold.

import { expect, it } from 'vitest';
import { run } from './crash.js';

it('nothing lost or duplicated through collector, probe, SQLite and disk failures', async () => {
  const rows = await run({ full: false, log: () => undefined });
  expect(rows).toHaveLength(4);
  for (const r of rows) expect(r.held, `${r.scenario}: ${r.figure}`).toBe(true);
}, 300_000);
