import { describe, expect, it } from 'vitest';
import { Budget, CALM_MS, DEFAULT_BUDGET, type BudgetLimits } from '../src/collector/budget.js';

const limits: Partial<BudgetLimits> = { bytesPerSec: 100, burstBytes: 1000, framesPerSec: 10, burstFrames: 5 };

describe('Budget.spendBytes', () => {
  it('allows a full burst at once and cuts off the next byte', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(0);
    expect(b.spendBytes(1, 0)).toBeGreaterThan(0);
  });

  it('allows many small spends up to the burst', () => {
    const b = new Budget(limits, 0);
    for (let i = 0; i < 10; i++) expect(b.spendBytes(100, 0)).toBe(0);
    expect(b.spendBytes(1, 0)).toBeGreaterThan(0);
  });

  it('refuses a single chunk larger than the burst', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1001, 0)).toBeGreaterThan(0);
  });

  it('refills at bytesPerSec', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(0);
    // 500 ms later: 50 bytes back.
    expect(b.spendBytes(50, 500)).toBe(0);
    expect(b.spendBytes(1, 500)).toBeGreaterThan(0);
    // the overdraft of 1 byte is paid back first: after another second, 99 remain.
    expect(b.spendBytes(99, 1500)).toBe(0);
    expect(b.spendBytes(1, 1500)).toBeGreaterThan(0);
  });

  it('never refills above the burst', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(10, 0)).toBe(0);
    // an hour idle only restores the burst, not an hour's worth
    expect(b.spendBytes(1001, 3_600_000)).toBeGreaterThan(0);
    const c = new Budget(limits, 0);
    expect(c.spendBytes(1000, 3_600_000)).toBe(0);
    expect(c.spendBytes(1, 3_600_000)).toBeGreaterThan(0);
  });

  it('sustains exactly the configured rate', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(0);
    for (let t = 100; t <= 5000; t += 100) expect(b.spendBytes(10, t)).toBe(0);
    expect(b.spendBytes(1, 5000)).toBeGreaterThan(0);
  });

  it('byte and frame budgets are independent', () => {
    const b = new Budget(limits, 0);
    expect(b.spendBytes(1000, 0)).toBe(0);
    expect(b.spendFrame(0)).toBe(0);
  });
});

describe('Budget.spendFrame', () => {
  it('allows burstFrames then cuts off', () => {
    const b = new Budget(limits, 0);
    for (let i = 0; i < 5; i++) expect(b.spendFrame(0)).toBe(0);
    expect(b.spendFrame(0)).toBeGreaterThan(0);
  });

  it('refills at framesPerSec, capped at the burst', () => {
    const b = new Budget(limits, 0);
    for (let i = 0; i < 5; i++) b.spendFrame(0);
    // 100 ms at 10/s: one frame back
    expect(b.spendFrame(100)).toBe(0);
    expect(b.spendFrame(100)).toBeGreaterThan(0);
    // long idle: only the burst comes back
    for (let i = 0; i < 5; i++) expect(b.spendFrame(100_000)).toBe(0);
    expect(b.spendFrame(100_000)).toBeGreaterThan(0);
  });

  it('the default budget allows a full ring replay burst', () => {
    const b = new Budget(DEFAULT_BUDGET, 0);
    expect(b.spendBytes(8 * 1024 * 1024, 0)).toBe(0);
    for (let i = 0; i < 5000; i++) expect(b.spendFrame(0)).toBe(0);
    expect(b.spendFrame(0)).toBeGreaterThan(0);
  });
});

describe('Budget.grant', () => {
  it('allows solicited bytes and frames on top of the bucket while the grant lasts', () => {
    const b = new Budget(limits, 0);
    b.grant(5000); // frames: ceil(5000 / 1024) + 16 = 21
    expect(b.spendBytes(5000, 0)).toBe(0);
    for (let i = 0; i < 21; i++) expect(b.spendFrame(0)).toBe(0);
    // the grant is used up: the whole bucket is still there
    expect(b.spendBytes(1000, 0)).toBe(0);
    for (let i = 0; i < 5; i++) expect(b.spendFrame(0)).toBe(0);
    expect(b.spendBytes(1, 0)).toBeGreaterThan(0);
    expect(b.spendFrame(0)).toBeGreaterThan(0);
  });

  it('takes back what was not used when released', () => {
    const b = new Budget(limits, 0);
    const g = b.grant(64 * 1024 * 1024);
    expect(b.spendBytes(3000, 0)).toBe(0);
    g.release();
    // the unused 64 MiB are gone: only the bucket (untouched by the 3000) is left
    expect(b.spendBytes(1000, 0)).toBe(0);
    expect(b.spendBytes(1, 0)).toBeGreaterThan(0);
    g.release(); // twice is harmless
    expect(b.spendBytes(1, 0)).toBeGreaterThan(0);
  });

  it('spends the oldest grant first, and each release takes back only its own rest', () => {
    const b = new Budget(limits, 0);
    const first = b.grant(100);
    const second = b.grant(200);
    expect(b.spendBytes(150, 0)).toBe(0); // all of the first, 50 of the second
    first.release();
    expect(b.spendBytes(150, 0)).toBe(0); // the rest of the second
    second.release();
    expect(b.spendBytes(1000, 0)).toBe(0); // the bucket
    expect(b.spendBytes(1, 0)).toBeGreaterThan(0);
  });

  it('a grant never raises the bucket: once released, refill stops at the burst', () => {
    const b = new Budget(limits, 0);
    b.grant(10_000).release();
    expect(b.spendBytes(1001, 3_600_000)).toBeGreaterThan(0);
  });
});

describe('Budget: throttle, then cut off', () => {
  const tight: Partial<BudgetLimits> = {
    bytesPerSec: 1000,
    burstBytes: 1000,
    framesPerSec: 10,
    burstFrames: 5,
    eventsPerSec: 100,
    burstEvents: 100,
  };

  it('answers how long to stop reading until the bucket is paid back', () => {
    const b = new Budget(tight, 0);
    expect(b.spendBytes(1500, 0)).toBe(500); // 500 in the red at 1000/s
    expect(b.spendEvents(150, 0)).toBe(500); // 50 in the red at 100/s
    expect(b.counters.throttled).toEqual({ bytes: 1, frames: 0, events: 1 });
  });

  it('a flood that resumes the moment it is let go is cut off after cutoffAfterMs', () => {
    const b = new Budget({ ...tight, cutoffAfterMs: 5000 }, 0);
    let t = 0;
    let wait = b.spendBytes(1500, t); // the burst, and 500 more
    expect(wait).toBe(500);
    // Each time reading resumes, another 500 bytes are waiting: throttled again and again.
    const spend = () => {
      t += wait;
      wait = b.spendBytes(500, t);
    };
    for (let i = 0; i < 8; i++) spend();
    expect(t).toBe(4000);
    spend(); // 4500 → held until 5000: still within the 5 s
    expect(() => spend()).toThrow(/over its bytes budget.*5000 ms/);
    expect(b.counters.cutoffs).toBe(1);
  });

  it('an overdraft deeper than cutoffAfterMs can pay back is cut off at once', () => {
    const b = new Budget({ ...tight, cutoffAfterMs: 5000 }, 0);
    expect(() => b.spendBytes(1000 + 6000, 0)).toThrow(expect.objectContaining({ code: 'ERR_RATE_LIMIT' }));
  });

  it('a break longer than CALM_MS starts a new spell: a guest that pauses is never cut off', () => {
    const b = new Budget({ ...tight, cutoffAfterMs: 3000 }, 0);
    let t = 0;
    for (let i = 0; i < 20; i++) {
      const wait = b.spendBytes(1000 + 2000, t); // 2 s in the red after the refill below
      expect(wait).toBeGreaterThan(0);
      t += wait + CALM_MS + 1000 + 1; // held, then quiet for longer than CALM_MS, refilled by 1000
    }
    expect(b.counters.cutoffs).toBe(0);
  });

  it('counts the time a connection stayed held', () => {
    const b = new Budget(tight, 0);
    b.held(250);
    b.held(750);
    expect(b.counters.throttledMs).toBe(1000);
  });
});

describe('Budget: accept and the reconnect penalty', () => {
  it('refuses past the pending limit and over the frame bucket, and says why', () => {
    const b = new Budget({ framesPerSec: 1, burstFrames: 2, framesPerConnection: 1 }, 0);
    expect(b.refuse(2, 2, 0)).toBe('pending');
    expect(b.refuse(0, 2, 0)).toBeNull();
    expect(b.refuse(0, 2, 0)).toBeNull();
    expect(b.refuse(0, 2, 0)).toBe('frames');
    expect(b.counters.refused).toMatchObject({ pending: 1, frames: 1 });
  });

  it('charges a connection framesPerConnection: a burst of 100, then 10 a second by default', () => {
    const b = new Budget({}, 0);
    let taken = 0;
    while (b.refuse(0, 2, 0) === null) taken++;
    expect(taken).toBe(DEFAULT_BUDGET.burstFrames / DEFAULT_BUDGET.framesPerConnection);
    // Dialling every 10 ms for 10 s: at most 10 a second get in (at a frame each, 5,000 would).
    let looped = 0;
    for (let t = 10; t <= 10_000; t += 10) if (b.refuse(0, 2, t) === null) looped++;
    expect(looped).toBeLessThanOrEqual(100);
    // A probe restarting once a second (its unit's RestartSec=1) is never refused.
    const steady = new Budget({}, 0);
    for (let s = 0; s < 600; s++) expect(steady.refuse(0, 2, s * 1000)).toBeNull();
  });

  it('doubles the penalty with each offence up to penaltyMaxMs, and forgets after forgiveAfterMs', () => {
    const b = new Budget({ penaltyMs: 1000, penaltyMaxMs: 5000, forgiveAfterMs: 30_000 }, 0);
    let t = 0;
    const penalties: number[] = [];
    for (let i = 0; i < 5; i++) {
      b.offended('ERR_SCHEMA', t);
      const until = b.counters.penaltyUntil!;
      expect(b.refuse(0, 2, until - 1)).toBe('penalty');
      expect(b.refuse(0, 2, until)).toBeNull();
      penalties.push(until - t);
      t = until + 10;
    }
    expect(penalties).toEqual([1000, 2000, 4000, 5000, 5000]);
    expect(b.counters.offences).toEqual({ ERR_SCHEMA: 5 });
    // Well behaved for longer than forgiveAfterMs: the next offence starts from the bottom.
    t += 30_001;
    b.offended('ERR_RATE_LIMIT', t);
    expect(b.counters.penaltyUntil! - t).toBe(1000);
    expect(b.counters.refused.penalty).toBe(5);
  });
});
