import type { ProbeStatus } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';
import { STATES } from '../src/catalogue.js';
import { decide, type VerdictInput } from '../src/collector/verdict.js';

// Guest time == host time (identity mapping), so every number below reads directly.
const identity = (g: number) => g;
const PORT = 49983;
const STALL = 5000;
const DEADLINE = 30_000;
const PID = 42;

type Target = NonNullable<ProbeStatus['target']>;
type Listener = ProbeStatus['listener'];
type Phases = ProbeStatus['phases'];

function status(parts: { target?: Partial<Target> | null; listener?: Partial<Listener>; phases?: Partial<Phases> } = {}): ProbeStatus {
  const target: Target | null =
    parts.target === null || parts.target === undefined
      ? null
      : { pid: PID, name: 'envd', startedAt: 1000, source: 'name', alive: true, ...parts.target };
  return {
    target,
    listener: { port: PORT, bound: false, ...parts.listener },
    phases: { reported: false, ready: false, ...parts.phases },
  };
}

function input(over: Partial<VerdictInput> & Pick<VerdictInput, 'now' | 'status'>): VerdictInput {
  return {
    connected: true,
    connectedAt: 500,
    toHost: identity,
    targetName: 'envd',
    stallAfterMs: STALL,
    startDeadlineMs: DEADLINE,
    ...over,
  };
}

describe('decide(): registered and booting', () => {
  it('is registered while no probe ever said hello', () => {
    const v = decide(input({ now: 10_000, status: null, connected: false }));
    expect(v).toEqual({ state: 'registered', reason: 'waiting for the probe to connect', recheckAt: null });
  });

  it('is booting when the probe is connected but the target is not seen', () => {
    const v = decide(input({ now: 2500, connectedAt: 500, status: status({ target: null }) }));
    expect(v.state).toBe('booting');
    expect(v.reason).toBe('probe connected 2.0s ago, envd not seen yet');
    expect(v.recheckAt).toBeNull();
  });

  it('names the configured target when booting', () => {
    const v = decide(input({ now: 600, connectedAt: 500, targetName: 'myd', status: status({ target: null }) }));
    expect(v.state).toBe('booting');
    expect(v.reason).toContain('myd not seen yet');
    expect(v.reason).toContain('100ms ago');
  });

  it('exports the exact state names of the design', () => {
    expect([...STATES]).toEqual(['registered', 'booting', 'starting', 'ready', 'stuck', 'exited', 'silent', 'paused']);
  });
});

describe('decide(): starting', () => {
  it('is starting within the stall window and rechecks at the stall moment', () => {
    // started at 1000, no phase: stall at 6000, deadline at 31000.
    const v = decide(input({ now: 3000, status: status({ target: {} }) }));
    expect(v.state).toBe('starting');
    expect(v.reason).toBe('envd alive 2.0s, nothing listening on :49983, no phase reported');
    expect(v.recheckAt).toBe(1000 + STALL);
  });

  it('counts progress from the last phase', () => {
    const v = decide(
      input({
        now: 8000,
        status: status({ target: {}, phases: { reported: true, last: { name: 'cgroups', t: 4000 } } }),
      }),
    );
    expect(v.state).toBe('starting');
    expect(v.recheckAt).toBe(4000 + STALL);
    expect(v.reason).toContain('last phase "cgroups" 4.0s ago');
  });

  it('rechecks at the deadline when it comes before the stall', () => {
    const v = decide(
      input({
        now: 3000,
        startDeadlineMs: 4000,
        status: status({ target: {}, phases: { reported: true, last: { name: 'p', t: 2500 } } }),
      }),
    );
    expect(v.state).toBe('starting');
    // stall at 7500, deadline at 5000
    expect(v.recheckAt).toBe(5000);
  });

  it('maps guest times through toHost', () => {
    // guest clock is 100 s behind the host.
    const toHost = (g: number) => g + 100_000;
    const v = decide(input({ now: 103_000, toHost, status: status({ target: { startedAt: 1000 } }) }));
    expect(v.state).toBe('starting');
    expect(v.reason).toContain('envd alive 2.0s');
    expect(v.recheckAt).toBe(101_000 + STALL);
  });
});

describe('decide(): ready', () => {
  it('is ready when the target bound the expected port (no phases reported)', () => {
    const v = decide(input({ now: 5000, status: status({ target: {}, listener: { bound: true, since: 2000, pid: PID } }) }));
    expect(v.state).toBe('ready');
    expect(v.reason).toBe('envd (pid 42) listening on :49983 since 3.0s ago');
    expect(v.recheckAt).toBeNull();
  });

  it('is ready when the listener owner is unknown', () => {
    const v = decide(input({ now: 5000, status: status({ target: {}, listener: { bound: true, since: 2000 } }) }));
    expect(v.state).toBe('ready');
  });

  it('needs READY=1 when the target reports phases', () => {
    const bound = { bound: true, since: 2000, pid: PID };
    const notYet = decide(
      input({
        now: 3000,
        status: status({ target: {}, listener: bound, phases: { reported: true, ready: false, last: { name: 'x', t: 2500 } } }),
      }),
    );
    expect(notYet.state).toBe('starting');
    expect(notYet.reason).toContain('listening on :49983 but start-up never finished (no READY=1)');

    const ready = decide(
      input({ now: 3000, status: status({ target: {}, listener: bound, phases: { reported: true, ready: true, readyAt: 2900 } }) }),
    );
    expect(ready.state).toBe('ready');
    expect(ready.reason).toMatch(/, READY=1$/);
  });

  it('is not ready when the port is held by another pid, and says so', () => {
    const v = decide(input({ now: 3000, status: status({ target: {}, listener: { bound: true, since: 1500, pid: 99 } }) }));
    expect(v.state).toBe('starting');
    expect(v.reason).toContain(':49983 is held by pid 99, not envd');

    const later = decide(input({ now: 7000, status: status({ target: {}, listener: { bound: true, since: 1500, pid: 99 } }) }));
    expect(later.state).toBe('stuck');
    expect(later.reason).toContain('held by pid 99');
  });
});

describe('decide(): stuck', () => {
  it('is stuck when no new phase came for stallAfterMs', () => {
    const v = decide(
      input({
        now: 9000,
        status: status({
          target: {},
          phases: { reported: true, last: { name: 'cgroup-manager', status: 'opening cgroup manager', t: 3000 } },
        }),
      }),
    );
    expect(v.state).toBe('stuck');
    expect(v.reason).toContain('envd alive 8.0s');
    expect(v.reason).toContain('nothing listening on :49983');
    expect(v.reason).toContain('last phase cgroup-manager ("opening cgroup manager") 6.0s ago');
    // It may still turn into a deadline verdict: recheck at the deadline.
    expect(v.recheckAt).toBe(1000 + DEADLINE);
  });

  it('names where a goroutine dump found the target blocked, only for that target', () => {
    const blocked = { pid: PID, text: 'main goroutine blocked in main.(*cgroupManager).acquireRoot (sync.Mutex.Lock)' };
    const s = status({ target: {}, phases: { reported: true, last: { name: 'cgroup-manager', t: 3000 } } });
    const v = decide(input({ now: 9000, status: s, blocked }));
    expect(v.reason).toMatch(
      /last phase "cgroup-manager" 6\.0s ago; main goroutine blocked in main\.\(\*cgroupManager\)\.acquireRoot \(sync\.Mutex\.Lock\)$/,
    );
    // A restarted target (another pid) is not blocked where the old one was.
    expect(decide(input({ now: 9000, status: s, blocked: { ...blocked, pid: PID + 1 } })).reason).not.toContain('blocked in');
    // Nor is a target that is still starting.
    expect(decide(input({ now: 3500, status: s, blocked })).reason).not.toContain('blocked in');
  });

  it('becomes stuck exactly at the stall moment, not before', () => {
    const s = status({ target: {} });
    expect(decide(input({ now: 1000 + STALL - 1, status: s })).state).toBe('starting');
    expect(decide(input({ now: 1000 + STALL, status: s })).state).toBe('stuck');
  });

  it('describes a phase with only a status text', () => {
    const v = decide(
      input({ now: 9000, status: status({ target: {}, phases: { reported: true, last: { status: 'waiting for MMDS', t: 2000 } } }) }),
    );
    expect(v.state).toBe('stuck');
    expect(v.reason).toContain('last phase "waiting for MMDS" 7.0s ago');
  });

  it('is stuck by the start deadline even while phases keep coming', () => {
    const v = decide(
      input({
        now: 1000 + DEADLINE + 500,
        status: status({ target: {}, phases: { reported: true, last: { name: 'busy', t: 1000 + DEADLINE } } }),
      }),
    );
    expect(v.state).toBe('stuck');
    expect(v.reason).toContain('not ready by the 30.0s start deadline');
    expect(v.reason).toContain('last phase "busy" 500ms ago');
    expect(v.recheckAt).toBeNull();
  });

  it('is stuck at once when a listener bound during this process vanished', () => {
    // Unbound at 2000, after the target started at 1000; well within the stall window.
    const v = decide(
      input({
        now: 2500,
        status: status({
          target: {},
          listener: { bound: false, since: 2000 },
          phases: { reported: true, last: { name: 'serve', t: 2400 } },
        }),
      }),
    );
    expect(v.state).toBe('stuck');
    expect(v.reason).toContain('listener on :49983 vanished 500ms ago');
    expect(v.reason).toContain('last phase "serve"');
    expect(v.recheckAt).toBeNull();
  });

  it('does not count a listener that went away before this process started', () => {
    const v = decide(input({ now: 2500, status: status({ target: { startedAt: 1000 }, listener: { bound: false, since: 800 } }) }));
    expect(v.state).toBe('starting');
    expect(v.reason).not.toContain('vanished');
  });

  it('is stuck when bound without READY=1 after the stall', () => {
    const v = decide(
      input({
        now: 9000,
        status: status({
          target: {},
          listener: { bound: true, since: 1500, pid: PID },
          phases: { reported: true, ready: false, last: { name: 'init', t: 2000 } },
        }),
      }),
    );
    expect(v.state).toBe('stuck');
    expect(v.reason).toContain('listening on :49983 but start-up never finished (no READY=1)');
  });
});

describe('decide(): exited and silent', () => {
  it('reports the exit code', () => {
    const v = decide(input({ now: 5000, status: status({ target: { alive: false, exitCode: 2 } }) }));
    expect(v).toEqual({ state: 'exited', reason: 'envd (pid 42) exited with status 2', recheckAt: null });
  });

  it('reports the signal (and the last phase)', () => {
    const v = decide(
      input({
        now: 5000,
        status: status({ target: { alive: false, signal: 'SIGKILL' }, phases: { reported: true, last: { name: 'mmds', t: 3000 } } }),
      }),
    );
    expect(v.state).toBe('exited');
    expect(v.reason).toBe('envd (pid 42) killed by SIGKILL, last phase "mmds"');
  });

  it('says when the exit status is unknown', () => {
    const v = decide(input({ now: 5000, status: status({ target: { alive: false } }) }));
    expect(v.state).toBe('exited');
    expect(v.reason).toContain('status unknown');
  });

  it('exited wins over silent', () => {
    const v = decide(
      input({ now: 5000, connected: false, disconnectedAt: 4000, status: status({ target: { alive: false, exitCode: 0 } }) }),
    );
    expect(v.state).toBe('exited');
    expect(v.reason).toContain('exited with status 0');
    expect(v.reason).toContain('probe disconnected');
  });

  it('is silent when the probe disconnected, with the reason', () => {
    const v = decide(
      input({
        now: 7000,
        connected: false,
        disconnectedAt: 4000,
        disconnectReason: 'ERR_IDLE: no word from the probe for 5000 ms',
        status: status({ target: {}, listener: { bound: true, since: 2000, pid: PID } }),
      }),
    );
    expect(v).toEqual({
      state: 'silent',
      reason: 'probe silent since 3.0s ago (ERR_IDLE: no word from the probe for 5000 ms)',
      recheckAt: null,
    });
  });

  it('is silent (not booting) when disconnected before the target was seen', () => {
    const v = decide(input({ now: 7000, connected: false, disconnectedAt: 6000, status: status({ target: null }) }));
    expect(v.state).toBe('silent');
    expect(v.reason).toBe('probe silent since 1.0s ago');
  });

  it('is deterministic for the same input', () => {
    const i = input({ now: 9000, status: status({ target: {}, phases: { reported: true, last: { name: 'a', t: 2000 } } }) });
    expect(decide(i)).toEqual(decide(i));
  });
});

describe('decide(): a socket the collector cannot listen on', () => {
  it('says so as the whole reason, and leaves the state to the probe facts', () => {
    const listenError = { socketPath: '/run/vm/v.sock_52000', message: 'EACCES: permission denied' };
    const stuck = input({ now: 9000, status: status({ target: {} }), conditions: [{ name: 'clock-skew', detail: 'y' }] });
    const v = decide({ ...stuck, listenError });
    expect(v).toEqual({ ...decide(stuck), reason: 'cannot listen on /run/vm/v.sock_52000: EACCES: permission denied' });
    expect(v.state).toBe('stuck');
    expect(decide(input({ now: 10, status: null, connected: false, listenError })).state).toBe('registered');
  });
});

describe('decide(input, false): the state without the text', () => {
  it('decides exactly what decide(input) decides, for every branch', () => {
    const cases: VerdictInput[] = [
      input({ now: 1000, status: null as unknown as ProbeStatus }),
      input({ now: 2000, status: status({ target: null }) }),
      input({ now: 2000, status: status({ target: {} }) }),
      input({ now: 9000, status: status({ target: {} }) }),
      input({ now: 40_000, status: status({ target: {}, phases: { reported: true, last: { name: 'a', t: 39_000 } } }) }),
      input({ now: 3000, status: status({ target: {}, listener: { bound: true, since: 2000, pid: PID } }) }),
      input({ now: 3000, status: status({ target: {}, listener: { bound: true, since: 2000, pid: 7 } }) }),
      input({ now: 3000, status: status({ target: {}, listener: { bound: false, since: 2500 } }) }),
      input({
        now: 3000,
        status: status({ target: {}, listener: { bound: true, since: 2000 } }),
        conditions: [
          { name: 'not-accepting', detail: 'x' },
          { name: 'clock-skew', detail: 'y' },
        ],
        conditionsRecheckAt: 2500,
      }),
      input({ now: 3000, status: status({ target: { alive: false, exitCode: 1 } }) }),
      input({ now: 3000, connected: false, disconnectedAt: 2000, status: status({ target: {} }) }),
    ];
    for (const c of cases) {
      const full = decide(c);
      const bare = decide(c, false);
      expect([bare.state, bare.recheckAt]).toEqual([full.state, full.recheckAt]);
      expect(full.reason).not.toBe('');
    }
  });
});
