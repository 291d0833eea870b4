// The verdict clock's one timer: armed for the moment the verdict could next change by
// itself, kept while evaluations keep asking for that same moment (a booting fleet's start
// deadlines do not move with each batch), moved when the moment moves, and still the one
// that records the transition. And its templates (the readiness thread's readings): made
// from an evaluation's own input while its hook runs, the same as made afterwards.

import type { ProbeStatus } from '@vsockdiag/proto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_CONDITION_SETTINGS, type KernelNote } from '../src/collector/conditions.js';
import { ReasonTemplates } from '../src/collector/elapsed.js';
import { VerdictClock, type VerdictSources } from '../src/collector/verdict-clock.js';

const T0 = Date.UTC(2030, 0, 1);
const STALL_MS = 2000;

afterEach(() => vi.useRealTimers());

/** A sandbox whose probe is connected and whose envd started at guest `startedAt` (guest ms
 *  are host ms since T0 here) and has not bound: starting, stuck at startedAt + STALL_MS. */
function clock(opts: { evaluated?: () => void; kernel?: KernelNote[] } = {}): {
  vc: VerdictClock;
  startAt: (guestMs: number) => void;
  states: string[];
} {
  let status: ProbeStatus = {
    target: { pid: 42, name: 'envd', startedAt: 0, source: 'name', alive: true },
    listener: { port: 49983, bound: false },
    phases: { reported: false, ready: false },
  };
  const sources: VerdictSources = {
    intake: {
      session: {} as never,
      get status() {
        return status;
      },
      clock: { toHost: (g: number) => T0 + g },
      connectedAt: T0,
      disconnectedAt: undefined,
      disconnectReason: undefined,
      pausedSince: null,
    },
    history: { threads: [], kernel: opts.kernel ?? [], skewMs: null, blocked: null },
    listenError: () => null,
  };
  const states: string[] = [];
  const vc = new VerdictClock(
    sources,
    {
      targetName: 'envd',
      stallAfterMs: STALL_MS,
      startDeadlineMs: 60_000,
      conditions: { ...DEFAULT_CONDITION_SETTINGS, stallAfterMs: STALL_MS },
    },
    {
      record: (kind, data) => kind === 'state' && states.push(data.state as string),
      evaluated: () => opts.evaluated?.(),
      transition: () => undefined,
    },
  );
  const startAt = (guestMs: number) => {
    status = { ...status, target: { ...status.target!, startedAt: guestMs } };
  };
  return { vc, startAt, states };
}

describe('VerdictClock timer', () => {
  it('is armed once while the moment stays, moves with it, and records the transition', () => {
    vi.useFakeTimers({ now: T0, toFake: ['Date', 'setTimeout', 'clearTimeout'] });
    const { vc, startAt, states } = clock();
    const arm = vi.spyOn(globalThis, 'setTimeout');
    vc.evaluate();
    expect(vc.state).toBe('starting');
    expect(arm).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 5; i++) {
      vi.advanceTimersByTime(100);
      vc.evaluate(); // a batch that changes nothing the timer waits for
    }
    expect(arm).toHaveBeenCalledTimes(1);

    startAt(1000); // a new target start: stuck at T0 + 3000 now, not T0 + 2000
    vc.evaluate();
    expect(arm).toHaveBeenCalledTimes(2);
    vi.advanceTimersByTime(T0 + 2500 - Date.now());
    expect(vc.state).toBe('starting'); // the old moment passed without a verdict
    vi.advanceTimersByTime(501);
    expect(vc.state).toBe('stuck');
    expect(states).toEqual(['starting', 'stuck']);
    vc.stop();
  });
});

describe('VerdictClock template', () => {
  const templates = new ReasonTemplates();
  const oom: KernelNote = { what: 'oom', process: 'envd', pid: 42, at: T0 + 500, message: 'Out of memory: Killed process 42 (envd)' };

  it.each([
    { name: "no condition in force: decided from the evaluation's input", kernel: [] },
    { name: 'a condition in force: its detail written as a template too', kernel: [oom] },
  ])('$name', ({ kernel }) => {
    vi.useFakeTimers({ now: T0 + 1500, toFake: ['Date', 'setTimeout', 'clearTimeout'] });
    let during = '';
    const { vc } = clock({ kernel, evaluated: () => (during = vc.template(templates.mark).reason) });
    vc.evaluate();
    const after = vc.template(templates.mark).reason;
    expect(during).toBe(after);
    expect(during).toContain(templates.mark(T0)); // "alive …" counts from envd's start
    if (kernel.length > 0) expect(during).toContain(templates.mark(T0 + 500)); // the OOM kill's "… ago"
    // Read later, as the thread renders it: the main API's reason at the same moment.
    vi.advanceTimersByTime(300);
    expect(templates.render(during, Date.now())).toBe(vc.read().reason);
    vc.stop();
  });
});
