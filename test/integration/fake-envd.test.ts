// Integration tests for the fake envd fixture (test/fake-envd): start-up phases on
// stderr and NOTIFY_SOCKET, /health, and the hang / crash / listen-first modes.
// Everything talks to 127.0.0.1 only. Every child is killed in afterEach by its pid.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { childReaper, waitUntilAsleep } from '../support/children.js';
import { waitFor } from '../support/wait.js';
import { buildFakeEnvd, FAKE_ENVD_PHASES } from '../harness/fake-envd';

/** The STATUS= / stderr description of each phase, in envd's start-up order. */
const PHASE_DESCRIPTIONS: Record<(typeof FAKE_ENVD_PHASES)[number], string> = {
  'run-dir': 'creating run directory /run/e2b',
  'mmds-poller': 'starting MMDS poller',
  logger: 'creating logger',
  router: 'creating HTTP router',
  'filesystem-rpc': 'mounting filesystem RPC service',
  'cgroup-manager': 'creating cgroup manager',
  'workload-freezer': 'creating workload freezer',
  'process-rpc': 'mounting process RPC service',
  api: 'creating API store',
  'port-scanner': 'starting port scanner',
  'port-forwarder': 'starting port forwarder',
  listen: 'binding HTTP listener',
};

function expectedPhaseLines(port: number): string[] {
  return FAKE_ENVD_PHASES.map((name) => {
    const line = `envd startup: ${PHASE_DESCRIPTIONS[name]}`;
    return name === 'listen' ? `${line} on 127.0.0.1:${port}` : line;
  });
}

// ---------------------------------------------------------------------------
// Child-process bookkeeping

const children = childReaper();
const tempDirs: string[] = [];

function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

afterEach(async () => {
  await children.reap(); // before their folders go
  await Promise.all(tempDirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

// ---------------------------------------------------------------------------
// fake-envd

let binary: string;

interface FakeEnvd {
  child: ChildProcess;
  stderr: () => string;
  /** stderr lines that announce a phase ("envd startup: ..."). */
  phaseLines: () => string[];
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function startFakeEnvd(args: string[], env: NodeJS.ProcessEnv = {}): FakeEnvd {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  if (!('NOTIFY_SOCKET' in env)) delete childEnv.NOTIFY_SOCKET;
  const child = spawn(binary, args, { env: childEnv, stdio: ['ignore', 'ignore', 'pipe'] });
  children.track(child);
  let err = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => {
    err += d;
  });
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  return {
    child,
    exit,
    stderr: () => err,
    phaseLines: () => err.split('\n').filter((l) => l.startsWith('envd startup: ')),
  };
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address() as net.AddressInfo;
  srv.close();
  await once(srv, 'close');
  return port;
}

function httpGet(port: number, urlPath: string, timeoutMs = 2_000): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: urlPath, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${urlPath} timed out after ${timeoutMs}ms`)));
    req.on('error', reject);
  });
}

/** Whether something accepts TCP connections (kernel-level) on 127.0.0.1:port. */
function portBound(port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNREFUSED') resolve(false);
      else reject(e);
    });
  });
}

async function waitReady(fe: FakeEnvd): Promise<void> {
  await waitFor('fake-envd to be ready', () => fe.stderr().includes('fake-envd: ready') || !isRunning(fe.child));
  if (!isRunning(fe.child)) throw new Error(`fake-envd exited early:\n${fe.stderr()}`);
}

// ---------------------------------------------------------------------------
// NOTIFY_SOCKET receiver. Node cannot bind AF_UNIX SOCK_DGRAM, so a python3 child
// binds it and prints each datagram as a JSON line. It exits when its stdin closes.

const NOTIFY_RECEIVER_PY = `
import json, os, socket, sys, threading
name = sys.argv[1]
addr = "\\0" + name[1:] if name.startswith("@") else name
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(addr)
def watch_stdin():
    sys.stdin.buffer.read()
    os._exit(0)
threading.Thread(target=watch_stdin, daemon=True).start()
print(json.dumps({"bound": name}), flush=True)
while True:
    data = s.recv(65536)
    print(json.dumps({"datagram": data.decode("utf-8", "replace")}), flush=True)
`;

interface NotifyReceiver {
  socket: string;
  datagrams: string[];
}

async function startNotifyReceiver(socketName: string): Promise<NotifyReceiver> {
  const child = spawn('python3', ['-c', NOTIFY_RECEIVER_PY, socketName], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.track(child);
  const rx: NotifyReceiver = { socket: socketName, datagrams: [] };
  let bound = false;
  let buf = '';
  let err = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => (err += d));
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (d: string) => {
    buf += d;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const msg = JSON.parse(buf.slice(0, nl)) as { bound?: string; datagram?: string };
      buf = buf.slice(nl + 1);
      if (msg.bound !== undefined) bound = true;
      if (msg.datagram !== undefined) rx.datagrams.push(msg.datagram);
    }
  });
  const spawnError = once(child, 'spawn').then(
    () => undefined,
    (e: Error) => e,
  );
  await waitFor('python3 notify receiver to bind', () => bound || !isRunning(child));
  const e = await spawnError;
  if (e) throw new Error(`cannot start python3 for the NOTIFY_SOCKET receiver: ${e.message}`);
  if (!bound) throw new Error(`python3 notify receiver failed:\n${err}`);
  return rx;
}

async function notifySocketPath(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'vsockdiag-fe-'));
  tempDirs.push(dir);
  return path.join(dir, 'notify.sock');
}

/** Parses "KEY=value\n..." into a map. */
function parseDatagram(d: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of d.split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return out;
}

function expectStartupDatagrams(datagrams: string[], port: number, order: readonly string[] = FAKE_ENVD_PHASES): void {
  const parsed = datagrams.map(parseDatagram);
  const phaseMsgs = parsed.slice(0, -1);
  expect(phaseMsgs.map((m) => m.PHASE)).toEqual(order);
  const lines = expectedPhaseLines(port);
  for (const m of phaseMsgs) {
    const i = FAKE_ENVD_PHASES.indexOf(m.PHASE as (typeof FAKE_ENVD_PHASES)[number]);
    expect(m.STATUS).toBe(lines[i]);
  }
  expect(datagrams.at(-1)).toBe(`READY=1\nSTATUS=envd listening on :${port}\n`);
  expect(datagrams[0]).toMatch(/^PHASE=[a-z-]+\nSTATUS=envd startup: .+\n$/);
}

// ---------------------------------------------------------------------------

describe('fake-envd', () => {
  beforeAll(async () => {
    binary = await buildFakeEnvd();
  });

  it('walks all 12 phases in order, then serves GET /health 204 and 404 elsewhere', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port)]);
    await waitReady(fe);

    expect(fe.phaseLines()).toEqual(expectedPhaseLines(port));
    const health = await httpGet(port, '/health');
    expect(health.status).toBe(204);
    expect(health.body).toBe('');
    expect((await httpGet(port, '/')).status).toBe(404);
    expect((await httpGet(port, '/init')).status).toBe(404);
  });

  it('sends PHASE= datagrams in order and READY=1 last to a path NOTIFY_SOCKET', async () => {
    const rx = await startNotifyReceiver(await notifySocketPath());
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port)], { NOTIFY_SOCKET: rx.socket });
    await waitFor('READY=1 datagram', () => rx.datagrams.some((d) => d.startsWith('READY=1')));
    expect(isRunning(fe.child)).toBe(true);
    expectStartupDatagrams(rx.datagrams, port);
  });

  it('supports an abstract-namespace NOTIFY_SOCKET (@name)', async () => {
    const name = `@vsockdiag-fake-envd-${process.pid}-${Math.random().toString(36).slice(2)}`;
    const rx = await startNotifyReceiver(name);
    const port = await freePort();
    startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port)], { NOTIFY_SOCKET: name });
    await waitFor('READY=1 datagram', () => rx.datagrams.some((d) => d.startsWith('READY=1')));
    expectStartupDatagrams(rx.datagrams, port);
  });

  it('-no-notify sends nothing even when NOTIFY_SOCKET is set', async () => {
    const rx = await startNotifyReceiver(await notifySocketPath());
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-no-notify'], {
      NOTIFY_SOCKET: rx.socket,
    });
    await waitReady(fe);
    await sleep(200);
    expect(rx.datagrams).toEqual([]);
  });

  it('a notify reader that stopped reading does not stall the start-up (one bounded wait, then only what fits)', async () => {
    // Bound, never read: after net.unix.max_dgram_qlen datagrams (often 10) a plain write
    // blocks. 13 datagrams go out in a default start.
    const socket = await notifySocketPath();
    const deaf = spawn(
      'python3',
      [
        '-c',
        'import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1]); print("bound", flush=True); sys.stdin.read()',
        socket,
      ],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
    children.track(deaf);
    await once(deaf.stdout!, 'data');
    const port = await freePort();
    const t0 = Date.now();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port)], { NOTIFY_SOCKET: socket });
    await waitReady(fe);
    // One 2 s wait for the first datagram that did not fit, one for READY=1: not one per phase.
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(fe.phaseLines()).toEqual(expectedPhaseLines(port));
    expect(fe.stderr().match(/NOTIFY_SOCKET/g)).toHaveLength(1);
    expect(fe.stderr()).toMatch(/i\/o timeout \(further notify errors suppressed\)/);
  });

  it('-hang-in cgroup-manager: stderr stops after that phase, port unbound, process alive', async () => {
    const rx = await startNotifyReceiver(await notifySocketPath());
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-hang-in', 'cgroup-manager'], {
      NOTIFY_SOCKET: rx.socket,
    });
    await waitFor('cgroup-manager phase line', () => fe.stderr().includes('envd startup: creating cgroup manager'));
    await sleep(1_000);

    const cgroupIdx = FAKE_ENVD_PHASES.indexOf('cgroup-manager');
    expect(fe.phaseLines()).toEqual(expectedPhaseLines(port).slice(0, cgroupIdx + 1));
    expect(isRunning(fe.child)).toBe(true);
    expect(() => process.kill(fe.child.pid!, 0)).not.toThrow();
    expect(await portBound(port)).toBe(false);
    expect(rx.datagrams.map((d) => parseDatagram(d).PHASE)).toEqual(FAKE_ENVD_PHASES.slice(0, cgroupIdx + 1));
    expect(rx.datagrams.some((d) => d.includes('READY=1'))).toBe(false);
  });

  it('a SIGQUIT goroutine dump of the cgroup-manager hang names envd-like functions', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-hang-in', 'cgroup-manager']);
    await waitFor('cgroup-manager phase line', () => fe.stderr().includes('envd startup: creating cgroup manager'));
    await waitUntilAsleep(fe.child.pid!);
    process.kill(fe.child.pid!, 'SIGQUIT');
    const { code } = await fe.exit;
    expect(code).toBe(2);
    const dump = fe.stderr();
    // The main goroutine, innermost first.
    expect(dump).toMatch(
      /sync\.\(\*Mutex\)\.Lock[^\n]*\n[^\n]*\nmain\.\(\*cgroupManager\)\.acquireRoot\([^\n]*\n[^\n]*\nmain\.createCgroupManager\(/,
    );
  });

  it('-hang-in in another phase blocks in blockForever under that phase’s function', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-hang-in', 'logger']);
    await waitFor('logger phase line', () => fe.stderr().includes('envd startup: creating logger'));
    await waitUntilAsleep(fe.child.pid!);
    process.kill(fe.child.pid!, 'SIGQUIT');
    expect((await fe.exit).code).toBe(2);
    // (main.(*startup).maybeHang may appear in between: it is inlined.)
    expect(fe.stderr()).toMatch(/main\.blockForever\((?:[^\n]*\n){1,6}main\.newLogger\(/);
  });

  it('-crash-in api exits with code 1 after the api phase line', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-crash-in', 'api']);
    const { code } = await fe.exit;
    expect(code).toBe(1);
    const apiIdx = FAKE_ENVD_PHASES.indexOf('api');
    expect(fe.phaseLines()).toEqual(expectedPhaseLines(port).slice(0, apiIdx + 1));
    expect(fe.stderr()).toContain('simulated crash in phase api');
  });

  it('-crash-in api -crash-mode panic panics (exit code 2)', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-crash-in', 'api', '-crash-mode', 'panic']);
    expect((await fe.exit).code).toBe(2);
    expect(fe.stderr()).toMatch(/panic: fake-envd: simulated crash in phase api/);
    expect(fe.stderr()).toContain('main.newAPI(');
  });

  it('-listen-first -hang-in api: /health answers 204 while start-up is still hung', async () => {
    const rx = await startNotifyReceiver(await notifySocketPath());
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-listen-first', '-hang-in', 'api'], {
      NOTIFY_SOCKET: rx.socket,
    });
    await waitFor('api phase line', () => fe.stderr().includes('envd startup: creating API store'));
    await sleep(200);

    expect((await httpGet(port, '/health')).status).toBe(204);
    expect((await httpGet(port, '/')).status).toBe(404);
    expect(isRunning(fe.child)).toBe(true);
    expect(fe.stderr()).not.toContain('fake-envd: ready');
    // listen comes first, then the usual order up to the hung phase; no READY=1.
    const phases = rx.datagrams.map((d) => parseDatagram(d).PHASE);
    expect(phases).toEqual(['listen', ...FAKE_ENVD_PHASES.slice(0, FAKE_ENVD_PHASES.indexOf('api') + 1)]);
    expect(rx.datagrams.some((d) => d.includes('READY=1'))).toBe(false);
  });

  it('-listen-first sends READY=1 only after the last phase', async () => {
    const rx = await startNotifyReceiver(await notifySocketPath());
    const port = await freePort();
    startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-listen-first'], { NOTIFY_SOCKET: rx.socket });
    await waitFor('READY=1 datagram', () => rx.datagrams.some((d) => d.startsWith('READY=1')));
    expectStartupDatagrams(rx.datagrams, port, ['listen', ...FAKE_ENVD_PHASES.slice(0, -1)]);
  });

  it('-no-accept binds the port but never answers', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-no-accept']);
    await waitReady(fe);
    expect(await portBound(port)).toBe(true); // the kernel completes the handshake
    await expect(httpGet(port, '/health', 500)).rejects.toThrow(/timed out/);
  });

  it('-stamp-file records each phase and the bind on the wall clock, in order', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'vd-fe-'));
    tempDirs.push(dir);
    const file = path.join(dir, 'stamps');
    const port = await freePort();
    const before = Date.now();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-slow-phase', 'router=200ms', '-stamp-file', file]);
    await waitReady(fe);
    const stamps = (await readFile(file, 'utf8'))
      .trimEnd()
      .split('\n')
      .map((l) => l.split(' '));
    expect(stamps.map(([name]) => name)).toEqual([...FAKE_ENVD_PHASES, 'bound']);
    const at = stamps.map(([, ms]) => Number(ms));
    expect(at[0]).toBeGreaterThanOrEqual(before);
    expect(at.at(-1)).toBeLessThanOrEqual(Date.now());
    for (let i = 1; i < at.length; i++) expect(at[i]).toBeGreaterThanOrEqual(at[i - 1]!);
    // The slow phase shows in the clock: the stamp after router's is 200 ms later at least.
    const router = FAKE_ENVD_PHASES.indexOf('router');
    expect(at[router + 1]! - at[router]!).toBeGreaterThanOrEqual(200);
  });

  it('-slow-phase makes one phase slow', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-slow-phase', 'router=600ms']);
    await waitFor('router phase line', () => fe.stderr().includes('envd startup: creating HTTP router'));
    await sleep(300);
    expect(fe.phaseLines().at(-1)).toBe('envd startup: creating HTTP router');
    await waitReady(fe);
  });

  it('polls a local fake MMDS (token PUT, then GET /) and stops at the first 200', async () => {
    const seen: string[] = [];
    const ttlHeaders = new Set<string>();
    const tokenHeaders = new Set<string>();
    let gets = 0;
    const mmds = http.createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      if (req.method === 'PUT' && req.url === '/latest/api/token') {
        ttlHeaders.add(String(req.headers['x-metadata-token-ttl-seconds']));
        res.end('tok');
      } else if (req.method === 'GET' && req.url === '/') {
        tokenHeaders.add(String(req.headers['x-metadata-token']));
        gets++;
        if (gets < 3) {
          res.statusCode = 503;
          res.end();
        } else {
          res.setHeader('Content-Type', 'application/json');
          res.end('{"instanceID":"i","envID":"e","address":""}');
        }
      } else {
        res.statusCode = 404;
        res.end();
      }
    });
    mmds.listen(0, '127.0.0.1');
    await once(mmds, 'listening');
    try {
      const mmdsPort = (mmds.address() as net.AddressInfo).port;
      const port = await freePort();
      const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-mmds-addr', `127.0.0.1:${mmdsPort}`]);
      await waitFor('MMDS poller success', () => fe.stderr().includes('fake-envd: mmds: got opts'));
      const count = seen.length;
      await sleep(300);
      expect(seen.length).toBe(count);
      expect(gets).toBe(3);
      expect(seen.slice(0, 2)).toEqual(['PUT /latest/api/token', 'GET /']);
      expect([...ttlHeaders]).toEqual(['60']);
      expect([...tokenHeaders]).toEqual(['tok']);
    } finally {
      mmds.closeAllConnections();
      mmds.close();
    }
  });

  it('-mmds-storm N runs N pollers that never stop, one connection per request', async () => {
    let connections = 0;
    let okResponses = 0;
    // Requests per connection: keep-alive would show as a socket serving more than one.
    const served = new WeakMap<net.Socket, number>();
    let reused = 0;
    const mmds = http.createServer((req, res) => {
      okResponses++;
      const n = (served.get(req.socket) ?? 0) + 1;
      served.set(req.socket, n);
      if (n > 1) reused++;
      res.end(req.method === 'PUT' ? 'tok' : '{}');
    });
    mmds.on('connection', () => connections++);
    mmds.listen(0, '127.0.0.1');
    await once(mmds, 'listening');
    try {
      const mmdsPort = (mmds.address() as net.AddressInfo).port;
      const port = await freePort();
      const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-mmds-addr', `127.0.0.1:${mmdsPort}`, '-mmds-storm', '10']);
      await waitReady(fe);
      await waitFor('40 MMDS requests', () => okResponses >= 40);
      const before = connections;
      await sleep(300);
      expect(connections).toBeGreaterThan(before); // still polling after many 200s
      // No keep-alive: one request per connection. (Comparing the two counts would race: a
      // connection is counted when accepted, its request a moment later.)
      expect(reused).toBe(0);
    } finally {
      mmds.closeAllConnections();
      mmds.close();
    }
  });

  it('exits 0 on SIGTERM, even while hung', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-hang-in', 'cgroup-manager']);
    await waitFor('cgroup-manager phase line', () => fe.stderr().includes('envd startup: creating cgroup manager'));
    process.kill(fe.child.pid!, 'SIGTERM');
    expect(await fe.exit).toEqual({ code: 0, signal: null });
  });

  it('-exit-after exits 0 after being ready', async () => {
    const port = await freePort();
    const fe = startFakeEnvd(['-addr', '127.0.0.1', '-port', String(port), '-exit-after', '200ms']);
    expect(await fe.exit).toEqual({ code: 0, signal: null });
    expect(fe.stderr()).toContain('fake-envd: ready');
  });
});
