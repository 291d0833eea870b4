import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeProcTree, statLine } from '../../test/support/fake-proc.js';
import { ProcFile, readProcFile, readProcInto, procBuffer } from '../src/proc/read.js';
import { CLOCK_TICKS, PAGE_SIZE, decodeExitCode, pidStatOf, readPidStat } from '../src/proc/stat.js';
import { readPidStatusFields } from '../src/proc/status.js';

let proc: FakeProcTree;
let root: string;

/** A stat line whose unset fields all differ (3 × the field number), so a field read from
 *  the wrong position shows; field 29 is a u64 beyond the exact range of a Number. */
const stat = (pid: number, comm: string, fields: Record<number, string | number> = {}, count = 52) =>
  statLine(pid, comm, { 29: '18446744073709551615', ...fields }, { count, fill: (f) => f * 3 });

beforeAll(() => {
  proc = new FakeProcTree(mkdtempSync(join(tmpdir(), 'proc-stat-')));
  root = proc.root;
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe('readProcFile', () => {
  it('returns null for a missing file and throws other errors', () => {
    expect(readProcFile(join(root, 'nope'))).toBeNull();
    expect(readProcInto(join(root, 'nope'))).toBe(-1);
    expect(() => readProcFile(root)).toThrow(/EISDIR/);
  });

  it('reads small, exactly-4096, large and very large files whole', () => {
    for (const size of [0, 10, 4095, 4096, 4097, 70_000, 1_500_000]) {
      const text = 'abcdefghij'.repeat(Math.ceil(size / 10)).slice(0, size);
      const p = join(root, `f${size}`);
      writeFileSync(p, text);
      expect(readProcFile(p)).toBe(text);
    }
  });

  it('does not grow the shared buffer for a file of exactly its size', () => {
    const p = join(root, 'small');
    writeFileSync(p, 'x');
    readProcInto(p);
    const cap = procBuffer().length;
    const exact = join(root, 'exact');
    writeFileSync(exact, 'y'.repeat(cap));
    expect(readProcInto(exact)).toBe(cap);
    expect(procBuffer().length).toBe(cap);
  });

  it('truncates at maxBytes', () => {
    const p = join(root, 'trunc');
    writeFileSync(p, '0123456789'.repeat(1000));
    expect(readProcFile(p, 15)).toBe('012345678901234');
    expect(readProcFile(p, 9000)?.length).toBe(9000);
  });

  it('reads the real /proc', () => {
    expect(readProcFile('/proc/self/stat')).toMatch(/^\d+ \(/);
    expect(readProcFile(`/proc/${process.pid}/status`)).toContain('VmRSS:');
  });
});

describe('readPidStat (fixtures)', () => {
  it('parses comm with spaces and parentheses using the last ")"', () => {
    proc.write(
      {
        stat: stat(9000001, '(weird) name)', { 4: 42, 14: 1234, 15: 56, 20: 7, 22: 987654321, 24: 2048, 52: 0 }),
      },
      9000001,
    );
    expect(readPidStat(9000001, root)).toEqual({
      pid: 9000001,
      comm: '(weird) name)',
      state: 'S',
      ppid: 42,
      utimeTicks: 1234,
      stimeTicks: 56,
      threads: 7,
      startTimeTicks: 987654321,
      rssPages: 2048,
      exitCode: null,
    });
  });

  it('handles comm that looks like more fields', () => {
    proc.write({ stat: stat(9000002, 'a) R 1 2 3 (b', { 3: 'R', 4: 9 }) }, 9000002);
    const st = readPidStat(9000002, root);
    expect(st?.comm).toBe('a) R 1 2 3 (b');
    expect(st?.state).toBe('R');
    expect(st?.ppid).toBe(9);
  });

  it('reads a zombie exit code (field 52)', () => {
    proc.write({ stat: stat(9000003, 'dead', { 3: 'Z', 20: 1, 24: 0, 52: 3 << 8 }) }, 9000003);
    const st = readPidStat(9000003, root);
    expect(st?.state).toBe('Z');
    expect(st?.exitCode).toBe(768);
    expect(decodeExitCode(768)).toEqual({ code: 3, signal: null });
    expect(decodeExitCode(9)).toEqual({ code: null, signal: 9 });
  });

  it('gives exitCode null on an old kernel without field 52', () => {
    proc.write({ stat: stat(9000004, 'old', { 3: 'Z' }, 44) }, 9000004);
    const st = readPidStat(9000004, root);
    expect(st).not.toBeNull();
    expect(st?.exitCode).toBeNull();
    expect(st?.rssPages).toBe(24 * 3);
  });

  it('returns null for a gone process and for malformed stat', () => {
    expect(readPidStat(9000099, root)).toBeNull();
    proc.write({ stat: '9000005 (no close paren S 1 2 3\n' }, 9000005);
    expect(readPidStat(9000005, root)).toBeNull();
    proc.write({ stat: '9000006 (short) S 1 2\n' }, 9000006);
    expect(readPidStat(9000006, root)).toBeNull();
    proc.write({ stat: stat(9000007, 'junk', { 14: 'x1' }) }, 9000007);
    expect(readPidStat(9000007, root)).toBeNull();
    proc.write({ stat: '' }, 9000008);
    expect(readPidStat(9000008, root)).toBeNull();
  });
});

describe('readPidStatusFields (fixtures)', () => {
  it('reads VmRSS, RssAnon, RssFile and Threads', () => {
    proc.write(
      {
        status:
          'Name:\tx\nState:\tS (sleeping)\nVmPeak:\t  3060 kB\nVmRSS:\t    1616 kB\n' +
          'RssAnon:\t     112 kB\nRssFile:\t    1504 kB\nRssShmem:\t       0 kB\nThreads:\t3\nSigQ:\t0/1\n',
      },
      9000010,
    );
    expect(readPidStatusFields(9000010, root)).toEqual({
      vmRssKb: 1616,
      rssAnonKb: 112,
      rssFileKb: 1504,
      threads: 3,
    });
  });

  it('gives nulls for a zombie (no Vm lines) and null when gone', () => {
    proc.write({ status: 'Name:\tz\nState:\tZ (zombie)\nThreads:\t1\n' }, 9000011);
    expect(readPidStatusFields(9000011, root)).toEqual({
      vmRssKb: null,
      rssAnonKb: null,
      rssFileKb: null,
      threads: 1,
    });
    expect(readPidStatusFields(9000098, root)).toBeNull();
  });
});

describe('live /proc', () => {
  it('readPidStat(process.pid) is sane', () => {
    const st = readPidStat(process.pid);
    expect(st).not.toBeNull();
    expect(st!.pid).toBe(process.pid);
    expect(st!.comm.length).toBeGreaterThan(0);
    expect(st!.comm.length).toBeLessThanOrEqual(15);
    expect(st!.state).toMatch(/^[RS]$/);
    expect(st!.ppid).toBe(process.ppid);
    expect(st!.threads).toBeGreaterThanOrEqual(1);
    expect(st!.rssPages * PAGE_SIZE).toBeGreaterThan(10 << 20);
    expect(st!.exitCode).toBeNull(); // read for zombies only
    const uptimeTicks = Number(readProcFile('/proc/uptime')!.split(' ')[0]) * CLOCK_TICKS;
    expect(st!.startTimeTicks).toBeGreaterThan(0);
    expect(st!.startTimeTicks).toBeLessThanOrEqual(uptimeTicks + 1);
    const cpuTicks = st!.utimeTicks + st!.stimeTicks;
    const cpu = process.cpuUsage();
    expect(Math.abs(cpuTicks / CLOCK_TICKS - (cpu.user + cpu.system) / 1e6)).toBeLessThan(0.5);
  });

  it('readPidStatusFields(process.pid) agrees with process.memoryUsage', () => {
    const s = readPidStatusFields(process.pid);
    expect(s).not.toBeNull();
    const rss = process.memoryUsage().rss / 1024;
    expect(Math.abs(s!.vmRssKb! - rss) / rss).toBeLessThan(0.2);
    expect(s!.rssAnonKb! + s!.rssFileKb!).toBeLessThanOrEqual(s!.vmRssKb!);
    expect(s!.threads).toBeGreaterThanOrEqual(1);
  });

  it('returns null for a pid that does not exist', () => {
    expect(readPidStat(4_194_305)).toBeNull();
    expect(readPidStatusFields(4_194_305)).toBeNull();
  });
});

describe('ProcFile: a /proc file kept open and read again', () => {
  const openFds = () => readdirSync('/proc/self/fd').length;

  it('sees the content as it is at each read, from one descriptor', () => {
    const before = openFds();
    const file = new ProcFile(`/proc/${process.pid}/stat`);
    const first = pidStatOf(file)!;
    expect(openFds()).toBe(before + 1);
    // CPU time moves: a later read shows it, as a fresh open would.
    const until = process.cpuUsage().user + 30_000;
    while (process.cpuUsage().user < until);
    const later = pidStatOf(file)!;
    expect(later.utimeTicks + later.stimeTicks).toBeGreaterThan(first.utimeTicks + first.stimeTicks);
    expect(later.startTimeTicks).toBe(first.startTimeTicks);
    expect(openFds()).toBe(before + 1);
    file.close();
    expect(openFds()).toBe(before);
  });

  it('reads a file whole, however long, as readProcInto does', () => {
    const p = join(root, 'long');
    const text = 'abcdefghij'.repeat(7000);
    writeFileSync(p, text);
    const file = new ProcFile(p);
    for (let i = 0; i < 2; i++) {
      const n = file.read();
      expect(procBuffer().toString('utf8', 0, n)).toBe(text);
    }
    file.close();
  });

  it("returns -1 once the file's process is gone, closing its descriptor; a missing file likewise", async () => {
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 30000)'], { stdio: 'ignore' });
    const file = new ProcFile(`/proc/${child.pid}/stat`);
    expect(pidStatOf(file)!.pid).toBe(child.pid);
    const before = openFds();
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited; // reaped by Node: the pid names no process now
    expect(pidStatOf(file)).toBeNull();
    expect(openFds()).toBe(before - 1);
    expect(new ProcFile(join(root, 'nope')).read()).toBe(-1);
  });
});
