import { describe, expect, it } from 'vitest';
import { ReasonTemplates } from '../src/collector/elapsed.js';
import type { MirroredReading } from '../src/readiness/messages.js';
import { Mirror } from '../src/readiness/mirror.js';

const T0 = 1_000_000;
const templates = new ReasonTemplates();

function reading(over: Partial<MirroredReading> = {}): MirroredReading {
  return {
    id: 'vm1',
    state: 'starting',
    reason: `envd alive ${templates.mark(T0)}, nothing listening on :49983`,
    generation: 1,
    session: 2,
    evaluatedAt: T0 + 1000,
    dueAt: T0 + 5000,
    ...over,
  };
}

function mirrorAt(clock: { now: number }): Mirror {
  return new Mirror(templates, () => clock.now);
}

describe('the readiness mirror', () => {
  it('answers with the reason rendered at the moment asked', () => {
    const clock = { now: T0 + 2000 };
    const m = mirrorAt(clock);
    m.apply({ put: [reading()], removed: [] });
    expect(m.answer('vm1')).toEqual({
      ready: false,
      state: 'starting',
      reason: 'envd alive 2.0s, nothing listening on :49983',
      generation: 1,
      session: 2,
    });
    clock.now = T0 + 3500;
    expect(m.answer('vm1')?.reason).toBe('envd alive 3.5s, nothing listening on :49983');
  });

  it('holds a read short of the timer it waits for, and not before the evaluation (as the main API does)', () => {
    const clock = { now: T0 + 9000 };
    const m = mirrorAt(clock);
    m.apply({ put: [reading()], removed: [] });
    // Past dueAt the main thread is about to decide again: until it does, the reading holds.
    expect(m.answer('vm1')?.reason).toBe('envd alive 5.0s, nothing listening on :49983');
    clock.now = T0 + 500; // the wall clock stepped back
    expect(m.answer('vm1')?.reason).toBe('envd alive 1.0s, nothing listening on :49983');
  });

  it('says ready only for ready, and knows nothing of sandboxes it was not sent or that are gone', () => {
    const m = mirrorAt({ now: T0 });
    expect(m.answer('vm1')).toBeUndefined();
    m.apply({ put: [reading({ state: 'ready', reason: 'envd (pid 42) listening', dueAt: null })], removed: [] });
    expect(m.answer('vm1')).toMatchObject({ ready: true, state: 'ready' });
    expect(m.size).toBe(1);
    m.apply({ put: [], removed: ['vm1'] });
    expect(m.answer('vm1')).toBeUndefined();
    expect(m.size).toBe(0);
  });

  it('wakes a long-poll when its sandbox settles, not on a change that leaves it unsettled', async () => {
    const m = mirrorAt({ now: T0 });
    m.apply({ put: [reading()], removed: [] });
    let woke = false;
    const wait = m.settled('vm1', 60_000, new AbortController().signal).then(() => (woke = true));
    m.apply({ put: [reading({ state: 'booting' })], removed: [] });
    await Promise.resolve();
    expect(woke).toBe(false);
    m.apply({ put: [reading({ state: 'stuck' })], removed: [] });
    await wait;
    expect(woke).toBe(true);
  });

  it('wakes a long-poll when its sandbox goes, when its client goes, and when its time is up', async () => {
    const m = mirrorAt({ now: T0 });
    m.apply({ put: [reading(), reading({ id: 'vm2' }), reading({ id: 'vm3' })], removed: [] });
    const removed = m.settled('vm1', 60_000, new AbortController().signal);
    m.apply({ put: [], removed: ['vm1'] });
    await removed;

    const client = new AbortController();
    const abandoned = m.settled('vm2', 60_000, client.signal);
    client.abort();
    await abandoned;

    const t0 = performance.now();
    await m.settled('vm3', 50, new AbortController().signal);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(45);
  });

  it('does not wait on a sandbox already settled, unknown, or a client already gone', async () => {
    const m = mirrorAt({ now: T0 });
    m.apply({ put: [reading({ state: 'exited', dueAt: null })], removed: [] });
    const gone = new AbortController();
    gone.abort();
    // Each would otherwise wait a minute (past the test's timeout).
    await m.settled('vm1', 60_000, new AbortController().signal);
    await m.settled('nope', 60_000, new AbortController().signal);
    m.apply({ put: [reading({ id: 'vm2' })], removed: [] });
    await m.settled('vm2', 60_000, gone.signal);
  });
});
