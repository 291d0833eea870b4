import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, totalmem, tmpdir, uptime } from 'node:os';
import { join } from 'node:path';
import { fakeProcTree } from '../../test/support/fake-proc.js';
import { readBootId, readLoadAvg, readMemInfo, readSockstat, readUptimeMs, sockstatFiles } from '../src/proc/system.js';
import * as proc from '../src/proc/index.js';

let root: string;

const tree = (files: Record<string, string>) => fakeProcTree(root, files).root;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'proc-sys-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

const SOCKSTAT =
  'sockets: used 130\nTCP: inuse 12 orphan 3 tw 40 alloc 20 mem 5\nUDP: inuse 1 mem 0\nUDPLITE: inuse 0\nRAW: inuse 0\nFRAG: inuse 0 memory 0\n';
const SOCKSTAT6 = 'TCP6: inuse 7\nUDP6: inuse 1\nUDPLITE6: inuse 0\nRAW6: inuse 0\nFRAG6: inuse 0 memory 0\n';

describe('fixtures', () => {
  it('reads boot id, uptime, load and meminfo', () => {
    const dir = tree({
      'sys/kernel/random/boot_id': '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n',
      uptime: '12345.67 23456.78\n',
      loadavg: '0.25 1.50 10.07 2/345 6789\n',
      meminfo: 'MemTotal:        2031616 kB\nMemFree:          100000 kB\nMemAvailable:    1500000 kB\nBuffers: 1 kB\n',
    });
    expect(readBootId(dir)).toBe('0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0');
    expect(readUptimeMs(dir)).toBe(12_345_670);
    expect(readLoadAvg(dir)).toEqual([0.25, 1.5, 10.07]);
    expect(readMemInfo(dir)).toEqual({ totalKb: 2031616, availableKb: 1500000 });
  });

  it('handles odd uptime precision', () => {
    expect(readUptimeMs(tree({ uptime: '5 1\n' }))).toBe(5000);
    expect(readUptimeMs(tree({ uptime: '5.1234 1\n' }))).toBe(5123);
    expect(readUptimeMs(tree({ uptime: '5. 1\n' }))).toBeNull();
    expect(readUptimeMs(tree({ uptime: 'x\n' }))).toBeNull();
  });

  it('returns null when files are missing or incomplete', () => {
    const empty = tree({});
    expect(readBootId(empty)).toBeNull();
    expect(readUptimeMs(empty)).toBeNull();
    expect(readLoadAvg(empty)).toBeNull();
    expect(readMemInfo(empty)).toBeNull();
    expect(readSockstat(sockstatFiles(empty))).toBeNull();
    expect(readMemInfo(tree({ meminfo: 'MemTotal: 10 kB\n' }))).toBeNull(); // pre-3.14 kernel
    expect(readLoadAvg(tree({ loadavg: '0.1 0.2\n' }))).toBeNull();
    expect(readSockstat(sockstatFiles(tree({ 'net/sockstat': 'sockets: used 1\nTCP: inuse 1 orphan 0\n' })))).toBeNull();
  });

  it('reads sockstat and adds TCP6 inuse', () => {
    expect(readSockstat(sockstatFiles(tree({ 'net/sockstat': SOCKSTAT, 'net/sockstat6': SOCKSTAT6 })))).toEqual({
      tcpInUse: 19,
      tcpOrphan: 3,
      tcpTimeWait: 40,
      tcpAlloc: 20,
    });
    // No sockstat6 (IPv6 disabled): IPv4 only.
    expect(readSockstat(sockstatFiles(tree({ 'net/sockstat': SOCKSTAT })))).toEqual({
      tcpInUse: 12,
      tcpOrphan: 3,
      tcpTimeWait: 40,
      tcpAlloc: 20,
    });
  });
});

describe('live /proc', () => {
  it('agrees with node:os and the kernel', () => {
    const boot = readBootId();
    expect(boot).toBe(readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
    expect(boot).toMatch(/^[0-9a-f-]{36}$/);
    expect(Math.abs(readUptimeMs()! / 1000 - uptime())).toBeLessThan(2);
    const la = readLoadAvg()!;
    expect(la).toHaveLength(3);
    la.forEach((v, k) => expect(Math.abs(v - loadavg()[k]!)).toBeLessThan(0.5));
    const mem = readMemInfo()!;
    expect(mem.totalKb * 1024).toBe(totalmem());
    expect(mem.availableKb).toBeGreaterThan(0);
    expect(mem.availableKb).toBeLessThanOrEqual(mem.totalKb);
    const ss = readSockstat(sockstatFiles())!;
    expect(ss.tcpInUse).toBeGreaterThanOrEqual(0);
    expect(ss.tcpAlloc).toBeGreaterThanOrEqual(0);
  });

  it('index re-exports the API', () => {
    for (const name of [
      'readProcFile',
      'readPidStat',
      'readPidStatusFields',
      'countFds',
      'findSocketOwner',
      'listPids',
      'findProcessByName',
      'readPidFile',
      'readTcpSockets',
      'readBootId',
      'readUptimeMs',
      'readLoadAvg',
      'readMemInfo',
      'readSockstat',
      'sockstatFiles',
    ] as const) {
      expect(typeof proc[name]).toBe('function');
    }
    expect(proc.CLOCK_TICKS).toBe(100);
    expect(proc.PAGE_SIZE).toBe(4096);
    expect(proc.TCP_STATE_NAMES.get(10)).toBe('LISTEN');
  });
});
