// Every access check (they are small already: the same in `make test` and `make reliability`).
import { describe, expect, it } from 'vitest';
import { run } from './access.js';

describe('reliability: access', () => {
  it('token, CORS, file modes and inert guest strings in a browser all hold', async () => {
    const rows = await run({ full: false, log: () => {} });
    expect(rows.filter((r) => !r.held).map((r) => `${r.scenario}: ${r.figure}`)).toEqual([]);
    expect(rows).toHaveLength(5);
  }, 180_000);
});
