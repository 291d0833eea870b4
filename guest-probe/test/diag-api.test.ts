// The sock_diag wrappers in the test's own network namespace: only facts about sockets this
// test opens are asserted (ports the kernel picked for us), plus argument checking and the
// error shape of a failing syscall (in a child that has used up its file descriptors).
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

import { diagAvailable, findListener, listListeners, socketCensus, tcpStateMask } from '../src/diag.js';
import { loadNative } from '../src/native.js';
import { TcpState } from '../src/proc/net-tcp.js';

const ADDON = fileURLToPath(new URL('../native/build/Release/vsockdiag.node', import.meta.url));

let servers: Server[] = [];
let sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets) s.destroy();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  servers = [];
  sockets = [];
});

function listen(host: string, backlog?: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer((s) => {
      sockets.push(s);
    });
    servers.push(server);
    server.once('error', reject);
    server.listen({ host, port: 0, ...(backlog !== undefined ? { backlog } : {}) }, () => resolve(server));
  });
}

function connect(host: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const c = createConnection({ host, port });
    sockets.push(c);
    c.once('connect', () => resolve(c));
    c.once('error', reject);
  });
}

function portOf(server: Server): number {
  const a = server.address();
  if (a === null || typeof a === 'string') throw new Error('not a TCP server');
  return a.port;
}

function inodeOf(server: Server): number {
  const fd = (server as unknown as { _handle: { fd: number } })._handle.fd;
  return Number(/^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`))![1]);
}

describe('sock_diag wrappers', () => {
  it('is available (netlink sock_diag needs no privilege to read)', () => {
    expect(diagAvailable()).toBe(true);
    expect(typeof loadNative().diagAvailable).toBe('function');
  });

  it('finds our IPv4 and IPv6 listeners by port, with inode and backlog', async () => {
    const v4 = await listen('127.0.0.1', 7);
    const v6 = await listen('::1');
    expect(listListeners(portOf(v4))).toEqual([
      { family: 4, address: '127.0.0.1', port: portOf(v4), inode: inodeOf(v4), acceptQueue: 0, backlog: 7 },
    ]);
    const six = listListeners(portOf(v6));
    expect(six).toEqual([{ family: 6, address: '::1', port: portOf(v6), inode: inodeOf(v6), acceptQueue: 0, backlog: expect.any(Number) }]);
    const all = listListeners();
    expect(all).toContainEqual(listListeners(portOf(v4))[0]);
    expect(all).toContainEqual(six[0]);
    for (const l of all) {
      expect(l.family === 4 || l.family === 6).toBe(true);
      expect(Number.isInteger(l.port) && l.port > 0 && l.port < 65536).toBe(true);
      expect(Number.isInteger(l.inode)).toBe(true);
    }
  });

  it('looks one listener up without a dump: by its address, or any address for a wildcard', async () => {
    const v4 = await listen('127.0.0.1', 7);
    const port = portOf(v4);
    expect(findListener('127.0.0.1', port)).toEqual(listListeners(port)[0]);
    // A connected socket on the port is not the listener; the lookup still finds the listener.
    await connect('127.0.0.1', port);
    expect(findListener('127.0.0.1', port)?.inode).toBe(inodeOf(v4));
    // Bound to 127.0.0.1 only: a connection to another address would not reach it.
    expect(findListener('127.0.0.2', port)).toBeNull();

    // Node's default host is the dual-stack wildcard ::, as Go's ":49983" is.
    const wild = await listen('::');
    const wport = portOf(wild);
    for (const address of ['::', '::1', '0.0.0.0', '127.0.0.1', '::ffff:127.0.0.1']) {
      expect(findListener(address, wport), address).toMatchObject({ family: 6, address: '::', port: wport, inode: inodeOf(wild) });
    }
    await new Promise((r) => wild.close(r));
    expect(findListener('::', wport)).toBeNull();
  });

  it('keeps one netlink socket for its lookups, and each answer is its own', async () => {
    // Our sock_diag sockets (protocol 4 in /proc/net/netlink), by inode.
    const netlinkFds = () => {
      const diag = new Set(
        readFileSync('/proc/net/netlink', 'utf8')
          .split('\n')
          .slice(1)
          .map((l) => l.trim().split(/\s+/))
          .filter((f) => f[1] === '4')
          .map((f) => f[9]),
      );
      return readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return diag.has(/^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`))?.[1]);
        } catch {
          return false; // closed while we looked (readdir's own descriptor)
        }
      }).length;
    };
    const a = await listen('127.0.0.1');
    const b = await listen('127.0.0.1');
    findListener('127.0.0.1', portOf(a));
    expect(netlinkFds()).toBe(1);
    // Alternating ports and answers (found, then gone): a lookup never reads another's answer.
    for (let i = 0; i < 200; i++) {
      expect(findListener('127.0.0.1', portOf(a))?.inode).toBe(inodeOf(a));
      expect(findListener('127.0.0.2', portOf(b))).toBeNull();
      expect(findListener('127.0.0.1', portOf(b))?.inode).toBe(inodeOf(b));
    }
    expect(netlinkFds()).toBe(1);
  });

  it('counts the connections to our server with a remote filter', async () => {
    const server = await listen('127.0.0.1');
    const port = portOf(server);
    for (let i = 0; i < 3; i++) await connect('127.0.0.1', port);
    const c = socketCensus({ remote: { address: '127.0.0.1', port } });
    expect(c.total).toBe(3);
    expect(c.byState.ESTABLISHED).toBe(3);
    expect(c.byRemote).toEqual([{ address: '127.0.0.1', port, count: 3 }]);
    expect(c.remotesDistinct).toBe(1);
    expect(c.otherRemotes).toBe(0);
    expect(Object.keys(c.byState)).toEqual([
      'ESTABLISHED',
      'SYN_SENT',
      'SYN_RECV',
      'FIN_WAIT1',
      'FIN_WAIT2',
      'TIME_WAIT',
      'CLOSE',
      'CLOSE_WAIT',
      'LAST_ACK',
      'LISTEN',
      'CLOSING',
    ]);
    const onlyListen = socketCensus({ states: tcpStateMask(['LISTEN']), remote: { address: '127.0.0.1', port } });
    expect(onlyListen.total).toBe(0);
  });

  it('builds state masks', () => {
    expect(tcpStateMask([TcpState.LISTEN])).toBe(1 << 10);
    expect(tcpStateMask(['ESTABLISHED', 'TIME_WAIT'])).toBe((1 << 1) | (1 << 6));
    expect(() => tcpStateMask([0])).toThrow(RangeError);
  });

  it('rejects bad arguments with TypeError / RangeError', () => {
    const native = loadNative() as unknown as Record<string, (...a: unknown[]) => unknown>;
    const cases: [() => unknown, ErrorConstructor, string][] = [
      [() => native.diagListeners!('80'), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => listListeners(65536), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => listListeners(1.5), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => listListeners(-1), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => native.diagCensus!('x'), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => socketCensus({ top: 101 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => socketCensus({ states: 1 << 13 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => socketCensus({ maxRemotes: 0 }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => socketCensus({ remote: { address: 'localhost' } }), TypeError, 'ERR_INVALID_ARG_VALUE'],
      [() => socketCensus({ remote: { address: '1.2.3.4\u0000' } }), TypeError, 'ERR_INVALID_ARG_VALUE'],
      [() => socketCensus({ remote: { address: '::1', port: 70000 } }), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => native.diagCensus!({ remote: { port: 80 } }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => native.diagCensus!({ remote: '127.0.0.1' }), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => native.diagListener!(80, 80), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => native.diagListener!('::'), TypeError, 'ERR_INVALID_ARG_TYPE'],
      [() => findListener('localhost', 80), TypeError, 'ERR_INVALID_ARG_VALUE'],
      [() => findListener('::1\u0000', 80), TypeError, 'ERR_INVALID_ARG_VALUE'],
      [() => findListener('::1', 0), RangeError, 'ERR_OUT_OF_RANGE'],
      [() => findListener('::1', 65536), RangeError, 'ERR_OUT_OF_RANGE'],
    ];
    for (const [fn, type, code] of cases) {
      let caught: unknown;
      try {
        fn();
      } catch (err) {
        caught = err;
      }
      expect(caught, fn.toString()).toBeInstanceOf(type);
      expect((caught as { code?: string }).code, fn.toString()).toBe(code);
    }
    // undefined / null mean "not given"
    expect(Array.isArray(native.diagListeners!(undefined))).toBe(true);
    expect((native.diagCensus!(null) as { total: number }).total).toBeGreaterThanOrEqual(0);
  });

  it('throws Error{code: errno name} when the netlink socket cannot be opened', () => {
    // A child uses up its descriptors, then asks.
    const script = `
      const fs = require('node:fs');
      const addon = require(${JSON.stringify(ADDON)});
      const fds = [];
      try { for (;;) fds.push(fs.openSync('/dev/null', 'r')); } catch (e) { if (e.code !== 'EMFILE') throw e; }
      let listeners, census, one;
      try { addon.diagListeners(); } catch (e) { listeners = { name: e.constructor.name, code: e.code, message: e.message }; }
      try { addon.diagCensus({}); } catch (e) { census = { code: e.code, message: e.message }; }
      try { addon.diagListener('::', 80); } catch (e) { one = { code: e.code, message: e.message }; }
      const available = addon.diagAvailable();
      for (const fd of fds) fs.closeSync(fd);
      // The lookup that could not open its socket opens one on the next call.
      let oneAfter = 'answered';
      try { addon.diagListener('::', 80); } catch (e) { oneAfter = e.code; }
      console.log(JSON.stringify({ listeners, census, one, available, after: addon.diagAvailable(), oneAfter }));
    `;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(out).toEqual({
      listeners: {
        name: 'Error',
        code: 'EMFILE',
        message: 'sock_diag: socket(AF_NETLINK, NETLINK_SOCK_DIAG): Too many open files',
      },
      census: { code: 'EMFILE', message: 'sock_diag: socket(AF_NETLINK, NETLINK_SOCK_DIAG): Too many open files' },
      one: { code: 'EMFILE', message: 'sock_diag: socket(AF_NETLINK, NETLINK_SOCK_DIAG): Too many open files' },
      available: false,
      after: true,
      oneAfter: 'answered',
    });
  });
});
