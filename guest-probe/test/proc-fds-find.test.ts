import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, openSync, closeSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeProcTree } from '../../test/support/fake-proc.js';
import { childReaper } from '../../test/support/children.js';
import { countFds, findSocketOwner, listPids } from '../src/proc/fds.js';
import { findProcessByName, readPidFile } from '../src/proc/find.js';
import { readPidStat } from '../src/proc/stat.js';

let root: string;
let work: string;

beforeAll(() => {
  const proc = new FakeProcTree(mkdtempSync(join(tmpdir(), 'proc-find-')));
  root = proc.root;
  work = mkdtempSync(join(tmpdir(), 'proc-find-work-'));
  // Fixture pids are above PID_MAX so they never equal process.pid. Stat field 22 is the
  // start time.
  proc.process(9000001, {
    comm: 'envd',
    cmdline: ['/usr/bin/envd', '--port', '49983'],
    stat: { 22: 500 },
    fds: ['/dev/null', 'socket:[111]'],
  });
  proc.process(9000002, {
    comm: 'envd',
    cmdline: ['/usr/bin/envd'],
    stat: { 22: 300 },
    fds: ['socket:[222]', 'pipe:[5]', 'socket:[2222]'],
  });
  proc.process(9000003, { comm: 'envd', stat: { 22: 100 } }); // kernel thread / zombie: empty cmdline
  proc.process(9000004, { comm: 'envd', cmdline: ['/bin/other', 'x'], stat: { 22: 50 } }); // comm matches, argv0 does not
  proc.process(9000005, { comm: 'a-very-long-nam', cmdline: ['/opt/a-very-long-name-indeed'], stat: { 22: 900 } });
  proc.process(9000006, { comm: 'a-very-long-nam', cmdline: ['/opt/a-very-long-name-other'], stat: { 22: 10 } });
  proc.process(9000007, { comm: 'envdx', cmdline: ['envdx'], stat: { 22: 1 } });
  proc.process(9000008, { comm: 'solo', cmdline: ['renamed: worker process'], stat: { 22: 70 } }); // argv rewritten
  proc.process(9000009, { comm: 'twin', cmdline: ['twin'], stat: { 22: 70 } });
  proc.process(9000010, { comm: 'twin', cmdline: ['./twin'], stat: { 22: 70 } });
  proc.mkdir('self').mkdir('sys').write({ uptime: '1.00 1.00\n' });
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
});

describe('fixtures', () => {
  it('listPids lists numeric directories only, ascending', () => {
    expect(listPids(root)).toEqual([9000001, 9000002, 9000003, 9000004, 9000005, 9000006, 9000007, 9000008, 9000009, 9000010]);
  });

  it('countFds counts fd entries; null when gone', () => {
    expect(countFds(9000001, root)).toBe(2);
    expect(countFds(9000002, root)).toBe(3);
    expect(countFds(9000003, root)).toBe(0);
    expect(countFds(9000099, root)).toBeNull();
  });

  it('findSocketOwner matches socket:[inode] exactly', () => {
    expect(findSocketOwner(222, listPids(root), root)).toBe(9000002);
    expect(findSocketOwner(111, [9000099, 9000002, 9000001], root)).toBe(9000001);
    expect(findSocketOwner(22, listPids(root), root)).toBeNull();
    expect(findSocketOwner(111, [9000002], root)).toBeNull();
  });

  it('findProcessByName prefers comm+argv0 matches, then the oldest; skips empty cmdline', () => {
    // 9000003 (oldest, empty cmdline) is skipped; 9000004 matches comm only; 9000002 is the
    // oldest full match.
    expect(findProcessByName('envd', root)).toBe(9000002);
    expect(findProcessByName('envdx', root)).toBe(9000007);
    expect(findProcessByName('nothing', root)).toBeNull();
    expect(findProcessByName('', root)).toBeNull();
  });

  it('findProcessByName falls back to comm-only matches for names up to 15 bytes', () => {
    expect(findProcessByName('solo', root)).toBe(9000008);
  });

  it('findProcessByName breaks start-time ties by lower pid', () => {
    expect(findProcessByName('twin', root)).toBe(9000009);
  });

  it('findProcessByName requires the argv0 basename for names longer than 15 bytes', () => {
    expect(findProcessByName('a-very-long-name-indeed', root)).toBe(9000005);
    expect(findProcessByName('a-very-long-name-other', root)).toBe(9000006);
    expect(findProcessByName('a-very-long-name-missing', root)).toBeNull();
    expect(findProcessByName('a-very-long-nam', root)).toBe(9000006); // exact 15: comm only, oldest
  });

  it('readPidFile accepts a trimmed positive pid and rejects junk', () => {
    const cases: Array<[string, number | null]> = [
      ['1234\n', 1234],
      ['  77  \n\n', 77],
      ['1', 1],
      ['4194304', 4194304],
      ['4194305', null],
      ['0', null],
      ['-5', null],
      ['+5', null],
      ['12a', null],
      ['12 34', null],
      ['1e3', null],
      ['0x10', null],
      ['', null],
      ['   \n', null],
      ['12345678901234567890', null],
      ['١٢٣', null],
    ];
    cases.forEach(([text, want], k) => {
      const p = join(work, `pid${k}`);
      writeFileSync(p, text);
      expect(readPidFile(p), JSON.stringify(text)).toBe(want);
    });
    expect(readPidFile(join(work, 'missing.pid'))).toBeNull();
  });
});

describe('live /proc', () => {
  const children = childReaper();

  async function start(name: string): Promise<ChildProcess> {
    const bin = join(work, name);
    copyFileSync('/usr/bin/sleep', bin);
    chmodSync(bin, 0o755);
    // Retry ETXTBSY: a just-written executable can be briefly busy if an fd leaked into a fork.
    for (let attempt = 0; ; attempt++) {
      const child = spawn(bin, ['30'], { stdio: 'ignore' });
      const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
        child.once('spawn', () => resolve(null));
        child.once('error', resolve);
      });
      if (err === null) {
        children.track(child);
        return child;
      }
      if (err.code !== 'ETXTBSY' || attempt >= 5) throw err;
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it('finds a spawned fake-target by name', async () => {
    const before = findProcessByName('fake-target');
    const child = await start('fake-target');
    const found = findProcessByName('fake-target');
    if (before === null) expect(found).toBe(child.pid);
    else expect(found).toBe(before); // an older fake-target (another run) exists: oldest wins
    const st = readPidStat(child.pid!);
    expect(st?.comm).toBe('fake-target');
    expect(st?.ppid).toBe(process.pid);
    expect(countFds(child.pid!)).toBeGreaterThanOrEqual(3);
  });

  it('finds a process whose name is longer than 15 bytes via argv0', async () => {
    const name = `fake-target-${randomBytes(4).toString('hex')}`;
    const child = await start(name);
    expect(readPidStat(child.pid!)?.comm).toBe(name.slice(0, 15));
    expect(findProcessByName(name)).toBe(child.pid);
    expect(findProcessByName(`${name}x`)).toBeNull();
  });

  it('returns null after the process is gone', async () => {
    const name = `fake-gone-${randomBytes(3).toString('hex')}`;
    const child = await start(name);
    expect(findProcessByName(name)).toBe(child.pid);
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
    expect(findProcessByName(name)).toBeNull();
    expect(readPidStat(child.pid!)).toBeNull();
    expect(countFds(child.pid!)).toBeNull();
  });

  it('does not find the calling process itself', () => {
    const comm = readPidStat(process.pid)!.comm;
    const found = findProcessByName(comm);
    expect(found).not.toBe(process.pid);
  });

  it('countFds of this process tracks an opened file', () => {
    const n0 = countFds(process.pid)!;
    const fd = openSync('/dev/null', 'r');
    try {
      expect(countFds(process.pid)).toBe(n0 + 1);
    } finally {
      closeSync(fd);
    }
    expect(listPids()).toContain(process.pid);
  });
});
