import { initialStatus, type ProbeStatus } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONDITION_SETTINGS, conditions, type ConditionInput } from '../src/collector/conditions.js';
import { ReasonTemplates, type Elapsed } from '../src/collector/elapsed.js';
import { decide, type VerdictInput } from '../src/collector/verdict.js';

const T0 = 1_000_000;
const target = { pid: 42, name: 'envd', startedAt: T0, source: 'name' as const, alive: true };
const settings = { ...DEFAULT_CONDITION_SETTINGS, stallAfterMs: 5000 };

/** Each kind of reason a duration up to now appears in, with the conditions that add one. */
const CASES: Array<{
  name: string;
  status: ProbeStatus | null;
  /** When it is decided (default T0 + 8 s). */
  at?: number;
  over?: Partial<VerdictInput>;
  kernel?: ConditionInput['kernel'];
}> = [
  { name: 'paused', status: { ...initialStatus(49983), target }, over: { pausedSince: T0 + 500 } },
  { name: 'silent', status: { ...initialStatus(49983), target }, over: { connected: false, disconnectedAt: T0 + 700 } },
  { name: 'booting', status: initialStatus(49983) },
  { name: 'ready', status: { ...initialStatus(49983), target, listener: { port: 49983, bound: true, since: T0 + 900, pid: 42 } } },
  {
    name: 'starting, a phase',
    status: { ...initialStatus(49983), target, phases: { reported: true, ready: false, last: { t: T0 + 300, name: 'init' } } },
  },
  { name: 'stuck past the deadline', status: { ...initialStatus(49983), target }, at: T0 + 45_000 },
  {
    name: 'stuck, not accepting',
    status: {
      ...initialStatus(49983),
      target,
      listener: { port: 49983, bound: true, since: T0 + 100, pid: 42, acceptQueue: 3, queuedSince: T0 + 200 },
    },
  },
  {
    name: 'an OOM kill in the reason',
    status: { ...initialStatus(49983), target },
    kernel: [{ what: 'oom', process: 'envd', pid: 42, at: T0 + 1200, message: 'Out of memory: Killed process 42 (envd)' }],
  },
];

function inputAt(c: (typeof CASES)[number], now: number, elapsed?: Elapsed): VerdictInput {
  const base: ConditionInput = {
    now,
    status: c.status ?? initialStatus(49983),
    toHost: (g) => g,
    threads: [],
    kernel: c.kernel ?? [],
    skewMs: null,
    settings,
  };
  return {
    now,
    connected: true,
    connectedAt: T0 - 2000,
    status: c.status,
    toHost: (g) => g,
    targetName: 'envd',
    stallAfterMs: 5000,
    startDeadlineMs: 30_000,
    conditions: c.status ? conditions({ ...base, elapsed }) : [],
    ...c.over,
  };
}

describe('reason templates', () => {
  const templates = new ReasonTemplates();

  // Until the verdict's recheckAt (when time alone may change it: the timer evaluates again).
  it.each(CASES)('$name: a template rendered at a moment reads as the reason decided at it', (c) => {
    const now = c.at ?? T0 + 8000;
    const template = decide(inputAt(c, now, templates.mark), templates.mark).reason;
    const until = decide(inputAt(c, now)).recheckAt ?? now + 90_000;
    for (const later of [now, now + 1, Math.floor((now + until) / 2), until - 1]) {
      expect(templates.render(template, later)).toBe(decide(inputAt(c, later)).reason);
    }
  });

  it('leaves a reason without durations as it is', () => {
    expect(templates.render('waiting for the probe to connect', T0)).toBe('waiting for the probe to connect');
  });

  it('renders only markers with its own token: guest text cannot pass for one', () => {
    const other = new ReasonTemplates();
    const forged = `last phase "${other.mark(T0)}" ${'\u0001'}${'0'.repeat(24)}:${T0}${'\u0002'}`;
    const template = `${forged}, ${templates.mark(T0)} ago`;
    expect(templates.render(template, T0 + 1500)).toBe(`${forged}, 1.5s ago`);
  });

  it('shares its token with a copy made from it (the readiness thread)', () => {
    const copy = new ReasonTemplates(templates.token);
    expect(copy.render(`alive ${templates.mark(T0)}`, T0 + 61_000)).toBe('alive 1m1s');
  });

  it('refuses a token that is not 16 to 64 hex digits', () => {
    expect(() => new ReasonTemplates('short')).toThrow(/16 to 64 hex digits/);
    expect(() => new ReasonTemplates('x'.repeat(24))).toThrow(/16 to 64 hex digits/);
  });
});
