import { initialStatus, type ProbeStatus } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONDITION_SETTINGS, conditions, conditionsRecheckAt, type ConditionInput } from '../src/collector/conditions.js';
import { decide } from '../src/collector/verdict.js';

const NOW = 1_000_000;
const settings = { ...DEFAULT_CONDITION_SETTINGS, stallAfterMs: 5000 };
const alive = (over: Partial<ProbeStatus> = {}): ProbeStatus => ({
  ...initialStatus(49983),
  target: { pid: 42, name: 'envd', startedAt: NOW - 60_000, source: 'name', alive: true },
  ...over,
});
const input = (over: Partial<ConditionInput> = {}): ConditionInput => ({
  now: NOW,
  status: alive(),
  toHost: (g) => g,
  threads: [],
  kernel: [],
  skewMs: null,
  settings,
  ...over,
});
const names = (i: ConditionInput) => conditions(i).map((c) => c.name);

describe('conditions', () => {
  it('none for a quiet sandbox', () => {
    expect(conditions(input())).toEqual([]);
  });

  it('socket-storm names the remote endpoint when one passes the threshold', () => {
    const sockets = {
      t: NOW,
      tcpInUse: 10,
      timeWait: 4000,
      top: [
        { address: '169.254.169.254', port: 80, count: 4210 },
        { address: '10.0.0.1', port: 443, count: 3 },
      ],
    };
    const [c] = conditions(input({ status: alive({ sockets }) }));
    expect(c).toMatchObject({ name: 'socket-storm', subject: '169.254.169.254:80', count: 4210 });
    expect(c!.detail).toBe('4,210 sockets to 169.254.169.254:80');
    const calm = { ...sockets, top: [{ address: '169.254.169.254', port: 80, count: 499 }] };
    expect(names(input({ status: alive({ sockets: calm }) }))).toEqual([]);
    const v6 = { ...sockets, top: [{ address: '::1', port: 8080, count: 900 }] };
    expect(conditions(input({ status: alive({ sockets: v6 }) }))[0]!.subject).toBe('[::1]:8080');
  });

  it('thread-growth when threads at least doubled by 20+ within the window', () => {
    const grow = [0, 10, 20, 30].map((s, i) => ({ at: NOW - 30_000 + s * 1000, n: [8, 12, 30, 64][i]! }));
    const [c] = conditions(input({ threads: grow }));
    expect(c).toMatchObject({ name: 'thread-growth', count: 64 });
    expect(c!.detail).toMatch(/threads 8 → 64 in 30\.0s/);
    // Small growth, or growth older than the window, does not count.
    expect(
      names(
        input({
          threads: [
            { at: NOW - 5000, n: 8 },
            { at: NOW, n: 20 },
          ],
        }),
      ),
    ).toEqual([]);
    expect(
      names(
        input({
          threads: [
            { at: NOW - 120_000, n: 8 },
            { at: NOW - 90_000, n: 90 },
          ],
        }),
      ),
    ).toEqual([]);
    // A shrinking count is not growth.
    expect(
      names(
        input({
          threads: [
            { at: NOW - 5000, n: 90 },
            { at: NOW, n: 8 },
          ],
        }),
      ),
    ).toEqual([]);
  });

  it('not-accepting once the accept queue stayed non-empty for stall-after', () => {
    const listener = { port: 49983, bound: true, acceptQueue: 3, queuedSince: NOW - 6000 };
    const [c] = conditions(input({ status: alive({ listener }) }));
    expect(c).toMatchObject({ name: 'not-accepting', count: 3 });
    expect(c!.detail).toBe('3 connections waiting in the accept queue for 6.0s');
    const young = { ...listener, queuedSince: NOW - 1000 };
    expect(names(input({ status: alive({ listener: young }) }))).toEqual([]);
    expect(conditionsRecheckAt({ status: alive({ listener: young }), toHost: (g) => g, now: NOW, settings })).toBe(NOW + 4000);
  });

  it('not-accepting at once when a health check timed out while the queue held connections', () => {
    const listener = { port: 49983, bound: true, since: NOW - 3000, acceptQueue: 1, queuedSince: NOW - 2100 };
    const health = {
      url: 'http://127.0.0.1:49983/health',
      t: NOW - 50,
      ok: false,
      latencyMs: 2000,
      error: 'ETIMEDOUT: timed out after 2000 ms',
    };
    expect(names(input({ status: alive({ listener, health }) }))).toEqual(['not-accepting', 'health-failing']);
    // A refused check is no evidence about the queue.
    const refused = { ...health, error: 'ECONNREFUSED: connect ECONNREFUSED' };
    expect(names(input({ status: alive({ listener, health: refused }) }))).toEqual(['health-failing']);
  });

  it('health-failing carries the check error', () => {
    const health = {
      url: 'http://127.0.0.1:49983/health',
      t: NOW,
      ok: false,
      latencyMs: 2000,
      error: 'ETIMEDOUT: timed out after 2000 ms',
    };
    expect(conditions(input({ status: alive({ health }) }))[0]!.detail).toBe('GET /health: ETIMEDOUT: timed out after 2000 ms');
  });

  it('kernel conditions only during the current target life', () => {
    const oom = { what: 'oom' as const, process: 'envd', pid: 42, at: NOW - 2000, message: 'Out of memory: Killed process 42 (envd)' };
    expect(conditions(input({ kernel: [oom] }))[0]).toMatchObject({
      name: 'oom',
      subject: 'envd',
      detail: 'killed envd (pid 42) 2.0s ago',
    });
    const old = { ...oom, at: NOW - 120_000 };
    expect(names(input({ kernel: [old] }))).toEqual([]);
  });

  it('clock-skew beyond the limit, either way', () => {
    expect(conditions(input({ skewMs: 3200 }))[0]!.detail).toBe('guest clock 3.2s ahead of the host');
    expect(conditions(input({ skewMs: -5000 }))[0]!.detail).toBe('guest clock 5.0s behind the host');
    expect(names(input({ skewMs: 500 }))).toEqual([]);
  });
});

describe('verdicts with conditions', () => {
  const base = {
    now: NOW,
    connected: true,
    toHost: (g: number) => g,
    targetName: 'envd',
    stallAfterMs: 5000,
    startDeadlineMs: 600_000,
  };

  it('a listener that never accepts is stuck, and says so', () => {
    const status = alive({ listener: { port: 49983, bound: true, since: NOW - 50_000, pid: 42, acceptQueue: 2, queuedSince: NOW - 9000 } });
    const v = decide({ ...base, status, conditions: conditions(input({ status })) });
    expect(v.state).toBe('stuck');
    expect(v.reason).toContain('listening on :49983 but not accepting (2 connections waiting in the accept queue for 9.0s)');
  });

  it('bound and READY=1 but failing its health check is not ready', () => {
    const health = { url: 'http://127.0.0.1:49983/health', t: NOW, ok: false, latencyMs: 2000, error: 'ETIMEDOUT' };
    const status = alive({
      listener: { port: 49983, bound: true, since: NOW - 1000, pid: 42 },
      phases: { reported: true, ready: true, readyAt: NOW - 1000, last: { t: NOW - 1000, name: 'listen' } },
      health,
    });
    const v = decide({ ...base, status, conditions: conditions(input({ status })) });
    expect(v.state).toBe('starting');
    expect(v.reason).toContain('listening on :49983 but not answering (GET /health: ETIMEDOUT)');
  });

  it('other conditions ride along in the reason of any state', () => {
    const sockets = { t: NOW, tcpInUse: 1, timeWait: 900, top: [{ address: '169.254.169.254', port: 80, count: 900 }] };
    const status = alive({ listener: { port: 49983, bound: true, since: NOW - 1000, pid: 42 }, sockets });
    const v = decide({ ...base, status, conditions: conditions(input({ status })) });
    expect(v.state).toBe('ready');
    expect(v.reason).toMatch(/; socket-storm: 900 sockets to 169\.254\.169\.254:80$/);
  });

  it('the recheck time includes a condition that is about to appear', () => {
    const status = alive({ listener: { port: 49983, bound: true, since: NOW - 1000, pid: 42, acceptQueue: 1, queuedSince: NOW - 1000 } });
    const v = decide({ ...base, status, conditions: [], conditionsRecheckAt: NOW + 4000 });
    expect(v.state).toBe('ready');
    expect(v.recheckAt).toBe(NOW + 4000);
  });
});
