// The snapshot/restore scenario, small (10 resets), inside `make test`: every row must hold.
// `make reliability` runs it in full (100 resets, each within 200 ms).

import { expect, it } from 'vitest';
import { run } from './restores.js';

it('transport resets: each reconnects, generations counted right, no event under the wrong one', async () => {
  const lines: string[] = [];
  const rows = await run({ full: false, log: (line) => lines.push(line) });
  expect(rows).toHaveLength(1);
  for (const r of rows) expect(r.held, `${r.scenario}: ${r.figure}\n${lines.join('\n')}`).toBe(true);
  expect(rows[0]!.figure).toMatch(/^10\/10 reconnected/);
}, 180_000);
