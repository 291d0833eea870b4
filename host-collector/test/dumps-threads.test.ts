// Threads dumps (src/dumps/threads.ts): the probe's /proc text format, grouping, syscall
// names, and dump-kind detection. Fixtures threads-fake-envd-x86_64-{1,2}.txt were read
// 0.3 s apart from /proc of a running fake envd (hung in cgroup-manager, with a small MMDS
// storm), in the probe's format (six syscall arguments, sp and pc left out).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { detectDumpKind } from '../src/dumps/detect.js';
import { groupThreads, normalizeArch, parseThreads, summarizeThreads, SYSCALL_NAMES, syscallName } from '../src/dumps/threads.js';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'dumps');
const readFixture = (name: string): string => readFileSync(path.join(fixtures, name), 'utf8');

interface TaskFixture {
  tid: number;
  comm?: string;
  state: string;
  wchan?: string;
  /** Number, 'running', 'none' or '?'; args follow a number. */
  syscall: number | 'running' | 'none' | '?';
  args?: string[];
  stack?: string[];
  notes?: string[];
}

/** Builds a threads dump in the probe's format (see the top of src/dumps/threads.ts). */
function threadsDumpText(fx: { pid: number; comm: string; arch?: string; tasks: TaskFixture[] }): string {
  const lines = [`threads of pid ${fx.pid} (${fx.comm})${fx.arch ? ` arch=${fx.arch}` : ''}`];
  for (const t of fx.tasks) {
    const sc = typeof t.syscall === 'number' ? [String(t.syscall), ...(t.args ?? [])].join(' ') : t.syscall;
    lines.push(`task ${t.tid} (${t.comm ?? fx.comm}) state=${t.state} wchan=${t.wchan ?? '0'} syscall=${sc}`);
    for (const f of t.stack ?? []) lines.push(`  [<0>] ${f}`);
    for (const n of t.notes ?? []) lines.push(`  ${n}`);
  }
  return `${lines.join('\n')}\n`;
}

const FUTEX_STACK = [
  'futex_wait_queue+0x60/0x90',
  'futex_wait+0x185/0x270',
  'do_futex+0x106/0x1b0',
  '__arm64_sys_futex+0x11c/0x1a0',
  'invoke_syscall+0x50/0x120',
  'el0_svc_common.constprop.0+0x48/0xf0',
];

describe('parseThreads', () => {
  it('parses the real fixture: header with arch, tasks, syscall args, kernel stacks', () => {
    const text = readFixture('threads-fake-envd-x86_64-1.txt');
    expect(detectDumpKind(text)).toBe('threads');
    const dump = parseThreads(text);
    expect(dump).toMatchObject({ pid: 2522, comm: 'fe', arch: 'x86_64', skippedLines: 0 });
    expect(dump.tasks).toHaveLength(7);
    expect(dump.tasks[0]).toEqual({
      tid: 2522,
      comm: 'fe',
      state: 'S',
      wchan: 'futex_do_wait',
      syscall: {
        kind: 'syscall',
        nr: 202,
        name: 'futex',
        args: ['0x8ccba8', '0x80', '0x0', '0x0', '0x0', '0x0'],
      },
      stack: [
        'futex_do_wait+0x46/0x90',
        '__futex_wait+0x8a/0x100',
        'futex_wait+0x67/0x120',
        'do_futex+0xfd/0x250',
        '__x64_sys_futex+0x112/0x210',
        'do_syscall_64+0x71/0x280',
        'entry_SYSCALL_64_after_hwframe+0x76/0x7e',
      ],
    });
    expect(dump.tasks[6]?.syscall).toMatchObject({ kind: 'syscall', nr: 281, name: 'epoll_pwait' });
  });

  it('reads running, -1, unreadable, old-kernel addresses, notes, odd comms and aarch64', () => {
    const text =
      threadsDumpText({
        pid: 77,
        comm: 'envd (main) x',
        arch: 'aarch64',
        tasks: [
          { tid: 77, state: 'S', wchan: 'futex_wait_queue', syscall: 98, args: ['0x4000a8', '0x80', '0x0'], stack: FUTEX_STACK },
          { tid: 78, comm: 'worker 1', state: 'R', syscall: 'running' },
          { tid: 79, state: 'D', wchan: 'io_schedule', syscall: -1, args: ['0xffff', '0x4000'] },
          { tid: 80, state: 'S', wchan: '?', syscall: '?', notes: ['! stack: EACCES'] },
          { tid: 81, state: 'S', wchan: 'do_epoll_wait', syscall: 22, args: ['0x4'] },
          { tid: 82, state: 'S', wchan: 'do_wait', syscall: 'none' },
        ],
      }).replace('  [<0>] futex_wait_queue+0x60/0x90', '  [<ffffffff810f5a3a>] futex_wait_queue+0x60/0x90') +
      '# target exited during the dump\n';
    const dump = parseThreads(text);
    expect(dump).toMatchObject({ pid: 77, comm: 'envd (main) x', arch: 'aarch64', skippedLines: 0 });
    expect(dump.tasks.map((t) => t.syscall)).toEqual([
      { kind: 'syscall', nr: 98, name: 'futex', args: ['0x4000a8', '0x80', '0x0'] },
      { kind: 'running' },
      { kind: 'none' },
      { kind: 'unknown' },
      { kind: 'syscall', nr: 22, name: 'epoll_pwait', args: ['0x4'] },
      { kind: 'none' },
    ]);
    expect(dump.tasks[3]?.wchan).toBeUndefined();
    expect(dump.comments).toEqual(['target exited during the dump']);
    expect(dump.tasks[0]?.stack[0]).toBe('futex_wait_queue+0x60/0x90');
    expect(dump.tasks[1]).toMatchObject({ tid: 78, comm: 'worker 1', state: 'R' });
    expect(dump.tasks[1]?.wchan).toBeUndefined();
    expect(dump.tasks[3]?.notes).toEqual(['! stack: EACCES']);
  });

  it('tolerates garbage, a missing header and an unknown arch', () => {
    expect(parseThreads('')).toMatchObject({ tasks: [], skippedLines: 0 });
    const noHeader = parseThreads('hello\ntask 5 (x) state=S wchan=0 syscall=202 0x1\n  [<0>] a+0x1/0x2\ntask oops\n');
    expect(Number.isNaN(noHeader.pid)).toBe(true);
    expect(noHeader.tasks).toEqual([
      { tid: 5, comm: 'x', state: 'S', syscall: { kind: 'syscall', nr: 202, args: ['0x1'] }, stack: ['a+0x1/0x2'] },
    ]);
    expect(noHeader.skippedLines).toBe(2);
    const mips = parseThreads('threads of pid 1 (init) arch=mips\ntask 1 (init) state=S wchan=0 syscall=202\n');
    expect(mips.arch).toBeUndefined();
    expect(mips.tasks[0]?.syscall).toEqual({ kind: 'syscall', nr: 202, args: [] });
    // Cut mid-task line: kept as far as it goes.
    const cut = parseThreads('threads of pid 9 (e) arch=x86_64\ntask 9 (e) state=S wchan=futex_do_wait syscall=20');
    expect(cut.tasks[0]?.syscall).toMatchObject({ kind: 'syscall', nr: 20, name: 'writev' });
    expect(parseThreads('task 1 (x) sta').tasks).toEqual([]);
  });
});

describe('groupThreads', () => {
  it('groups the real fixture: the futex wait is the top group', () => {
    const groups = groupThreads(parseThreads(readFixture('threads-fake-envd-x86_64-1.txt')));
    console.log(`fake envd threads grouped:\n${summarizeThreads(groups)}`);
    expect(groups.map((g) => [g.count, g.blockedIn])).toEqual([
      [6, 'futex_do_wait'],
      [1, 'do_epoll_wait'],
    ]);
    expect(groups[0]).toMatchObject({ state: 'S', wchan: 'futex_do_wait', syscall: { kind: 'syscall', nr: 202, name: 'futex', args: [] } });
    expect(groups[0]?.tids).toEqual([2522, 2524, 2525, 2526, 2527, 2528]);
    expect(groups[0]?.comms).toEqual(['fe']);
  });

  it('puts D first, then count; blockedIn falls back to the stack, then the syscall', () => {
    const tasks: TaskFixture[] = [];
    for (let i = 0; i < 12; i++)
      tasks.push({ tid: 100 + i, state: 'S', wchan: 'futex_wait_queue', syscall: 98, args: [`0x${i}`], stack: FUTEX_STACK });
    tasks.push({
      tid: 200,
      state: 'D',
      wchan: 'rwsem_down_write_slowpath',
      syscall: 34,
      stack: ['rwsem_down_write_slowpath+0x2a0/0x5c0', 'do_mkdirat+0x90/0x170'],
    });
    tasks.push({ tid: 201, state: 'S', syscall: 101, stack: ['hrtimer_nanosleep+0x90/0x120'] });
    tasks.push({ tid: 202, state: 'S', syscall: 101, stack: ['hrtimer_nanosleep+0x94/0x120'] }); // offset differs: same symbol
    tasks.push({ tid: 203, state: 'R', syscall: 'running' });
    tasks.push({ tid: 204, state: 'S', syscall: 63, args: ['0x3', '0x4000'] });
    const groups = groupThreads(parseThreads(threadsDumpText({ pid: 100, comm: 'envd', arch: 'arm64', tasks })));
    expect(groups.map((g) => [g.state, g.count, g.blockedIn])).toEqual([
      ['D', 1, 'rwsem_down_write_slowpath'],
      ['S', 12, 'futex_wait_queue'],
      ['S', 2, 'hrtimer_nanosleep'],
      ['R', 1, 'running'],
      ['S', 1, 'read'],
    ]);
    expect(groups[0]?.syscall).toMatchObject({ name: 'mkdirat' });
    expect(groups[4]?.syscall).toEqual({ kind: 'syscall', nr: 63, name: 'read', args: ['0x3', '0x4000'] });
    const text = summarizeThreads(groups, { limit: 3 });
    expect(text.split('\n')).toEqual([
      ' 1  D  mkdirat    blocked in rwsem_down_write_slowpath  [envd]',
      '12  S  futex      blocked in futex_wait_queue           [envd]',
      ' 2  S  nanosleep  blocked in hrtimer_nanosleep          [envd]',
      '… 2 more groups (2 threads)',
    ]);
  });
});

describe('syscall tables', () => {
  it('names common syscalls on both arches', () => {
    const common: Array<[string, number, number]> = [
      ['futex', 202, 98],
      ['epoll_pwait', 281, 22],
      ['nanosleep', 35, 101],
      ['read', 0, 63],
      ['write', 1, 64],
      ['accept4', 288, 242],
      ['accept', 43, 202],
      ['connect', 42, 203],
      ['recvfrom', 45, 207],
      ['sendto', 44, 206],
      ['recvmsg', 47, 212],
      ['sendmsg', 46, 211],
      ['openat', 257, 56],
      ['close', 3, 57],
      ['ppoll', 271, 73],
      ['pselect6', 270, 72],
      ['clock_nanosleep', 230, 115],
      ['wait4', 61, 260],
      ['waitid', 247, 95],
      ['rt_sigtimedwait', 128, 137],
      ['restart_syscall', 219, 128],
      ['io_getevents', 208, 4],
      ['fsync', 74, 82],
      ['ioctl', 16, 29],
      ['sched_yield', 24, 124],
      ['mount', 165, 40],
      ['epoll_pwait2', 441, 441],
      ['futex_waitv', 449, 449],
    ];
    for (const [name, x86, arm] of common) {
      expect(syscallName('x86_64', x86), `x86_64 ${name}`).toBe(name);
      expect(syscallName('aarch64', arm), `aarch64 ${name}`).toBe(name);
    }
    expect(Object.keys(SYSCALL_NAMES.x86_64).length).toBeGreaterThanOrEqual(20);
    expect(Object.keys(SYSCALL_NAMES.aarch64).length).toBeGreaterThanOrEqual(20);
    expect(syscallName('arm64', 98)).toBe('futex');
    expect(syscallName('amd64', 202)).toBe('futex');
    expect(syscallName(undefined, 202)).toBeUndefined();
    expect(syscallName('x86_64', 9999)).toBeUndefined();
    expect(normalizeArch('riscv64')).toBeUndefined();
  });
});

describe('detectDumpKind', () => {
  it('tells threads, goroutines and anything else apart', () => {
    expect(detectDumpKind('\n# probe threads dump\nthreads of pid 1 (envd) arch=x86_64\n')).toBe('threads');
    expect(detectDumpKind('goroutine 1 [running]:\nmain.main()\n')).toBe('goroutines');
    expect(detectDumpKind('log line\ngoroutine 1 gp=0xc000002380 m=0 mp=0x5d0f80 [running]:\r\n')).toBe('goroutines');
    expect(detectDumpKind('some log\nthreads of pid 1 (x)\n')).toBe('unknown');
    expect(detectDumpKind('goroutine profile: total 3\n')).toBe('unknown');
    expect(detectDumpKind('')).toBe('unknown');
    expect(detectDumpKind(null as unknown as string)).toBe('unknown');
  });
});
