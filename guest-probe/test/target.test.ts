import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EventBody } from '@vsockdiag/proto';
import { FakeProcTree } from '../../test/support/fake-proc.js';
import { waitFor } from '../../test/support/wait.js';
import { childReaper } from '../../test/support/children.js';
import { SAMPLE_KEEPALIVE_MS, TargetWatcher } from '../src/target.js';

// Fixture pids near PID_MAX (4194304, the largest a pid file may hold): they are not
// process.pid (which findProcessByName skips) on any ordinary machine.
const PID = 4_190_001;
const PID2 = 4_190_002;
const OTHER = 4_190_003;
const MISSING = 4_190_099;

interface FakeProc {
  comm: string;
  cmdline?: string[];
  state?: string;
  start?: number;
  threads?: number;
  rss?: number;
  utime?: number;
  stime?: number;
  /** Field 52: waitpid()-style exit status. */
  exitStatus?: number;
  fds?: number;
}

let proc: FakeProcTree;
let root: string;

/** Writes (or rewrites) a process in the fixture tree, from the stat fields TargetWatcher reads. */
function writeProc(pid: number, p: FakeProc): void {
  proc.process(pid, {
    comm: p.comm,
    cmdline: p.cmdline ?? [`/usr/bin/${p.comm}`],
    stat: {
      3: p.state ?? 'S',
      4: 1,
      14: p.utime ?? 0,
      15: p.stime ?? 0,
      20: p.threads ?? 1,
      22: p.start ?? 100,
      24: p.rss ?? 0,
      52: p.exitStatus ?? 0,
    },
    fds: Array.from({ length: p.fds ?? 0 }, () => '/dev/null'),
  });
}

/** A watcher on the fixture tree with a controllable clock, collecting what it emits. */
function watcher(opts: { name?: string; pidFile?: string | null; procRoot?: string } = {}) {
  const clock = { now: 1_000_000 };
  const events: EventBody[] = [];
  const w = new TargetWatcher({
    name: opts.name ?? 'envd',
    pidFile: opts.pidFile ?? null,
    procRoot: opts.procRoot ?? root,
    emit: (e) => events.push(e),
    now: () => clock.now,
  });
  /** Advances the clock by `ms`, ticks, and returns what that tick emitted. */
  const tickAt = (ms: number): EventBody[] => {
    clock.now += ms;
    const before = events.length;
    w.tick();
    return events.slice(before);
  };
  return { w, clock, events, tickAt };
}

const kinds = (events: EventBody[]) => events.map((e) => e.kind);

beforeEach(() => {
  proc = new FakeProcTree(mkdtempSync(join(tmpdir(), 'vd-target-proc-')));
  root = proc.root;
});
afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

describe('TargetWatcher: finding by name', () => {
  it('emits target.found (startedAt = starttime ticks × 10 ms, source name) then a first sample', () => {
    writeProc(OTHER, { comm: 'sshd', start: 5 });
    writeProc(PID, {
      comm: 'envd',
      cmdline: ['/usr/bin/envd', '-port', '49983'],
      start: 1234,
      threads: 7,
      rss: 2560,
      utime: 30,
      stime: 12,
      fds: 4,
    });
    const { w, tickAt } = watcher();
    expect(w.pid).toBeNull();
    const out = tickAt(0);
    expect(out).toEqual([
      {
        kind: 'target.found',
        pid: PID,
        name: 'envd',
        startedAt: 12_340,
        source: 'name',
        cmdline: '/usr/bin/envd -port 49983',
      },
      { kind: 'target.sample', pid: PID, state: 'S', threads: 7, rssKb: 10_240, fds: 4, cpuMs: 420 },
    ]);
    expect(w.pid).toBe(PID);
  });

  it('finds nothing when no process has the name, and keeps looking', () => {
    writeProc(OTHER, { comm: 'sshd' });
    const { w, tickAt } = watcher();
    expect(tickAt(0)).toEqual([]);
    expect(tickAt(200)).toEqual([]);
    writeProc(PID, { comm: 'envd' });
    expect(kinds(tickAt(200))).toEqual(['target.found', 'target.sample']);
    expect(w.pid).toBe(PID);
  });

  it('once found, reads only its stat file (no rescans while it lives)', () => {
    writeProc(PID, { comm: 'envd', start: 500 });
    const { w, tickAt } = watcher();
    tickAt(0);
    // An older envd appears: the watcher stays with the one it follows.
    writeProc(PID2, { comm: 'envd', start: 1 });
    for (let i = 0; i < 5; i++) expect(tickAt(900)).toEqual([]);
    expect(w.pid).toBe(PID);
  });

  it('does not adopt a zombie', () => {
    writeProc(PID, { comm: 'envd', state: 'Z', exitStatus: 256 });
    const { w, tickAt } = watcher();
    expect(tickAt(0)).toEqual([]);
    expect(w.pid).toBeNull();
  });

  it('omits cmdline when it is empty', () => {
    writeProc(PID, { comm: 'envd' });
    proc.write({ cmdline: '' }, PID);
    const { w, events } = watcher();
    w.hint(PID); // a scan skips empty cmdlines (kernel threads); a hint does not
    expect(w.pid).toBe(PID);
    expect(events[0]).toMatchObject({ kind: 'target.found', pid: PID });
    expect(events[0]).not.toHaveProperty('cmdline');
  });
});

describe('TargetWatcher: samples', () => {
  it('samples on a change of state or threads, and every 5 s otherwise', () => {
    writeProc(PID, { comm: 'envd', threads: 2, rss: 100 });
    const { tickAt } = watcher();
    expect(kinds(tickAt(0))).toEqual(['target.found', 'target.sample']);
    // Nothing changed: quiet.
    expect(tickAt(1000)).toEqual([]);
    expect(tickAt(1000)).toEqual([]);
    // More threads: a sample at once.
    writeProc(PID, { comm: 'envd', threads: 5, rss: 100 });
    expect(tickAt(100)).toEqual([expect.objectContaining({ kind: 'target.sample', threads: 5 })]);
    // State change: a sample at once.
    writeProc(PID, { comm: 'envd', threads: 5, rss: 100, state: 'D' });
    expect(tickAt(100)).toEqual([expect.objectContaining({ kind: 'target.sample', state: 'D' })]);
    // RSS alone is not a change worth a sample; it waits for the keepalive.
    writeProc(PID, { comm: 'envd', threads: 5, rss: 900, state: 'D' });
    expect(tickAt(SAMPLE_KEEPALIVE_MS - 1)).toEqual([]);
    expect(tickAt(1)).toEqual([expect.objectContaining({ kind: 'target.sample', rssKb: 3600 })]);
    // Then every 5 s.
    expect(tickAt(4999)).toEqual([]);
    expect(kinds(tickAt(1))).toEqual(['target.sample']);
    expect(kinds(tickAt(SAMPLE_KEEPALIVE_MS))).toEqual(['target.sample']);
  });

  it('keeps the keepalive at 5 s', () => {
    expect(SAMPLE_KEEPALIVE_MS).toBe(5000);
  });

  it('reports only the first letter of the state and counts fds', () => {
    writeProc(PID, { comm: 'envd', state: 'R', fds: 0 });
    const { tickAt } = watcher();
    const out = tickAt(0);
    expect(out[1]).toMatchObject({ kind: 'target.sample', state: 'R', fds: 0 });
  });
});

describe('TargetWatcher: exit', () => {
  it('reports a vanished process as target.exit without a status, then looks again', () => {
    writeProc(PID, { comm: 'envd' });
    const { w, tickAt } = watcher();
    tickAt(0);
    proc.remove(PID);
    const out = tickAt(40);
    expect(out).toEqual([{ kind: 'target.exit', pid: PID }]);
    expect(w.pid).toBeNull();
    expect(tickAt(40)).toEqual([]);
    // A supervisor restarts it: found by the next due scan.
    writeProc(PID2, { comm: 'envd', start: 999 });
    expect(tickAt(100)).toEqual([
      expect.objectContaining({ kind: 'target.found', pid: PID2, startedAt: 9990 }),
      expect.objectContaining({ kind: 'target.sample', pid: PID2 }),
    ]);
  });

  it('looks for a successor right after an exit, without waiting for the scan throttle', () => {
    writeProc(PID, { comm: 'envd', start: 100 });
    const { tickAt } = watcher();
    tickAt(0); // the scan that found it
    proc.remove(PID);
    writeProc(PID2, { comm: 'envd', start: 200 }); // restarted already
    expect(tickAt(40)).toEqual([{ kind: 'target.exit', pid: PID }]);
    // 41 ms after the last scan, yet it scans: the exit made a scan due.
    expect(tickAt(1)[0]).toMatchObject({ kind: 'target.found', pid: PID2 });
  });

  it('reads the exit code of a zombie (field 52 = 1<<8 → exitCode 1)', () => {
    writeProc(PID, { comm: 'envd' });
    const { w, tickAt } = watcher();
    tickAt(0);
    writeProc(PID, { comm: 'envd', state: 'Z', exitStatus: 1 << 8 });
    expect(tickAt(40)).toEqual([{ kind: 'target.exit', pid: PID, exitCode: 1 }]);
    expect(w.pid).toBeNull();
    // The zombie is not found again.
    expect(tickAt(200)).toEqual([]);
  });

  it('reports exitCode 0 for a clean exit', () => {
    writeProc(PID, { comm: 'envd' });
    const { tickAt } = watcher();
    tickAt(0);
    writeProc(PID, { comm: 'envd', state: 'Z', exitStatus: 0 });
    expect(tickAt(40)).toEqual([{ kind: 'target.exit', pid: PID, exitCode: 0 }]);
  });

  it.each([
    [9, 'SIGKILL'],
    [15, 'SIGTERM'],
    [0x80 | 6, 'SIGABRT'], // core dumped
    [11, 'SIGSEGV'],
    [31, 'SIG31'],
  ])('reads the signal of a zombie (field 52 = %i → %s)', (status, signal) => {
    writeProc(PID, { comm: 'envd' });
    const { tickAt } = watcher();
    tickAt(0);
    writeProc(PID, { comm: 'envd', state: 'Z', exitStatus: status });
    expect(tickAt(40)).toEqual([{ kind: 'target.exit', pid: PID, signal }]);
  });

  it('treats pid reuse (another starttime) as exit, then finds the new process', () => {
    writeProc(PID, { comm: 'envd', start: 100 });
    const { w, tickAt } = watcher();
    tickAt(0);
    writeProc(PID, { comm: 'envd', start: 250 });
    expect(tickAt(40)).toEqual([{ kind: 'target.exit', pid: PID }]);
    expect(tickAt(40)).toEqual([
      expect.objectContaining({ kind: 'target.found', pid: PID, startedAt: 2500 }),
      expect.objectContaining({ kind: 'target.sample', pid: PID }),
    ]);
    expect(w.pid).toBe(PID);
  });

  it('after pid reuse by another program, reports the exit and does not adopt the stranger', () => {
    writeProc(PID, { comm: 'envd', start: 100 });
    const { w, tickAt } = watcher();
    tickAt(0);
    writeProc(PID, { comm: 'bash', start: 300 });
    expect(tickAt(40)).toEqual([{ kind: 'target.exit', pid: PID }]);
    expect(tickAt(200)).toEqual([]);
    expect(w.pid).toBeNull();
  });
});

describe('TargetWatcher: pid file', () => {
  it('follows the pid in the file, named after its comm, with source pidfile', () => {
    const pidFile = join(root, 'envd.pid');
    writeProc(PID, { comm: 'envd' }); // a decoy with the configured name
    writeProc(PID2, { comm: 'my-server', cmdline: ['/srv/my-server', '-x'], start: 42 });
    writeFileSync(pidFile, `${PID2}\n`);
    const { w, tickAt } = watcher({ pidFile });
    expect(tickAt(0)).toEqual([
      {
        kind: 'target.found',
        pid: PID2,
        name: 'my-server',
        startedAt: 420,
        source: 'pidfile',
        cmdline: '/srv/my-server -x',
      },
      expect.objectContaining({ kind: 'target.sample', pid: PID2 }),
    ]);
    expect(w.pid).toBe(PID2);
  });

  it('waits for the file, and for a live process behind it', () => {
    const pidFile = join(root, 'late.pid');
    const { w, tickAt } = watcher({ pidFile });
    expect(tickAt(0)).toEqual([]);
    writeFileSync(pidFile, 'garbage');
    expect(tickAt(200)).toEqual([]);
    writeFileSync(pidFile, `${PID}\n`); // not running yet
    expect(tickAt(200)).toEqual([]);
    writeProc(PID, { comm: 'envd' });
    expect(kinds(tickAt(200))).toEqual(['target.found', 'target.sample']);
    expect(w.pid).toBe(PID);
    // The process dies; the stale pid file does not bring it back.
    proc.remove(PID);
    expect(tickAt(200)).toEqual([{ kind: 'target.exit', pid: PID }]);
    expect(tickAt(200)).toEqual([]);
    // The supervisor writes a new pid.
    writeProc(PID2, { comm: 'envd', start: 777 });
    writeFileSync(pidFile, `${PID2}\n`);
    expect(tickAt(200)[0]).toMatchObject({ kind: 'target.found', pid: PID2, source: 'pidfile' });
  });

  it('ignores hints in pid file mode', () => {
    const pidFile = join(root, 'none.pid');
    writeProc(PID, { comm: 'envd' });
    const { w, events } = watcher({ pidFile });
    w.hint(PID);
    expect(events).toEqual([]);
    expect(w.pid).toBeNull();
  });
});

describe('TargetWatcher: hint', () => {
  it('adopts a matching process immediately, without waiting for the scan throttle', () => {
    const { w, events, tickAt } = watcher();
    expect(tickAt(0)).toEqual([]);
    writeProc(PID, { comm: 'envd', start: 3 });
    expect(tickAt(10)).toEqual([]); // a scan is not due yet
    w.hint(PID);
    expect(kinds(events)).toEqual(['target.found', 'target.sample']);
    expect(events[0]).toMatchObject({ pid: PID, source: 'name', startedAt: 30 });
    expect(w.pid).toBe(PID);
  });

  it('ignores a process with another name, pid 0, and hints once the target is known', () => {
    writeProc(OTHER, { comm: 'systemd-notify' });
    writeProc(PID, { comm: 'envd' });
    writeProc(PID2, { comm: 'envd' });
    const { w, events } = watcher();
    w.hint(OTHER);
    w.hint(0);
    w.hint(-1);
    w.hint(MISSING); // no such process
    expect(events).toEqual([]);
    w.hint(PID);
    expect(w.pid).toBe(PID);
    w.hint(PID2);
    expect(w.pid).toBe(PID);
    expect(events.filter((e) => e.kind === 'target.found')).toHaveLength(1);
  });

  it('does not adopt a zombie from a hint', () => {
    writeProc(PID, { comm: 'envd', state: 'Z' });
    const { w, events } = watcher();
    w.hint(PID);
    expect(events).toEqual([]);
    expect(w.pid).toBeNull();
  });

  it('matches a long name on its first 15 bytes (the kernel comm limit)', () => {
    writeProc(PID, { comm: 'a-very-long-dae' });
    const { w, events } = watcher({ name: 'a-very-long-daemon-name' });
    w.hint(PID);
    expect(events[0]).toMatchObject({ kind: 'target.found', pid: PID, name: 'a-very-long-daemon-name' });
  });
});

describe('TargetWatcher: scan throttle', () => {
  it('scans at most once per 100 ms during the first 30 s', () => {
    const { tickAt } = watcher();
    expect(tickAt(0)).toEqual([]); // scans: nothing yet
    writeProc(PID, { comm: 'envd' });
    expect(tickAt(50)).toEqual([]);
    expect(tickAt(49)).toEqual([]); // 99 ms after the last scan
    expect(kinds(tickAt(1))).toEqual(['target.found', 'target.sample']); // 100 ms
  });

  it('many fast ticks cause few scans', () => {
    const { tickAt } = watcher();
    tickAt(0);
    writeProc(PID, { comm: 'envd' });
    // 40 ms boot-interval ticks: the first scan that can see it is at 120 ms (≥ 100 ms).
    const foundAt: number[] = [];
    for (let t = 40; t <= 400; t += 40) if (tickAt(40).length) foundAt.push(t);
    expect(foundAt).toEqual([120]);
  });

  it('scans at most once per second after the first 30 s', () => {
    const { tickAt } = watcher();
    expect(tickAt(30_000)).toEqual([]); // scans at 30 s
    writeProc(PID, { comm: 'envd' });
    expect(tickAt(100)).toEqual([]);
    expect(tickAt(400)).toEqual([]);
    expect(tickAt(499)).toEqual([]); // 999 ms after the last scan
    expect(kinds(tickAt(1))).toEqual(['target.found', 'target.sample']);
  });
});

describe('TargetWatcher: wrap mode', () => {
  it('adopts its child, never searches, and reports the exit status it is given', () => {
    writeProc(PID, { comm: 'envd', start: 50, threads: 3 });
    writeProc(PID2, { comm: 'envd', start: 1 }); // would win a name search
    const { w, events, tickAt } = watcher();
    w.adoptChild(PID, ['/usr/bin/envd', '-v']);
    expect(events).toEqual([
      { kind: 'target.found', pid: PID, name: 'envd', startedAt: 500, source: 'child', cmdline: '/usr/bin/envd -v' },
    ]);
    expect(tickAt(0)).toEqual([expect.objectContaining({ kind: 'target.sample', pid: PID, threads: 3 })]);
    // Gone from /proc: no exit from /proc for a child (its status comes from waitpid).
    proc.remove(PID);
    expect(tickAt(100)).toEqual([]);
    w.childExited(3, null);
    expect(events.at(-1)).toEqual({ kind: 'target.exit', pid: PID, exitCode: 3 });
    expect(w.pid).toBeNull();
    // No search afterwards, even though an envd exists.
    expect(tickAt(1000)).toEqual([]);
    w.childExited(null, 'SIGKILL'); // nothing tracked any more: ignored
    expect(events.filter((e) => e.kind === 'target.exit')).toHaveLength(1);
  });

  it('reports a signal from the child', () => {
    writeProc(PID, { comm: 'envd' });
    const { w, events } = watcher();
    w.adoptChild(PID, ['envd']);
    w.childExited(null, 'SIGTERM');
    expect(events.at(-1)).toEqual({ kind: 'target.exit', pid: PID, signal: 'SIGTERM' });
  });
});

describe('TargetWatcher: live, with the real /proc', () => {
  let work: string;
  const children = childReaper();

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('finds a renamed copy of sleep and reports its exit after a kill', async () => {
    work = mkdtempSync(join(tmpdir(), 'vd-target-live-'));
    const name = `vd-t-${randomBytes(4).toString('hex')}`; // 13 bytes: fits comm
    const bin = join(work, name);
    copyFileSync('/bin/sleep', bin);
    chmodSync(bin, 0o755);
    const c = children.track(spawn(bin, ['30'], { stdio: 'ignore' }));
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    const events: EventBody[] = [];
    const w = new TargetWatcher({ name, pidFile: null, procRoot: '/proc', emit: (e) => events.push(e) });

    await waitFor(
      'the watcher to find the child',
      () => {
        w.tick();
        return w.pid !== null;
      },
      { timeoutMs: 5000, intervalMs: 20 },
    );
    expect(w.pid).toBe(c.pid);
    const found = events[0];
    expect(found).toMatchObject({ kind: 'target.found', pid: c.pid, name, source: 'name', cmdline: `${bin} 30` });
    // startedAt is the process start after boot, in ms: not in the future.
    const uptimeMs = Number.parseFloat(readFileSync('/proc/uptime', 'latin1')) * 1000;
    expect((found as { startedAt: number }).startedAt).toBeGreaterThan(0);
    expect((found as { startedAt: number }).startedAt).toBeLessThanOrEqual(uptimeMs + 20);
    expect(events[1]).toMatchObject({ kind: 'target.sample', pid: c.pid, threads: 1 });
    expect((events[1] as { fds: number }).fds).toBeGreaterThanOrEqual(0);

    c.kill('SIGKILL');
    await exited;
    await waitFor(
      'target.exit',
      () => {
        w.tick();
        return events.some((e) => e.kind === 'target.exit');
      },
      { timeoutMs: 5000, intervalMs: 20 },
    );
    const exit = events.find((e) => e.kind === 'target.exit');
    expect(exit).toBeDefined();
    expect(exit).toMatchObject({ kind: 'target.exit', pid: c.pid });
    // Reaped by Node already: no status; caught as a zombie: it was SIGKILL.
    const e = exit as { signal?: string; exitCode?: number };
    if (e.signal !== undefined || e.exitCode !== undefined) expect(e).toMatchObject({ signal: 'SIGKILL' });
    expect(w.pid).toBeNull();
  });
});
