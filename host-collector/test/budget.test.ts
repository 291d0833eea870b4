import { describe, expect, it } from 'vitest';
import { Budget, DEFAULT_BUDGET, type BudgetLimits } from '../src/collector/budget.js';

const limits: BudgetLimits = { bytesPerSec: 100, burstBytes: 1000, framesPerSec: 10, burstFrames: 5 };

describe('Budget.spendBytes', () => {
  it('allows a full burst at once and cuts off the next byte', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(true);
    expect(b.spendBytes(1, 0)).toBe(false);
  });

  it('allows many small spends up to the burst', () => {
    const b = new Budget(limits, 0);
    for (let i = 0; i < 10; i++) expect(b.spendBytes(100, 0)).toBe(true);
    expect(b.spendBytes(1, 0)).toBe(false);
  });

  it('refuses a single chunk larger than the burst', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1001, 0)).toBe(false);
  });

  it('refills at bytesPerSec', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(true);
    // 500 ms later: 50 bytes back.
    expect(b.spendBytes(50, 500)).toBe(true);
    expect(b.spendBytes(1, 500)).toBe(false);
    // the overdraft of 1 byte is paid back first: after another second, 99 remain.
    expect(b.spendBytes(99, 1500)).toBe(true);
    expect(b.spendBytes(1, 1500)).toBe(false);
  });

  it('never refills above the burst', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(10, 0)).toBe(true);
    // an hour idle only restores the burst, not an hour's worth
    expect(b.spendBytes(1001, 3_600_000)).toBe(false);
    const c = new Budget(limits, 0);
    expect(c.spendBytes(1000, 3_600_000)).toBe(true);
    expect(c.spendBytes(1, 3_600_000)).toBe(false);
  });

  it('sustains exactly the configured rate', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(true);
    for (let t = 100; t <= 5000; t += 100) expect(b.spendBytes(10, t)).toBe(true);
    expect(b.spendBytes(1, 5000)).toBe(false);
  });

  it('byte and frame budgets are independent', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(true);
    expect(b.spendFrame(0)).toBe(true);
  });
});

describe('Budget.spendFrame', () => {
  it('allows burstFrames then cuts off', () => {
    const b = new Budget(limits, 0);
    for (let i = 0; i < 5; i++) expect(b.spendFrame(0)).toBe(true);
    expect(b.spendFrame(0)).toBe(false);
  });

  it('refills at framesPerSec, capped at the burst', () => {
    const b = new Budget(limits, 0);
    for (let i = 0; i < 5; i++) b.spendFrame(0);
    // 100 ms at 10/s: one frame back
    expect(b.spendFrame(100)).toBe(true);
    expect(b.spendFrame(100)).toBe(false);
    // long idle: only the burst comes back
    for (let i = 0; i < 5; i++) expect(b.spendFrame(100_000)).toBe(true);
    expect(b.spendFrame(100_000)).toBe(false);
  });

  it('the default budget allows a full ring replay burst', () => {
    const b = new Budget(DEFAULT_BUDGET, 0);
    expect(b.spendBytes(8 * 1024 * 1024, 0)).toBe(true);
    for (let i = 0; i < 5000; i++) expect(b.spendFrame(0)).toBe(true);
    expect(b.spendFrame(0)).toBe(false);
  });
});

describe('Budget.grant', () => {
  it('allows solicited bytes and frames on top of the bucket while the grant lasts', () => {
    const b = new Budget(limits, 0);
    b.grant(5000); // frames: ceil(5000 / 1024) + 16 = 21
    expect(b.spendBytes(5000, 0)).toBe(true);
    for (let i = 0; i < 21; i++) expect(b.spendFrame(0)).toBe(true);
    // the grant is used up: the whole bucket is still there
    expect(b.spendBytes(1000, 0)).toBe(true);
    for (let i = 0; i < 5; i++) expect(b.spendFrame(0)).toBe(true);
    expect(b.spendBytes(1, 0)).toBe(false);
    expect(b.spendFrame(0)).toBe(false);
  });

  it('takes back what was not used when released', () => {
    const b = new Budget(limits, 0);
    const g = b.grant(64 * 1024 * 1024);
    expect(b.spendBytes(3000, 0)).toBe(true);
    g.release();
    // the unused 64 MiB are gone: only the bucket (untouched by the 3000) is left
    expect(b.spendBytes(1000, 0)).toBe(true);
    expect(b.spendBytes(1, 0)).toBe(false);
    g.release(); // twice is harmless
    expect(b.spendBytes(1, 0)).toBe(false);
  });

  it('spends the oldest grant first, and each release takes back only its own rest', () => {
    const b = new Budget(limits, 0);
    const first = b.grant(100);
    const second = b.grant(200);
    expect(b.spendBytes(150, 0)).toBe(true); // all of the first, 50 of the second
    first.release();
    expect(b.spendBytes(150, 0)).toBe(true); // the rest of the second
    second.release();
    expect(b.spendBytes(1000, 0)).toBe(true); // the bucket
    expect(b.spendBytes(1, 0)).toBe(false);
  });

  it('a grant never raises the bucket: once released, refill stops at the burst', () => {
    const b = new Budget(limits, 0);
    b.grant(10_000).release();
    expect(b.spendBytes(1001, 3_600_000)).toBe(false);
  });
});
