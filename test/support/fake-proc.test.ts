import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeProcTree, fakeProcTree, statLine } from './fake-proc.js';

let parent: string;
beforeAll(() => {
  parent = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-fake-proc-'));
});
afterAll(() => {
  fs.rmSync(parent, { recursive: true, force: true });
});

describe('statLine', () => {
  it('writes pid, (comm) and fields 3..52, state S and 0 unless set', () => {
    const line = statLine(7, 'a) b', { 22: 1234 });
    expect(line.endsWith('\n')).toBe(true);
    const fields = line
      .slice(line.lastIndexOf(')') + 2)
      .trimEnd()
      .split(' ');
    expect(line.startsWith('7 (a) b) ')).toBe(true);
    expect(fields).toHaveLength(50); // fields 3 to 52
    expect(fields[0]).toBe('S');
    expect(fields[22 - 3]).toBe('1234');
    expect(fields.filter((f) => f === '0')).toHaveLength(48);
  });

  it('stops at count and fills unset fields as told', () => {
    const fields = statLine(1, 'x', { 3: 'Z' }, { count: 44, fill: (f) => f * 3 })
      .trimEnd()
      .split(' ')
      .slice(2);
    expect(fields).toHaveLength(42);
    expect(fields[0]).toBe('Z');
    expect(fields[44 - 3]).toBe(String(44 * 3));
  });
});

describe('FakeProcTree', () => {
  it('writes a process as the kernel shows it: comm, NUL-terminated cmdline, stat, fd links', () => {
    const proc = fakeProcTree(parent).process(42, {
      comm: 'envd',
      cmdline: ['/usr/bin/envd', '-port', '1'],
      stat: { 20: 3 },
      fds: ['socket:[9]', '/dev/null'],
    });
    const dir = path.join(proc.root, '42');
    expect(fs.readFileSync(path.join(dir, 'comm'), 'utf8')).toBe('envd\n');
    expect(fs.readFileSync(path.join(dir, 'cmdline'), 'utf8')).toBe(['/usr/bin/envd', '-port', '1', ''].join('\0'));
    expect(fs.readFileSync(path.join(dir, 'stat'), 'utf8')).toBe(statLine(42, 'envd', { 20: 3 }));
    expect(fs.readdirSync(path.join(dir, 'fd')).sort()).toEqual(['0', '1']);
    expect(fs.readlinkSync(path.join(dir, 'fd', '0'))).toBe('socket:[9]');

    // Rewriting replaces the descriptors; removing takes the whole folder.
    proc.process(42, { comm: 'envd' });
    expect(fs.readdirSync(path.join(dir, 'fd'))).toEqual([]);
    expect(fs.readFileSync(path.join(dir, 'cmdline'), 'utf8')).toBe('');
    proc.remove(42);
    expect(fs.existsSync(dir)).toBe(false);
  });

  it('writes files under the root or a folder, making folders, leaving out undefined ones', () => {
    const proc = new FakeProcTree(fs.mkdtempSync(path.join(parent, 't-')));
    proc.write({ 'net/sockstat': 'TCP: inuse 1\n', uptime: undefined }).write({ status: 'Threads:\t1\n' }, 7).mkdir('7/task/8');
    expect(fs.readFileSync(path.join(proc.root, 'net/sockstat'), 'utf8')).toBe('TCP: inuse 1\n');
    expect(fs.existsSync(path.join(proc.root, 'uptime'))).toBe(false);
    expect(fs.readFileSync(path.join(proc.root, '7/status'), 'utf8')).toBe('Threads:\t1\n');
    expect(fs.readdirSync(path.join(proc.root, '7/task/8'))).toEqual([]);
  });
});
