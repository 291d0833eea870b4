import { expect, it } from 'vitest';
import { NOTIFY_BURST, NOTIFY_EVENTS_PER_SEC, NotifyRate } from '../src/notify/rate.js';

it('passes a burst, then the sustained rate', () => {
  let t = 0;
  const rate = new NotifyRate(NOTIFY_EVENTS_PER_SEC, NOTIFY_BURST, () => t);
  let passed = 0;
  for (let i = 0; i < 10_000; i++) if (rate.take()) passed++;
  expect(passed).toBe(NOTIFY_BURST);
  // Ten seconds of a flood at 10,000/s: the sustained rate gets through, no more.
  passed = 0;
  for (let ms = 0; ms < 10_000; ms++) {
    t += 1;
    for (let i = 0; i < 10; i++) if (rate.take()) passed++;
  }
  expect(passed).toBeGreaterThanOrEqual(NOTIFY_EVENTS_PER_SEC * 10 - 1);
  expect(passed).toBeLessThanOrEqual(NOTIFY_EVENTS_PER_SEC * 10 + 1);
  // Quiet for a while: the burst is back.
  t += 60_000;
  passed = 0;
  for (let i = 0; i < 1000; i++) if (rate.take()) passed++;
  expect(passed).toBe(NOTIFY_BURST);
});
