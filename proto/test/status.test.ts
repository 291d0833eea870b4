import { describe, expect, it } from 'vitest';
import type { ProbeEvent } from '../src/events.js';
import { applyEvent, initialStatus } from '../src/status.js';

const ev = (e: Record<string, unknown>, seq = 1, t = 1000) => ({ seq, t, ...e }) as ProbeEvent;

describe('applyEvent', () => {
  it('tracks the target, its exit, and a successor', () => {
    let s = initialStatus(49983);
    s = applyEvent(s, ev({ kind: 'target.found', pid: 7, name: 'envd', startedAt: 900, source: 'name' }));
    s = applyEvent(s, ev({ kind: 'target.sample', pid: 7, state: 'S', threads: 9, rssKb: 100, fds: 5, cpuMs: 1 }));
    expect(s.target).toMatchObject({ pid: 7, alive: true, threads: 9, rssKb: 100 });
    s = applyEvent(s, ev({ kind: 'target.exit', pid: 7, signal: 'SIGKILL' }));
    expect(s.target).toMatchObject({ alive: false, signal: 'SIGKILL' });
    // A sample or exit of another pid does not touch the target.
    expect(applyEvent(s, ev({ kind: 'target.exit', pid: 8, exitCode: 1 }))).toBe(s);
  });

  it('keeps phases reported since the target started, drops older ones', () => {
    const early = () => applyEvent(initialStatus(49983), ev({ kind: 'phase', name: 'early', source: 'notify' }, 1, 1000));
    const kept = applyEvent(early(), ev({ kind: 'target.found', pid: 7, name: 'envd', startedAt: 990, source: 'name' }, 2, 1010));
    expect(kept.phases.last?.name).toBe('early');
    const reset = applyEvent(early(), ev({ kind: 'target.found', pid: 7, name: 'envd', startedAt: 5000, source: 'name' }, 2, 5010));
    expect(reset.phases).toEqual({ reported: false, ready: false });
  });

  it('READY=1 sets ready once, with its time', () => {
    let s = applyEvent(initialStatus(1), ev({ kind: 'phase', ready: true }, 1, 50));
    s = applyEvent(s, ev({ kind: 'phase', ready: true }, 2, 80));
    expect(s.phases).toMatchObject({ reported: true, ready: true, readyAt: 50 });
  });

  it('tracks the listener, its accept queue and since when it has not drained', () => {
    let s = applyEvent(
      initialStatus(49983),
      ev({ kind: 'listener.bound', port: 49983, address: '0.0.0.0', inode: 5, pid: 7, acceptQueue: 0 }, 1, 100),
    );
    expect(s.listener).toMatchObject({ bound: true, since: 100, acceptQueue: 0 });
    expect(s.listener.queuedSince).toBeUndefined();
    s = applyEvent(s, ev({ kind: 'listener.queue', port: 49983, acceptQueue: 2 }, 2, 200));
    s = applyEvent(s, ev({ kind: 'listener.queue', port: 49983, acceptQueue: 3 }, 3, 300));
    expect(s.listener).toMatchObject({ acceptQueue: 3, queuedSince: 200 });
    s = applyEvent(s, ev({ kind: 'listener.queue', port: 49983, acceptQueue: 0 }, 4, 400));
    expect(s.listener.queuedSince).toBeUndefined();
    s = applyEvent(s, ev({ kind: 'listener.unbound', port: 49983 }, 5, 500));
    expect(s.listener).toEqual({ port: 49983, bound: false, since: 500 });
  });

  it('keeps the last census when totals arrive alone', () => {
    let s = applyEvent(
      initialStatus(1),
      ev({ kind: 'sockets', tcpInUse: 5, timeWait: 1, top: [{ address: 'a', port: 1, count: 3 }], censusAt: 10 }, 1, 10),
    );
    s = applyEvent(s, ev({ kind: 'sockets', tcpInUse: 50, timeWait: 9 }, 2, 20));
    expect(s.sockets).toMatchObject({ t: 20, tcpInUse: 50, timeWait: 9, censusAt: 10, top: [{ address: 'a', port: 1, count: 3 }] });
  });

  it('health, system and keyframes', () => {
    let s = applyEvent(
      initialStatus(1),
      ev({ kind: 'health', url: 'http://x/health', ok: false, latencyMs: 3, error: 'ECONNREFUSED' }, 1, 10),
    );
    expect(s.health).toEqual({ url: 'http://x/health', ok: false, latencyMs: 3, error: 'ECONNREFUSED', t: 10 });
    s = applyEvent(
      s,
      ev({ kind: 'system', uptimeMs: 1, load: [0, 0, 0], memTotalKb: 2, memAvailableKb: 1, bootId: 'b', wallMs: 5 }, 2, 20),
    );
    expect(s.system).toMatchObject({ t: 20, bootId: 'b' });
    const other = initialStatus(7);
    expect(applyEvent(s, ev({ kind: 'keyframe', status: other }, 3, 30))).toEqual(other);
  });

  it('updates the status in place: a second of samples leaves no dead copies behind', () => {
    let s = applyEvent(initialStatus(49983), ev({ kind: 'target.found', pid: 7, name: 'envd', startedAt: 900, source: 'name' }));
    s = applyEvent(s, ev({ kind: 'sockets', tcpInUse: 1, timeWait: 0 }, 2, 10));
    s = applyEvent(s, ev({ kind: 'health', url: 'http://x/health', ok: true, latencyMs: 1, status: 200 }, 3, 10));
    s = applyEvent(
      s,
      ev({ kind: 'system', uptimeMs: 1, load: [0, 0, 0], memTotalKb: 2, memAvailableKb: 1, bootId: 'b', wallMs: 5 }, 4, 10),
    );
    const parts = () => [s, s.target, s.sockets, s.health, s.system];
    const before = parts();
    s = applyEvent(s, ev({ kind: 'target.sample', pid: 7, state: 'S', threads: 12, rssKb: 300, fds: 5, cpuMs: 2 }, 5, 20));
    s = applyEvent(s, ev({ kind: 'sockets', tcpInUse: 2, timeWait: 1 }, 6, 20));
    s = applyEvent(s, ev({ kind: 'health', url: 'http://x/health', ok: true, latencyMs: 2, status: 200 }, 7, 20));
    s = applyEvent(
      s,
      ev({ kind: 'system', uptimeMs: 2, load: [1, 0, 0], memTotalKb: 2, memAvailableKb: 1, bootId: 'b', wallMs: 6 }, 8, 20),
    );
    parts().forEach((p, i) => expect(p).toBe(before[i]));
    expect(s.target).toMatchObject({ threads: 12, rssKb: 300 });
    expect(s.sockets).toEqual({ tcpInUse: 2, timeWait: 1, t: 20 });
  });

  it('a part updated in place holds only what its last event said', () => {
    let s = applyEvent(initialStatus(1), ev({ kind: 'health', url: 'http://x/h', ok: false, latencyMs: 3, error: 'ECONNREFUSED' }, 1, 10));
    s = applyEvent(s, ev({ kind: 'health', url: 'http://x/h', ok: true, latencyMs: 1, status: 200 }, 2, 20));
    expect(s.health).toEqual({ url: 'http://x/h', ok: true, latencyMs: 1, status: 200, t: 20 });
    // A new census replaces the last one whole: its fields do not outlive it.
    s = applyEvent(s, ev({ kind: 'sockets', tcpInUse: 5, timeWait: 1, top: [{ address: 'a', port: 1, count: 3 }], censusAt: 10 }, 3, 30));
    s = applyEvent(s, ev({ kind: 'sockets', tcpInUse: 6, timeWait: 1, byState: { ESTABLISHED: 6 }, censusAt: 40 }, 4, 40));
    expect(s.sockets).toEqual({ tcpInUse: 6, timeWait: 1, byState: { ESTABLISHED: 6 }, censusAt: 40, t: 40 });
  });

  it('a keyframe becomes a copy: the event keeps the status it carried', () => {
    const carried = initialStatus(7);
    let s = applyEvent(initialStatus(1), ev({ kind: 'keyframe', status: carried }, 1, 10));
    s = applyEvent(s, ev({ kind: 'listener.unbound', port: 7 }, 2, 20));
    s = applyEvent(s, ev({ kind: 'sockets', tcpInUse: 1, timeWait: 0 }, 3, 30));
    expect(carried).toEqual(initialStatus(7));
    expect(s.listener).toEqual({ port: 7, bound: false, since: 20 });
  });

  it('kernel notes, log lines and notices leave the status alone', () => {
    const s = initialStatus(1);
    expect(applyEvent(s, ev({ kind: 'kernel', what: 'oom', message: 'x' }))).toBe(s);
    expect(applyEvent(s, ev({ kind: 'log.lines', stream: 'stderr', lines: ['a'] }))).toBe(s);
    expect(applyEvent(s, ev({ kind: 'probe.notice', level: 'info', message: 'x' }))).toBe(s);
  });
});
