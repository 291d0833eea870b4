import { describe, expect, it, vi } from 'vitest';
import { waitFor } from './wait.js';

describe('waitFor', () => {
  it('returns the first truthy value, polling sync and async conditions', async () => {
    let n = 0;
    expect(await waitFor('n to reach 3', () => (++n >= 3 ? n : null), { intervalMs: 1 })).toBe(3);
    let m = 0;
    expect(await waitFor('an async value', async () => (++m === 2 ? { m } : undefined), { intervalMs: 1 })).toEqual({ m: 2 });
  });

  it('fails after the deadline naming what it waited for and the last value', async () => {
    const t0 = Date.now();
    await expect(waitFor('the moon', () => 0, { timeoutMs: 50, intervalMs: 5 })).rejects.toThrow(
      /^timed out after 50 ms waiting for the moon; last value: 0$/,
    );
    expect(Date.now() - t0).toBeGreaterThanOrEqual(50);
  });

  it('lets an exception of the condition through at once', async () => {
    const fails = () => {
      throw new Error('boom');
    };
    await expect(waitFor('x', fails)).rejects.toThrow('boom');
  });

  it('waits in real time while the test runs on fake timers', async () => {
    vi.useFakeTimers({ toFake: ['Date', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance'] });
    try {
      let n = 0;
      expect(await waitFor('a third poll', () => (++n >= 3 ? n : null), { intervalMs: 1 })).toBe(3);
      await expect(waitFor('the moon', () => 0, { timeoutMs: 50, intervalMs: 5 })).rejects.toThrow(/^timed out after 50 ms/);
    } finally {
      vi.useRealTimers();
    }
  });
});
