// sock_diag answers checked against sockets opened in a network namespace of the test's own
// (so that the machine's other sockets cannot interfere): the fixture scripts run under
// `unshare --net`, bring up lo, open known sockets and print the addon's answers next to what
// the real /proc/net/tcp reader (net-tcp.ts, bundled here with esbuild) says in the same place.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childReaper } from '../../test/support/children.js';

import type { SocketCensus, TcpListener } from '../src/diag.js';
import { TCP_STATE_NAMES, TcpState, type TcpSocketEntry } from '../src/proc/net-tcp.js';

const ADDON = fileURLToPath(new URL('../native/build/Release/vsockdiag.node', import.meta.url));
const NET_TCP_SRC = fileURLToPath(new URL('../src/proc/net-tcp.ts', import.meta.url));
const FIXTURE_NS = fileURLToPath(new URL('./fixtures/diag-ns.mjs', import.meta.url));
const FIXTURE_LOAD = fileURLToPath(new URL('./fixtures/diag-load.mjs', import.meta.url));

/** Why namespace tests cannot run here, or null when they can. */
function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'not root';
  const r = spawnSync('unshare', ['--net', 'true'], { encoding: 'utf8', timeout: 10_000 });
  if (r.error) return `unshare --net true: ${r.error.message}`;
  if (r.status !== 0) return `unshare --net true exited with ${r.status}: ${r.stderr.trim()}`;
  const ip = spawnSync('unshare', ['--net', 'ip', 'link', 'set', 'lo', 'up'], { encoding: 'utf8', timeout: 10_000 });
  if (ip.status !== 0) return `ip link set lo up: ${ip.error?.message ?? ip.stderr.trim()}`;
  return null;
}
const skipReason = netnsUnavailable();
if (skipReason) console.warn(`diag-netns tests skipped: ${skipReason}`);

const children = childReaper();

/** Runs a fixture in a new network namespace with lo up; resolves with its JSON line. */
function runInNetns<T>(script: string, args: string[], timeoutMs: number): Promise<T> {
  // unshare without --fork execs: sh, then node, keep the pid we kill in afterEach.
  const wrapper = 'ulimit -n 40000 2>/dev/null || ulimit -n "$(ulimit -Hn)"; ip link set lo up && exec "$0" "$@"';
  const child = spawn('unshare', ['--net', '--', 'sh', '-c', wrapper, process.execPath, script, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.track(child);
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => reject(new Error(`${path.basename(script)} timed out; stderr: ${stderr}`)), timeoutMs);
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) {
        reject(new Error(`${path.basename(script)} exited with ${code ?? signal}; stderr: ${stderr}`));
        return;
      }
      try {
        resolve(JSON.parse(stdout) as T);
      } catch (err) {
        reject(new Error(`bad fixture output (${(err as Error).message}): ${stdout.slice(0, 500)} ${stderr}`));
      }
    });
  });
}

/** Network-order bytes of an address as the addon prints them (IPv4 dotted, RFC 5952 IPv6). */
function addrBytes(address: string): number[] {
  if (!address.includes(':')) return address.split('.').map(Number);
  let text = address;
  let tail4: number[] = [];
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    tail4 = dotted[2]!.split('.').map(Number);
    text = dotted[1]!.endsWith('::') ? dotted[1]! : dotted[1]!.slice(0, -1);
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const groups = (s: string | undefined) =>
    s
      ? s
          .split(':')
          .filter((g) => g !== '')
          .map((g) => parseInt(g, 16))
      : [];
  const h = groups(head);
  const t = groups(rest);
  const total = 8 - tail4.length / 2;
  const all = rest === undefined ? h : [...h, ...new Array<number>(total - h.length - t.length).fill(0), ...t];
  return [...all.flatMap((g) => [g >> 8, g & 0xff]), ...tail4];
}

type RemoteRow = { address: string; port: number; count: number };

/** The addon's ranking: count desc, then family (IPv4 first), address bytes, port. */
function rank(a: RemoteRow, b: RemoteRow): number {
  if (a.count !== b.count) return b.count - a.count;
  const fa = a.address.includes(':') ? 6 : 4;
  const fb = b.address.includes(':') ? 6 : 4;
  if (fa !== fb) return fa - fb;
  const ba = addrBytes(a.address);
  const bb = addrBytes(b.address);
  for (let i = 0; i < ba.length; i++) if (ba[i] !== bb[i]) return ba[i]! - bb[i]!;
  return a.port - b.port;
}

/** What a census of `entries` must say, computed from /proc lines. */
function censusOf(entries: TcpSocketEntry[]): { total: number; byState: Record<string, number>; remotes: RemoteRow[] } {
  const byState: Record<string, number> = {};
  for (const name of TCP_STATE_NAMES.values()) byState[name] = 0;
  const remotes = new Map<string, RemoteRow>();
  for (const e of entries) {
    byState[TCP_STATE_NAMES.get(e.state)!]!++;
    if (e.state === TcpState.LISTEN) continue;
    const key = `${e.remoteAddress}|${e.remotePort}`;
    const row = remotes.get(key) ?? { address: e.remoteAddress, port: e.remotePort, count: 0 };
    row.count++;
    remotes.set(key, row);
  }
  return { total: entries.length, byState, remotes: [...remotes.values()].sort(rank) };
}

type ListenerKey = { family: number; address: string; port: number };
const byKey = (a: ListenerKey, b: ListenerKey) => a.port - b.port || a.family - b.family || a.address.localeCompare(b.address);
const procListeners = (proc: TcpSocketEntry[]) =>
  proc
    .filter((e) => e.state === TcpState.LISTEN)
    .map((e) => ({ family: e.family, address: e.localAddress, port: e.localPort, inode: e.inode, acceptQueue: e.rxQueue }));
const withoutBacklog = (l: TcpListener) => ({
  family: l.family,
  address: l.address,
  port: l.port,
  inode: l.inode,
  acceptQueue: l.acceptQueue,
});

let bundleDir = '';
let netTcpBundle = '';
beforeAll(async () => {
  if (skipReason) return;
  expect(existsSync(ADDON), `${ADDON} (build the addon first)`).toBe(true);
  bundleDir = mkdtempSync(path.join(tmpdir(), 'diag-netns-'));
  netTcpBundle = path.join(bundleDir, 'net-tcp.mjs');
  await build({ entryPoints: [NET_TCP_SRC], outfile: netTcpBundle, bundle: true, platform: 'node', format: 'esm', logLevel: 'warning' });
});
afterAll(() => {
  if (bundleDir) rmSync(bundleDir, { recursive: true, force: true });
});

interface NsOutput {
  n: { N_8080: number; N_8081: number; N_V6: number; N_MAPPED: number; N_QUEUED: number; N_TW: number };
  known: {
    listeners: { name: string; host: string; port: number; inode: number }[];
    connections: {
      port: number;
      client: { address: string; port: number };
      server: { address: string; port: number };
      accepted: boolean;
    }[];
    mappedPeers: { address: string; port: number }[];
    twPorts: number[];
  };
  diag: {
    available: boolean;
    listeners: TcpListener[];
    listenersPort: Record<string, TcpListener[]>;
    census: SocketCensus;
    censusTop100: SocketCensus;
    census8080: SocketCensus;
    censusLoopback4: SocketCensus;
    censusMappedText: SocketCensus;
    censusV6: SocketCensus;
    censusTimeWait: SocketCensus;
    censusListen: SocketCensus;
    censusNone: SocketCensus;
    censusSmallTable: SocketCensus;
    censusTop0: SocketCensus;
  };
  proc: TcpSocketEntry[];
}

describe.skipIf(skipReason !== null)('sock_diag in a private network namespace', () => {
  let out: NsOutput;
  beforeAll(async () => {
    out = await runInNetns<NsOutput>(FIXTURE_NS, [ADDON, netTcpBundle], 60_000);
  }, 90_000);

  it('is available as root', () => {
    expect(out.diag.available).toBe(true);
  });

  it('lists exactly the listeners that /proc/net/tcp{,6} shows, with the inodes of our fds', () => {
    const { diag, known, proc, n } = out;
    expect(diag.listeners.map(withoutBacklog).sort(byKey)).toEqual(procListeners(proc).sort(byKey));
    const expected = known.listeners.map((l) => ({
      family: l.host.includes(':') ? 6 : 4,
      address: l.host,
      port: l.port,
      inode: l.inode,
      acceptQueue: l.name === 'queued' ? n.N_QUEUED : 0,
      backlog: l.name === 'queued' ? 3 : 511, // Node's default backlog (under somaxconn 4096)
    }));
    expect([...diag.listeners].sort(byKey)).toEqual(expected.sort(byKey));
    expect(diag.listeners.some((l) => l.family === 6 && l.address === '::1')).toBe(true);
    expect(diag.listeners.some((l) => l.family === 6 && l.address === '::ffff:127.0.0.1')).toBe(true);
  });

  it('filters by port; the never-accepting listener shows its full accept queue', () => {
    const { diag, known } = out;
    const inode = (name: string) => known.listeners.find((l) => l.name === name)!.inode;
    expect(diag.listenersPort['7004']).toEqual([
      { family: 4, address: '127.0.0.1', port: 7004, inode: inode('queued'), acceptQueue: 3, backlog: 3 },
    ]);
    expect(diag.listenersPort['7001']).toEqual([
      { family: 4, address: '127.0.0.1', port: 7001, inode: inode('v4'), acceptQueue: 0, backlog: 511 },
    ]);
    expect(diag.listenersPort['7002']).toEqual([
      { family: 6, address: '::1', port: 7002, inode: inode('v6'), acceptQueue: 0, backlog: 511 },
    ]);
    expect(diag.listenersPort['7005']).toEqual([
      { family: 6, address: '::ffff:127.0.0.1', port: 7005, inode: inode('mapped'), acceptQueue: 0, backlog: 511 },
    ]);
    expect(diag.listenersPort['9']).toEqual([]);
  });

  it('counts every socket by state, as /proc does and as the script opened them', () => {
    const { diag, proc, n, known } = out;
    const want = censusOf(proc);
    expect(diag.census.total).toBe(want.total);
    expect(diag.census.byState).toEqual(want.byState);
    const established = 2 * (n.N_8080 + n.N_8081 + n.N_V6 + n.N_MAPPED + n.N_QUEUED);
    expect(diag.census.byState.ESTABLISHED).toBe(established);
    expect(diag.census.byState.TIME_WAIT).toBe(n.N_TW);
    expect(diag.census.byState.LISTEN).toBe(known.listeners.length);
    expect(diag.census.total).toBe(established + n.N_TW + known.listeners.length);
    // The TIME_WAIT sockets are the client ends that closed first.
    const tw = proc.filter((e) => e.state === TcpState.TIME_WAIT);
    expect(tw.map((e) => e.localPort).sort()).toEqual([...known.twPorts].sort());
    expect(tw.every((e) => e.inode === 0 && e.remotePort === 8082)).toBe(true);
  });

  it('ranks remotes: all of them with top 100, the first 10 by default', () => {
    const { diag, proc, n } = out;
    const want = censusOf(proc).remotes;
    expect(diag.censusTop100.remotesDistinct).toBe(want.length);
    expect(diag.censusTop100.otherRemotes).toBe(0);
    expect(diag.censusTop100.byRemote).toEqual(want.slice(0, 100));
    expect(diag.census.byRemote).toEqual(want.slice(0, 10));
    expect(diag.census.byRemote.slice(0, 6)).toEqual([
      { address: '127.0.0.1', port: 8080, count: n.N_8080 },
      { address: '127.0.0.1', port: 8081, count: n.N_8081 },
      { address: '127.0.0.1', port: 8082, count: n.N_TW },
      { address: '127.0.0.1', port: 7004, count: n.N_QUEUED }, // IPv4 ranks before ::1 at equal counts
      { address: '::1', port: 7002, count: n.N_V6 },
      { address: '127.0.0.1', port: 7005, count: n.N_MAPPED },
    ]);
    // Server ends of the connections to the AF_INET6 listener on ::ffff:127.0.0.1.
    for (const p of out.known.mappedPeers) {
      expect(p.address).toBe('::ffff:127.0.0.1');
      expect(diag.censusTop100.byRemote).toContainEqual({ address: p.address, port: p.port, count: 1 });
    }
    expect(diag.censusTop0.byRemote).toEqual([]);
    expect(diag.censusTop0.remotesDistinct).toBe(want.length);
  });

  it('filters by remote address and port', () => {
    const { diag, proc, n } = out;
    expect(diag.census8080.total).toBe(n.N_8080);
    expect(diag.census8080.byState.ESTABLISHED).toBe(n.N_8080);
    expect(diag.census8080.byRemote).toEqual([{ address: '127.0.0.1', port: 8080, count: n.N_8080 }]);

    // An IPv4 address also matches IPv4-mapped peers of AF_INET6 sockets; '::ffff:127.0.0.1' is the same filter.
    const loop4 = censusOf(proc.filter((e) => e.remoteAddress === '127.0.0.1' || e.remoteAddress === '::ffff:127.0.0.1'));
    expect(diag.censusLoopback4.total).toBe(loop4.total);
    expect(diag.censusLoopback4.byState).toEqual(loop4.byState);
    expect(diag.censusLoopback4.byRemote).toEqual(loop4.remotes.slice(0, 100));
    expect(diag.censusMappedText).toEqual(diag.censusLoopback4);

    const v6 = censusOf(proc.filter((e) => e.remoteAddress === '::1'));
    expect(v6.total).toBe(2 * n.N_V6);
    expect(diag.censusV6.total).toBe(v6.total);
    expect(diag.censusV6.byRemote).toEqual(v6.remotes);
  });

  it('filters by state mask', () => {
    const { diag, n, known } = out;
    expect(diag.censusTimeWait.total).toBe(n.N_TW);
    expect(diag.censusTimeWait.byState.TIME_WAIT).toBe(n.N_TW);
    expect(diag.censusTimeWait.byRemote).toEqual([{ address: '127.0.0.1', port: 8082, count: n.N_TW }]);
    expect(diag.censusListen.total).toBe(known.listeners.length);
    expect(diag.censusListen.byRemote).toEqual([]);
    expect(diag.censusListen.remotesDistinct).toBe(0);
    expect(diag.censusNone.total).toBe(0);
  });

  it('bounds the remote table: the rest is counted in otherRemotes', () => {
    const { diag, known } = out;
    const s = diag.censusSmallTable;
    expect(s.remotesDistinct).toBe(3);
    expect(s.byRemote).toHaveLength(3);
    const withRemote = s.total - known.listeners.length;
    expect(s.byRemote.reduce((sum, r) => sum + r.count, 0) + s.otherRemotes).toBe(withRemote);
  });
});

interface LoadOutput {
  n: { N_A: number; N_B: number; PORT_A: number; PORT_B: number };
  setupMs: number;
  nofile: string;
  listeners: TcpListener[];
  procListeners: Omit<TcpListener, 'backlog'>[];
  census: SocketCensus;
  censusRemoteA: SocketCensus;
  censusSmallTable: SocketCensus;
  clientPorts: Record<string, number[]>;
  procTotal: number;
  procByState: Record<string, number>;
  timings: {
    name: string;
    iters: number;
    medianMs: number;
    meanMs: number;
    minMs: number;
    userMsPerCall: number;
    systemMsPerCall: number;
  }[];
}

describe.skipIf(skipReason !== null)('sock_diag with 10,000 sockets', () => {
  it('counts them exactly and reports the cost per call', async () => {
    const out = await runInNetns<LoadOutput>(FIXTURE_LOAD, [ADDON, netTcpBundle, '4000', '1000'], 120_000);
    const { n, census } = out;
    const sockets = 2 * (n.N_A + n.N_B);
    expect(sockets).toBe(10_000);

    expect(out.listeners.map(withoutBacklog).sort(byKey)).toEqual([...out.procListeners].sort(byKey));
    expect(out.listeners.map((l) => l.port).sort()).toEqual([n.PORT_A, n.PORT_B]);

    expect(census.total).toBe(sockets + 2);
    expect(census.total).toBe(out.procTotal);
    expect(census.byState.ESTABLISHED).toBe(sockets);
    expect(census.byState.LISTEN).toBe(2);
    expect(out.procByState).toEqual({ [TcpState.ESTABLISHED]: sockets, [TcpState.LISTEN]: 2 });
    // Client ends count toward their server; each server end toward its client's port (a client
    // port may be in use towards both servers, so some of those count 2).
    const clientPortCounts = new Map<number, number>();
    for (const p of [...out.clientPorts[n.PORT_A]!, ...out.clientPorts[n.PORT_B]!]) {
      clientPortCounts.set(p, (clientPortCounts.get(p) ?? 0) + 1);
    }
    expect(census.remotesDistinct).toBe(2 + clientPortCounts.size);
    expect(census.otherRemotes).toBe(0);
    expect(census.byRemote[0]).toEqual({ address: '127.0.0.1', port: n.PORT_A, count: n.N_A });
    expect(census.byRemote[1]).toEqual({ address: '127.0.0.1', port: n.PORT_B, count: n.N_B });
    for (const r of census.byRemote.slice(2)) expect(r.count).toBe(clientPortCounts.get(r.port));
    expect(census.byRemote).toHaveLength(10);

    expect(out.censusRemoteA.total).toBe(n.N_A);
    expect(out.censusRemoteA.byRemote).toEqual([{ address: '127.0.0.1', port: n.PORT_A, count: n.N_A }]);

    const small = out.censusSmallTable;
    expect(small.remotesDistinct).toBe(50);
    expect(small.byRemote.reduce((s, r) => s + r.count, 0) + small.otherRemotes).toBe(sockets);

    console.log(
      `sock_diag with ${sockets} sockets (+2 listeners) in a private netns; setup ${out.setupMs} ms; ${out.nofile.replace(/\s+/g, ' ')}\n` +
        out.timings
          .map(
            (t) =>
              `  ${t.name.padEnd(56)} median ${t.medianMs.toFixed(3)} ms  mean ${t.meanMs.toFixed(3)}  min ${t.minMs.toFixed(3)}` +
              `  cpu user ${t.userMsPerCall.toFixed(3)} + sys ${t.systemMsPerCall.toFixed(3)} ms/call  (${t.iters} calls)`,
          )
          .join('\n'),
    );
  }, 150_000);
});
