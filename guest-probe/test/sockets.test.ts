import fs from 'node:fs';
import os from 'node:os';
import type { EventBody } from '@vsockdiag/proto';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeProcTree } from '../../test/support/fake-proc.js';
import type { SocketCensus } from '../src/diag.js';
import { CENSUS_CPU_SHARE, CENSUS_EVERY_MS, SocketWatcher, censusPeriodMs } from '../src/sockets.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function procWith(inuse: number, tw: number): { root: string; set: (inuse: number, tw: number) => void } {
  const proc = fakeProcTree(os.tmpdir());
  dirs.push(proc.root);
  const set = (i: number, t: number) => {
    proc.write({ 'net/sockstat': `sockets: used 10\nTCP: inuse ${i} orphan 0 tw ${t} alloc ${i} mem 1\nUDP: inuse 0 mem 0\n` });
  };
  set(inuse, tw);
  return { root: proc.root, set };
}

function census(count: number): SocketCensus {
  return {
    total: count,
    byState: { ESTABLISHED: 1, TIME_WAIT: count - 1 } as SocketCensus['byState'],
    byRemote: [{ address: '169.254.169.254', port: 80, count }],
    remotesDistinct: 1,
    otherRemotes: 0,
  };
}

describe('SocketWatcher', () => {
  it('sends totals and a census first, then only when something moved or is due', () => {
    const proc = procWith(3, 0);
    let now = 0;
    let censuses = 0;
    const events: EventBody[] = [];
    let boot = 0;
    const w = new SocketWatcher({
      procRoot: proc.root,
      emit: (e) => events.push(e),
      census: () => {
        censuses++;
        return census(3);
      },
      sinceBootMs: () => boot,
      now: () => now,
    });
    const tickAt = (t: number) => {
      boot = t;
      w.tick();
    };
    tickAt(42);
    expect(events).toEqual([
      {
        kind: 'sockets',
        tcpInUse: 3,
        timeWait: 0,
        byState: { ESTABLISHED: 1, TIME_WAIT: 2 },
        top: [{ address: '169.254.169.254', port: 80, count: 3 }],
        remotesDistinct: 1,
        censusAt: 42,
      },
    ]);
    now = 500;
    tickAt(43);
    expect(events).toHaveLength(1); // nothing moved, nothing due
    // A storm: totals jump → totals and an early census (after the minimum gap).
    proc.set(10, 3000);
    now = 1500;
    tickAt(44);
    expect(events).toHaveLength(2);
    expect(events[1]).toMatchObject({ tcpInUse: 10, timeWait: 3000, censusAt: 44 });
    expect(censuses).toBe(2);
    // Small wobble: nothing; the census comes back on its period.
    proc.set(10, 3010);
    now = 2000;
    tickAt(45);
    expect(events).toHaveLength(2);
    now = 1500 + CENSUS_EVERY_MS;
    tickAt(46);
    expect(censuses).toBe(3);
  });

  it('spaces costly censuses out to their share of a core; a jump still takes one early', () => {
    const proc = procWith(5000, 5000);
    let now = 0;
    const taken: number[] = [];
    const costMs = 40; // a census of a big socket table: 40 ms / 0.01 % = 400 s
    const w = new SocketWatcher({
      procRoot: proc.root,
      emit: () => {},
      census: () => {
        taken.push(now);
        now += costMs;
        return census(10_000);
      },
      sinceBootMs: () => now,
      now: () => now,
    });
    const period = costMs / CENSUS_CPU_SHARE;
    expect(censusPeriodMs(costMs)).toBe(period);
    expect(period).toBeGreaterThan(CENSUS_EVERY_MS);
    // 1 Hz ticks for two and a half periods, totals steady: the first census and two more.
    for (let s = 0; s < (2.5 * period) / 1000; s++) {
      now = Math.max(now, s * 1000);
      w.tick();
    }
    const gaps = taken.slice(1).map((t, i) => t - taken[i]!);
    expect(taken.length).toBe(3);
    for (const g of gaps) expect(g).toBeGreaterThanOrEqual(period);
    for (const g of gaps) expect(g).toBeLessThan(period + 1000 + costMs);
    // The totals jump: a census at the next tick (past the minimum gap), whatever it costs.
    proc.set(9000, 9000);
    now += 1000;
    w.tick();
    expect(taken.length).toBe(4);
  });

  it('takes a cheap census every CENSUS_EVERY_MS', () => {
    expect(censusPeriodMs(0.5)).toBe(CENSUS_EVERY_MS);
  });

  it('without sock_diag it still sends totals, never a census', () => {
    const proc = procWith(3, 0);
    const events: EventBody[] = [];
    const w = new SocketWatcher({ procRoot: proc.root, emit: (e) => events.push(e), census: null, sinceBootMs: () => 1, now: () => 0 });
    w.tick();
    expect(events).toEqual([{ kind: 'sockets', tcpInUse: 3, timeWait: 0 }]);
  });

  it('reads the real /proc/net/sockstat', () => {
    const events: EventBody[] = [];
    new SocketWatcher({ procRoot: '/proc', emit: (e) => events.push(e), census: null, sinceBootMs: () => 1 }).tick();
    expect(events[0]).toMatchObject({ kind: 'sockets' });
  });
});
