import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fakeProcTree } from '../../test/support/fake-proc.js';
import { readTcpSockets, TCP_STATE_NAMES, TcpState } from '../src/proc/net-tcp.js';
import { findSocketOwner } from '../src/proc/fds.js';

const HEADER4 = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n';
const HEADER6 =
  '  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n';

/** Encodes 4 or 16 network-order bytes the way the kernel prints them on a little-endian host. */
function procAddr(bytes: number[]): string {
  let s = '';
  for (let w = 0; w < bytes.length; w += 4) {
    const v = ((bytes[w + 3]! << 24) | (bytes[w + 2]! << 16) | (bytes[w + 1]! << 8) | bytes[w]!) >>> 0;
    s += v.toString(16).toUpperCase().padStart(8, '0');
  }
  return s;
}

function v6bytes(groups: number[]): number[] {
  return groups.flatMap((g) => [g >> 8, g & 0xff]);
}

function line(
  sl: number,
  local: string,
  lport: number,
  remote: string,
  rport: number,
  st: number,
  o: { tx?: number; rx?: number; uid?: number; inode?: number } = {},
): string {
  const hex = (v: number, n: number) => v.toString(16).toUpperCase().padStart(n, '0');
  return (
    `${String(sl).padStart(4)}: ${local}:${hex(lport, 4)} ${remote}:${hex(rport, 4)} ${hex(st, 2)} ` +
    `${hex(o.tx ?? 0, 8)}:${hex(o.rx ?? 0, 8)} 00:00000000 00000000 ${String(o.uid ?? 0).padStart(5)} ` +
    `       0 ${o.inode ?? 0} 1 0000000000000000 100 0 0 10 0\n`
  );
}

let root: string;

/** A fake /proc with net/tcp and net/tcp6, each left out when null. */
function writeNet(tcp: string | null, tcp6: string | null): string {
  const proc = fakeProcTree(root).mkdir('net');
  if (tcp !== null) proc.write({ 'net/tcp': tcp });
  if (tcp6 !== null) proc.write({ 'net/tcp6': tcp6 });
  return proc.root;
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'proc-tcp-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe('TCP state names', () => {
  it('maps the kernel numbers', () => {
    expect(TCP_STATE_NAMES.get(1)).toBe('ESTABLISHED');
    expect(TCP_STATE_NAMES.get(6)).toBe('TIME_WAIT');
    expect(TCP_STATE_NAMES.get(10)).toBe('LISTEN');
    expect(TCP_STATE_NAMES.get(11)).toBe('CLOSING');
    expect(TCP_STATE_NAMES.size).toBe(11);
    expect(TcpState.LISTEN).toBe(10);
  });
});

describe('readTcpSockets (fixtures)', () => {
  // Lines exactly as printed by a little-endian kernel.
  const tcp =
    HEADER4 +
    '   0: 0100007F:1F90 00000000:0000 0A 00000000:00000003 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0\n' +
    '   1: 0100007F:1F90 0100007F:D431 01 00000010:00000020 02:000AFC2A 00000000  1000        0 12346 4 0000000000000000 20 4 30 10 -1\n' +
    '   2: 0A00A8C0:0016 6400A8C0:E1F2 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000\n';
  const tcp6 =
    HEADER6 +
    '   0: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23456 1 0000000000000000 100 0 0 10 0\n' +
    '   1: 0000000000000000FFFF00000100007F:1F91 0000000000000000FFFF00000100007F:9C40 01 00000000:00000000 00:00000000 00000000   101        0 23457 1 0000000000000000 20 4 0 10 -1\n' +
    '   2: B80D0120000000000000000001000000:01BB 000080FE00000000FF00FC02010000FE:C350 08 00000000:00000000 00:00000000 00000000    33        0 23458 1 0000000000000000 20 4 0 10 -1\n' +
    '   3: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23459 1 0000000000000000 100 0 0 10 0\n';

  it('parses IPv4 and IPv6 entries', () => {
    const dir = writeNet(tcp, tcp6);
    const all = readTcpSockets({}, dir);
    expect(all).toHaveLength(7);
    expect(all[0]).toEqual({
      family: 4,
      localAddress: '127.0.0.1',
      localPort: 8080,
      remoteAddress: '0.0.0.0',
      remotePort: 0,
      state: TcpState.LISTEN,
      txQueue: 0,
      rxQueue: 3,
      inode: 12345,
      uid: 1000,
    });
    expect(all[1]).toMatchObject({ remotePort: 0xd431, state: 1, txQueue: 16, rxQueue: 32, inode: 12346 });
    expect(all[2]).toMatchObject({
      localAddress: '192.168.0.10',
      localPort: 22,
      remoteAddress: '192.168.0.100',
      state: TcpState.TIME_WAIT,
      inode: 0,
    });
    expect(all[3]).toMatchObject({ family: 6, localAddress: '::1', localPort: 53, remoteAddress: '::', inode: 23456 });
    expect(all[4]).toMatchObject({
      family: 6,
      localAddress: '::ffff:127.0.0.1',
      localPort: 8081,
      remoteAddress: '::ffff:127.0.0.1',
      remotePort: 40000,
      uid: 101,
    });
    expect(all[5]).toMatchObject({
      localAddress: '2001:db8::1',
      localPort: 443,
      remoteAddress: 'fe80::2fc:ff:fe00:1',
      remotePort: 50000,
      state: TcpState.CLOSE_WAIT,
    });
    expect(all[6]).toMatchObject({ localAddress: '::', localPort: 22 });
  });

  it('filters by state and local port', () => {
    const dir = writeNet(tcp, tcp6);
    const listen = readTcpSockets({ states: new Set([TcpState.LISTEN]) }, dir);
    expect(listen.map((e) => [e.family, e.localPort])).toEqual([
      [4, 8080],
      [6, 53],
      [6, 22],
    ]);
    expect(readTcpSockets({ localPort: 8080 }, dir).map((e) => e.inode)).toEqual([12345, 12346]);
    expect(readTcpSockets({ localPort: 8080, states: new Set([1]) }, dir).map((e) => e.inode)).toEqual([12346]);
    expect(readTcpSockets({ localPort: 22 }, dir).map((e) => e.family)).toEqual([4, 6]);
    expect(readTcpSockets({ localPort: 9 }, dir)).toEqual([]);
  });

  it('skips malformed lines instead of throwing', () => {
    const good = line(9, procAddr([10, 0, 0, 1]), 80, procAddr([0, 0, 0, 0]), 0, 10, { inode: 777 });
    const bad = [
      '',
      'garbage\n',
      '   5: 0100007F:1F90\n',
      '   5: 0100007:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n', // short address
      '   5: 0100007F:1F9 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n', // short port
      '   5: 0100007G:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n', // non-hex
      '   5: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 xyz 1\n', // inode
      '   5: 0100007F:1F90 00000000:0000 0A 00000000 00:00000000 00000000 0 0 1 1\n', // queues
      '   5: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0\n', // truncated
      '   5: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 12x 1\n',
      'x5: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n',
    ].join('');
    const v6in4 =
      '   5: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n';
    const v4in6 = '   5: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n';
    // A final line without a trailing newline is still parsed.
    const dir = writeNet(HEADER4 + bad + v6in4 + good + good.trimEnd(), HEADER6 + bad + v4in6);
    const all = readTcpSockets({}, dir);
    expect(all.map((e) => [e.localAddress, e.localPort, e.inode])).toEqual([
      ['10.0.0.1', 80, 777],
      ['10.0.0.1', 80, 777],
    ]);
  });

  it('parses a large file (thousands of sockets) and filters LISTEN', () => {
    const lines: string[] = [HEADER4];
    for (let k = 0; k < 12_000; k++) {
      const st = k % 1000 === 0 ? TcpState.LISTEN : k % 3 === 0 ? TcpState.TIME_WAIT : TcpState.ESTABLISHED;
      lines.push(
        line(k, procAddr([10, 0, k >> 8, k & 0xff]), 1000 + (k % 50_000), procAddr([169, 254, 169, 254]), 80, st, { inode: k + 1 }),
      );
    }
    const dir = writeNet(lines.join(''), HEADER6);
    const listen = readTcpSockets({ states: new Set([TcpState.LISTEN]) }, dir);
    expect(listen.map((e) => e.inode)).toEqual(Array.from({ length: 12 }, (_, k) => k * 1000 + 1));
    expect(listen[11]!.localAddress).toBe('10.0.42.248');
    expect(readTcpSockets({}, dir)).toHaveLength(12_000);
  });

  it('treats missing files as empty', () => {
    const only4 = writeNet(HEADER4 + line(0, procAddr([127, 0, 0, 1]), 1, procAddr([0, 0, 0, 0]), 0, 10), null);
    expect(readTcpSockets({}, only4)).toHaveLength(1);
    expect(readTcpSockets({}, join(root, 'nowhere'))).toEqual([]);
  });

  it('formats IPv6 like RFC 5952 / WHATWG URL serialisation', () => {
    // Deterministic pseudo-random groups with many zeros, checked against new URL().hostname.
    let seed = 12345;
    const rnd = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed;
    };
    const addrs: number[][] = [
      [0, 0, 0, 0, 0, 0, 0, 0],
      [0, 0, 0, 0, 0, 0, 0, 1],
      [1, 0, 0, 0, 0, 0, 0, 0],
      [0x2001, 0xdb8, 0, 0, 1, 0, 0, 1], // tie: first run compressed
      [0x2001, 0, 0, 1, 0, 0, 0, 1], // longer second run
      [0x2001, 0xdb8, 0, 1, 1, 1, 1, 1], // single zero group not compressed
      [0, 0, 0, 0, 0, 0, 0x7f00, 1], // IPv4-compatible (not mapped): plain hex
      [0, 0, 0, 0, 0, 0xfffe, 0x7f00, 1],
    ];
    for (let k = 0; k < 300; k++) {
      addrs.push(Array.from({ length: 8 }, () => (rnd() % 3 === 0 ? rnd() & 0xffff : 0)));
    }
    const text = HEADER6 + addrs.map((g, k) => line(k, procAddr(v6bytes(g)), 1, procAddr(v6bytes(g)), 2, 1, { inode: k + 1 })).join('');
    const got = readTcpSockets({}, writeNet(null, text));
    expect(got).toHaveLength(addrs.length);
    got.forEach((e, k) => {
      const g = addrs[k]!;
      const mapped = g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff;
      const want = mapped
        ? `::ffff:${g[6]! >> 8}.${g[6]! & 0xff}.${g[7]! >> 8}.${g[7]! & 0xff}`
        : new URL(`http://[${g.map((x) => x.toString(16)).join(':')}]/`).hostname.slice(1, -1);
      expect(e.localAddress, g.join(',')).toBe(want);
      expect(e.remoteAddress).toBe(want);
    });
    expect(got[3]!.localAddress).toBe('2001:db8::1:0:0:1');
    expect(got[4]!.localAddress).toBe('2001:0:0:1::1');
    expect(got[5]!.localAddress).toBe('2001:db8:0:1:1:1:1:1');
  });
});

describe('live /proc', () => {
  const servers: Server[] = [];
  const sockets: Socket[] = [];

  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    await Promise.all(servers.splice(0).map((s) => new Promise<void>((r) => s.close(() => r()))));
  });

  async function listen(host: string): Promise<number | null> {
    const server = createServer((c) => sockets.push(c));
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, host, () => resolve());
      });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EADDRNOTAVAIL' || code === 'EAFNOSUPPORT') return null; // no IPv6 here
      throw err;
    }
    servers.push(server);
    const addr = server.address();
    return typeof addr === 'object' && addr !== null ? addr.port : null;
  }

  const LISTEN = new Set([TcpState.LISTEN]);

  it('finds a 127.0.0.1 listener and its owner', async () => {
    const port = (await listen('127.0.0.1'))!;
    const found = readTcpSockets({ states: LISTEN, localPort: port });
    expect(found).toHaveLength(1);
    const e = found[0]!;
    expect(e).toMatchObject({ family: 4, localAddress: '127.0.0.1', localPort: port, remoteAddress: '0.0.0.0', remotePort: 0, rxQueue: 0 });
    expect(e.inode).toBeGreaterThan(0);
    expect(e.uid).toBe(process.getuid!());
    expect(findSocketOwner(e.inode, [process.pid])).toBe(process.pid);
    expect(readTcpSockets({ states: LISTEN }).some((x) => x.inode === e.inode)).toBe(true);
  });

  it('finds a ::1 listener and its owner', async (ctx) => {
    const port = await listen('::1');
    if (port === null) return ctx.skip();
    const found = readTcpSockets({ states: LISTEN, localPort: port });
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ family: 6, localAddress: '::1', localPort: port, remoteAddress: '::' });
    expect(findSocketOwner(found[0]!.inode, [process.pid])).toBe(process.pid);
  });

  it('shows an IPv4-mapped listener as ::ffff:127.0.0.1', async (ctx) => {
    const port = await listen('::ffff:127.0.0.1');
    if (port === null) return ctx.skip();
    const found = readTcpSockets({ states: LISTEN, localPort: port });
    expect(found.map((e) => [e.family, e.localAddress])).toEqual([[6, '::ffff:127.0.0.1']]);
  });

  it('reports the accept-queue length of a listener as rxQueue', async () => {
    const port = (await listen('127.0.0.1'))!;
    // The client runs synchronously, so this process's event loop cannot accept() meanwhile:
    // the two completed connections wait in the listener's accept queue until we look.
    const client = `const net=require('net');let n=0;for(let i=0;i<2;i++)net.connect(${port},'127.0.0.1',()=>{if(++n===2)process.exit(0)});`;
    const r = spawnSync(process.execPath, ['-e', client], { stdio: 'ignore', timeout: 20_000 });
    expect(r.status).toBe(0);
    const found = readTcpSockets({ states: LISTEN, localPort: port });
    expect(found.map((e) => e.rxQueue)).toEqual([2]);
  });

  it('sees both ends of an established loopback connection', async () => {
    const port = (await listen('127.0.0.1'))!;
    const client = createConnection(port, '127.0.0.1');
    sockets.push(client);
    await new Promise<void>((resolve, reject) => {
      client.once('connect', resolve);
      client.once('error', reject);
    });
    const est = readTcpSockets({ states: new Set([TcpState.ESTABLISHED]) });
    const serverSide = est.find((e) => e.localPort === port && e.remotePort === client.localPort);
    const clientSide = est.find((e) => e.localPort === client.localPort && e.remotePort === port);
    expect(serverSide?.remoteAddress).toBe('127.0.0.1');
    expect(clientSide?.remoteAddress).toBe('127.0.0.1');
    expect(findSocketOwner(clientSide!.inode, [process.pid])).toBe(process.pid);
  });
});
