import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildFakeEnvd } from '../../test/harness/fake-envd.js';
import { fakeProcTree, statLine } from '../../test/support/fake-proc.js';
import { childReaper, waitForOutput, waitUntilAsleep } from '../../test/support/children.js';
import { NoSuchProcessError, TARGET_EXITED_LINE, archName, formatSyscall, threadsDump, waitForExit } from '../src/dumps/index.js';

let root: string;

/** A stat line; unless set, one thread (field 20) started at tick 12345 (field 22). */
const stat = (pid: number, comm: string, fields: Record<number, string | number> = {}) =>
  statLine(pid, comm, { 20: 1, 22: 12345, ...fields });

interface FakeTask {
  comm: string;
  state: string;
  wchan?: string;
  syscall?: string;
  stack?: string;
}

/** Writes a fake /proc/<pid> with the given tasks into a fresh folder; returns the procRoot. */
function fakeProc(pid: number, comm: string, tasks: Record<number, FakeTask | null>, leader: Record<number, string | number> = {}): string {
  const proc = fakeProcTree(root, { [`${pid}/stat`]: stat(pid, comm, { 20: Object.keys(tasks).length, ...leader }) }).mkdir(`${pid}/task`);
  for (const [tid, t] of Object.entries(tasks)) {
    const task = `${pid}/task/${tid}`;
    proc.mkdir(task);
    if (!t) continue; // an empty folder: a task that ended while we look
    proc.write({ stat: stat(Number(tid), t.comm, { 3: t.state }), wchan: t.wchan, syscall: t.syscall, stack: t.stack }, task);
  }
  return proc.root;
}

const children = childReaper();

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'dumps-threads-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe('threadsDump text format (fixture procRoot)', () => {
  it('writes the exact format the host parser reads', () => {
    const procRoot = fakeProc(4242, 'envd', {
      4242: {
        comm: 'envd',
        state: 'S',
        wchan: 'futex_wait_queue',
        syscall: '202 0x8d5e88 0x80 0x0 0x0 0x0 0x0 0x7ffcbd6119e8 0x468063\n',
        stack: '[<0>] futex_wait_queue+0x60/0x90\n[<0>] futex_wait+0x67/0x120\n[<0>] do_syscall_64+0x71/0x280\n',
      },
      4243: { comm: 'envd', state: 'R', wchan: '0', syscall: 'running\n' },
      4244: { comm: 'envd', state: 'S', wchan: 'do_epoll_wait', syscall: '-1 0x7f24a35edd00 0x468063\n', stack: '' },
      4245: { comm: 'odd) name', state: 'D', wchan: '' },
    });
    const d = threadsDump(4242, { procRoot, arch: 'x64' });
    expect(d.complete).toBe(true);
    expect(d.tasks).toBe(4);
    expect(d.text).toBe(
      [
        'threads of pid 4242 (envd) arch=x86_64',
        'task 4242 (envd) state=S wchan=futex_wait_queue syscall=202 0x8d5e88 0x80 0x0 0x0 0x0 0x0',
        '  [<0>] futex_wait_queue+0x60/0x90',
        '  [<0>] futex_wait+0x67/0x120',
        '  [<0>] do_syscall_64+0x71/0x280',
        'task 4243 (envd) state=R wchan=0 syscall=running',
        'task 4244 (envd) state=S wchan=do_epoll_wait syscall=none',
        'task 4245 (odd) name) state=D wchan=0 syscall=?',
        '',
      ].join('\n'),
    );
  });

  it('names the arch as the kernel does', () => {
    const procRoot = fakeProc(7, 'x', { 7: { comm: 'x', state: 'S', wchan: '0', syscall: 'running' } });
    expect(threadsDump(7, { procRoot, arch: 'arm64' }).text.split('\n')[0]).toBe('threads of pid 7 (x) arch=aarch64');
    expect(archName('x64')).toBe('x86_64');
    expect(archName('arm64')).toBe('aarch64');
  });

  it('formats the syscall file forms', () => {
    expect(formatSyscall('0 0x3 0x7fa1 0x20000 0x7fa1 0xffffffff 0x0 0x7ffc 0x7fa1\n')).toBe('0 0x3 0x7fa1 0x20000 0x7fa1 0xffffffff 0x0');
    expect(formatSyscall('running\n')).toBe('running');
    expect(formatSyscall('-1 0x0 0x0\n')).toBe('none');
    expect(formatSyscall(undefined)).toBe('?');
    expect(formatSyscall('')).toBe('?');
  });

  it('throws NoSuchProcessError when the target is not there at the start', () => {
    const procRoot = mkdtempSync(join(root, 'empty-'));
    expect(() => threadsDump(99, { procRoot })).toThrow(NoSuchProcessError);
  });

  it('leaves out a single thread that ended while the process goes on', () => {
    const procRoot = fakeProc(50, 'envd', {
      50: { comm: 'envd', state: 'S', wchan: '0', syscall: 'running' },
      51: null,
      52: { comm: 'envd', state: 'S', wchan: 'futex_wait_queue', syscall: '202 0x1 0x80 0x0 0x0 0x0 0x0 0x2 0x3' },
    });
    const d = threadsDump(50, { procRoot, arch: 'x64' });
    expect(d.complete).toBe(true);
    expect(d.tasks).toBe(2);
    expect(d.text).not.toContain('task 51 ');
    expect(d.text).not.toContain('#');
  });

  it('stops cleanly when the target exits mid-dump (process gone)', () => {
    const tasks: Record<number, FakeTask> = {};
    for (let t = 60; t < 65; t++) tasks[t] = { comm: 'envd', state: 'S', wchan: '0', syscall: 'running' };
    const procRoot = fakeProc(60, 'envd', tasks);
    const d = threadsDump(60, {
      procRoot,
      arch: 'x64',
      afterTask: (tid) => {
        if (tid === 61) rmSync(join(procRoot, '60'), { recursive: true, force: true });
      },
    });
    expect(d.complete).toBe(false);
    expect(d.tasks).toBe(2);
    const lines = d.text.trimEnd().split('\n');
    expect(lines.at(-1)).toBe(TARGET_EXITED_LINE);
    expect(lines.filter((l) => l.startsWith('task '))).toHaveLength(2);
  });

  it('stops cleanly when the target becomes a zombie mid-dump', () => {
    const tasks: Record<number, FakeTask> = {};
    for (let t = 70; t < 74; t++) tasks[t] = { comm: 'envd', state: 'S', wchan: '0', syscall: 'running' };
    const procRoot = fakeProc(70, 'envd', tasks);
    const d = threadsDump(70, {
      procRoot,
      arch: 'x64',
      afterTask: (tid) => {
        if (tid !== 70) return;
        // What the kernel shows once the process exited but was not reaped yet.
        writeFileSync(join(procRoot, '70', 'stat'), stat(70, 'envd', { 3: 'Z', 20: 1 }));
        for (let t = 71; t < 74; t++) rmSync(join(procRoot, '70', 'task', String(t)), { recursive: true });
      },
    });
    expect(d.complete).toBe(false);
    expect(d.tasks).toBe(1);
    expect(d.text.trimEnd().split('\n').at(-1)).toBe(TARGET_EXITED_LINE);
  });

  it('a leader zombie whose other threads still run is not an exit', () => {
    const procRoot = fakeProc(
      80,
      'envd',
      {
        80: { comm: 'envd', state: 'Z', wchan: '0', syscall: '-1 0x0 0x0' },
        81: null,
        82: { comm: 'envd', state: 'S', wchan: '0', syscall: 'running' },
      },
      { 3: 'Z', 20: 2 },
    );
    const d = threadsDump(80, { procRoot, arch: 'x64' });
    expect(d.complete).toBe(true);
    expect(d.tasks).toBe(2);
  });

  it('bounds the number of tasks and the bytes', () => {
    const tasks: Record<number, FakeTask> = {};
    for (let t = 100; t < 110; t++) tasks[t] = { comm: 'envd', state: 'S', wchan: '0', syscall: 'running', stack: '[<0>] x+0x1/0x2\n' };
    const procRoot = fakeProc(100, 'envd', tasks);
    const byTasks = threadsDump(100, { procRoot, maxTasks: 3 });
    expect(byTasks.complete).toBe(false);
    expect(byTasks.tasks).toBe(3);
    expect(byTasks.text.trimEnd().split('\n').at(-1)).toBe('# cut: more than 3 tasks (10 listed)');
    const byBytes = threadsDump(100, { procRoot, maxBytes: 300 });
    expect(byBytes.complete).toBe(false);
    expect(Buffer.byteLength(byBytes.text)).toBeLessThan(300 + 100);
    expect(byBytes.text.trimEnd().split('\n').at(-1)).toMatch(/^# cut: dump over 300 bytes after \d+ of 10 tasks$/);
  });
});

const isRoot = process.getuid?.() === 0;
const FUTEX_NR = process.arch === 'arm64' ? 98 : 202;

describe('threadsDump on real processes', () => {
  it('dumps the test process itself', () => {
    const d = threadsDump(process.pid);
    expect(d.complete).toBe(true);
    const lines = d.text.split('\n');
    expect(lines[0]).toMatch(new RegExp(`^threads of pid ${process.pid} \\(.+\\) arch=(x86_64|aarch64)$`));
    expect(d.tasks).toBeGreaterThan(1); // node has worker threads
    const taskLines = lines.filter((l) => l.startsWith('task '));
    expect(taskLines).toHaveLength(d.tasks);
    for (const l of taskLines) expect(l).toMatch(/^task \d+ \(.*\) state=[A-Za-z] wchan=\S+ syscall=(\d+( \S+){6}|running|none|\?)$/);
    expect(taskLines[0]).toContain(`task ${process.pid} `);
    expect(taskLines[0]).toContain('state=R'); // it is us, reading
  });

  it('sees the fake envd hung in cgroup-manager waiting on a futex', async () => {
    const bin = await buildFakeEnvd();
    const child = spawn(bin, ['-addr', '127.0.0.1', '-port', '0', '-hang-in', 'cgroup-manager', '-no-notify'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.track(child);
    await waitForOutput(child, 'stderr', 'creating cgroup manager');
    await waitUntilAsleep(child.pid!);
    const d = threadsDump(child.pid!);
    expect(d.complete).toBe(true);
    expect(d.text.split('\n')[0]).toBe(`threads of pid ${child.pid} (fake-envd) arch=${archName()}`);
    const tasks = d.text.split('\n').filter((l) => l.startsWith('task '));
    expect(tasks.length).toBeGreaterThanOrEqual(2);
    expect(tasks.some((l) => /wchan=\S*futex/.test(l) || l.includes(`syscall=${FUTEX_NR} `))).toBe(true);
    if (isRoot) expect(d.text).toMatch(/^ {2}\[<[0-9a-f]+>\] \S*futex/m);
  });

  it('a real target killed mid-dump ends the dump incomplete, without throwing', async () => {
    const bin = await buildFakeEnvd();
    const child = spawn(bin, ['-addr', '127.0.0.1', '-port', '0', '-hang-in', 'cgroup-manager', '-no-notify'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.track(child);
    await waitForOutput(child, 'stderr', 'creating cgroup manager');
    const pid = child.pid!;
    const before = threadsDump(pid);
    expect(before.tasks).toBeGreaterThanOrEqual(3);
    let killed = false;
    const d = threadsDump(pid, {
      afterTask: () => {
        if (killed) return;
        killed = true;
        process.kill(pid, 'SIGKILL');
        // Node reaps only from its event loop, so the target stays a zombie: wait until it
        // is one with no thread left (state Z, field 20 = 1).
        const until = Date.now() + 5000;
        while (Date.now() < until) {
          const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
          const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
          if (fields[0] === 'Z' && fields[17] === '1') break;
        }
      },
    });
    expect(killed).toBe(true);
    expect(d.complete).toBe(false);
    expect(d.tasks).toBe(1);
    expect(d.text.trimEnd().split('\n').at(-1)).toBe(TARGET_EXITED_LINE);
    await waitForExit(pid);
  });
});
