// The collector under a fleet, and one session flat out:
//
// 1. measureFleet(N): a real collector with N registered sandboxes (each its own udsPath;
//    the collector listens on <udsPath>_52000) and N light probes (load-clients.ts, in a
//    child process so their CPU is neither ours nor the collector's) speaking the real
//    protocol over those Unix sockets: hello, a heartbeat a second and one small event batch
//    a second each. Half say hello as `ready`, half as `booting`, so the states are real.
//    Then, in turn:
//      - a quiet window: the collector's CPU (utime + stime from /proc/<pid>/stat, % of one
//        core) and RSS at the end; no API traffic during it;
//      - ingest → API latency: a `phase` event with a unique name sent by a random client,
//        timed until GET /v1/sandboxes/:id shows it as lastPhase (polled every 5 ms);
//      - optionally the readiness API at a steady open-loop rate against /healthz at the
//        same rate, in alternating blocks (keep-alive agent, random sandbox ids).
// 2. measureIngest: one session pushing batches of 256 events as fast as acks allow (a
//    window of outstanding batches), next to the same bytes written to a plain Unix socket
//    whose reader (another process) only counts and discards them, alternately.
//
// Bounded everywhere: sessions, windows, sample counts, bytes (a session's budget allows an
// 8 MiB burst: a run stops below it). Traffic on Unix sockets and loopback HTTP only; every
// process started here is ended by pid.

import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { MAX_EVENTS_PER_BATCH, encodeMessage, type EventBody, type ProbeEvent } from '@vsockdiag/proto';
import { ROOT, startCollector, type CollectorProcess } from '../harness/collector.js';
import { REQUIRE_BANNER, bundleForNode } from './bundle.js';
import { ProbeClient } from '../harness/probe-client.js';
import { digestProfiles, profilesIn, type ProfileDigest } from './cpu-profile.js';
import { cpuMs, runDelayMs, statusFields } from './proc.js';
import { summarize } from './stats.js';

type Progress = (msg: string) => void;
type Stat = ReturnType<typeof summarize>;
const VSOCK_PORT = 52000;
/** Deadlines far past any window: no sandbox turns stuck (and is auto-dumped) during a run. */
const QUIET_ARGS = ['--stall-after', '1h', '--start-deadline', '1h'];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const wallNow = () => performance.timeOrigin + performance.now();

/** Runs `fn` over `items`, `parallel` at a time. */
export async function pool<T>(items: T[], parallel: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}

// ---------------------------------------------------------------- the client child

export interface Clients {
  proc: ChildProcess;
  send: (m: unknown) => void;
  next: (op: string, timeoutMs: number) => Promise<any>;
  stop: () => Promise<void>;
}

let clientsBundle: string | null = null;

/** Bundles load-clients.ts (once) for the child process that runs the clients. */
function buildClients(): string {
  if (clientsBundle) return clientsBundle;
  const outfile = path.join(ROOT, 'test/.build/load-clients.mjs');
  bundleForNode(path.join(ROOT, 'test/bench/load-clients.ts'), outfile, { banner: REQUIRE_BANNER });
  return (clientsBundle = outfile);
}

export function startClients(): Clients {
  const bundle = buildClients();
  // Its own fd limit: one socket per client (raised to the hard limit, 20,000 here).
  const proc = spawn('sh', ['-c', 'ulimit -n "$(ulimit -Hn)" && exec "$0" "$1"', process.execPath, bundle], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let errors = '';
  proc.stderr!.on('data', (d) => (errors = (errors + d).slice(-4000)));
  const queue: any[] = [];
  const waiters: Array<() => void> = [];
  readline.createInterface({ input: proc.stdout! }).on('line', (line) => {
    queue.push(JSON.parse(line));
    for (const w of waiters.splice(0)) w();
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const next = async (op: string, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = queue.findIndex((m) => m.op === op);
      if (i >= 0) return queue.splice(i, 1)[0];
      if (proc.exitCode !== null) throw new Error(`the client process exited: ${errors}`);
      if (Date.now() > deadline) throw new Error(`no "${op}" from the client process in ${timeoutMs} ms: ${errors}`);
      await Promise.race([new Promise<void>((r) => waiters.push(r)), sleep(100)]);
    }
  };
  const stop = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.stdin!.end();
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  return { proc, send: (m) => proc.stdin!.write(`${JSON.stringify(m)}\n`), next, stop };
}

// ---------------------------------------------------------------- open-loop HTTP load

export interface RateFigure {
  requests: number;
  seconds: number;
  rate: number;
  latency: Stat;
  statuses: Record<string, number>;
  /** How late this process sent, worst case (its own timers): part of nothing above. */
  maxSendLagMs: number;
}

/** Fires GETs at `rate`/s for `ms` on a fixed schedule (not waiting for answers). */
async function openLoop(
  agent: http.Agent,
  base: URL,
  rate: number,
  ms: number,
  pathOf: () => string,
  into: { lat: number[]; statuses: Record<string, number>; lag: number[] },
) {
  const start = performance.now();
  const total = Math.floor((rate * ms) / 1000);
  let sent = 0;
  let answered = 0;
  await new Promise<void>((resolve) => {
    const fire = () => {
      const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
      for (; sent < due; sent++) {
        const scheduled = start + (sent * 1000) / rate;
        const t0 = performance.now();
        into.lag.push(t0 - scheduled);
        const req = http.get({ agent, host: base.hostname, port: base.port, path: pathOf() }, (res) => {
          res.resume();
          res.on('end', () => {
            into.lat.push(performance.now() - t0);
            into.statuses[res.statusCode!] = (into.statuses[res.statusCode!] ?? 0) + 1;
            if (++answered === total) resolve();
          });
        });
        req.on('error', () => {
          into.statuses.error = (into.statuses.error ?? 0) + 1;
          if (++answered === total) resolve();
        });
      }
      if (sent < total) setTimeout(fire, 1);
    };
    fire();
  });
  return performance.now() - start;
}

/** Readiness of random sandboxes and /healthz, alternating blocks, each at `rate`/s. */
async function readinessLoad(c: CollectorProcess, ids: string[], rate: number, totalMs: number, blocks: number, mark: () => void) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const base = new URL(c.url);
  const acc = {
    readiness: { lat: [] as number[], statuses: {} as Record<string, number>, lag: [] as number[], ms: 0 },
    healthz: { lat: [] as number[], statuses: {} as Record<string, number>, lag: [] as number[], ms: 0 },
  };
  const blockMs = totalMs / blocks;
  const pid = c.proc.pid!;
  // Warm the connections and the routes.
  for (let i = 0; i < 20; i++) {
    await openLoop(agent, base, 200, 50, () => '/healthz', { lat: [], statuses: {}, lag: [] });
    await openLoop(agent, base, 200, 50, () => `/v1/sandboxes/${ids[i % ids.length]}/readiness`, { lat: [], statuses: {}, lag: [] });
  }
  mark();
  const wait0 = { collector: runDelayMs(pid), self: runDelayMs('self') };
  const t0 = performance.now();
  for (let b = 0; b < blocks; b++) {
    for (const which of (b % 2 ? ['healthz', 'readiness'] : ['readiness', 'healthz']) as Array<'readiness' | 'healthz'>) {
      const pathOf =
        which === 'healthz' ? () => '/healthz' : () => `/v1/sandboxes/${ids[Math.floor(Math.random() * ids.length)]}/readiness`;
      acc[which].ms += await openLoop(agent, base, rate, blockMs, pathOf, acc[which]);
    }
  }
  mark();
  const ms = performance.now() - t0;
  const runDelayPct = {
    collector: ((runDelayMs(pid) - wait0.collector) / ms) * 100,
    bench: ((runDelayMs('self') - wait0.self) / ms) * 100,
  };
  agent.destroy();
  const fig = (a: (typeof acc)['healthz']): RateFigure => ({
    requests: a.lat.length,
    seconds: a.ms / 1000,
    rate: a.lat.length / (a.ms / 1000),
    latency: summarize(a.lat),
    statuses: a.statuses,
    maxSendLagMs: Math.max(...a.lag),
  });
  return { readiness: fig(acc.readiness), healthz: fig(acc.healthz), runDelayPct };
}

// ---------------------------------------------------------------- the fleet

export interface FleetFigure {
  sessions: number;
  connected: number;
  registerS: number;
  connectS: number;
  windowS: number;
  cpuPct: number;
  cpuMs: number;
  /** The collector's main thread: % of the window spent runnable but waiting for a CPU. */
  runDelayPct: number;
  rssMiB: number;
  hwmMiB: number;
  /** The client process's own CPU over the same window (it shares the machine). */
  clientsCpuPct: number;
  /** Events the clients sent per second over the window (one batch each a second). */
  eventsPerS: number;
  states: Record<string, number>;
  ingestToApi: Stat;
  /** Sessions the collector closed during the run (should be 0). */
  closed: number;
  readiness?: { readiness: RateFigure; healthz: RateFigure; runDelayPct: { collector: number; bench: number } };
  /** With FleetOptions.cpuProfDir: where the collector's main thread spent each window. */
  profile?: {
    file: string;
    window: { digest: ProfileDigest; loop: LoopDelay };
    readiness?: { digest: ProfileDigest; loop: LoopDelay };
  };
  profileError?: string;
}

/** The collector's event-loop delay over a window (ms; sampled every 10 ms). */
export interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
  mean: number;
  count: number;
}

export interface FleetOptions {
  windowS: number;
  latencySamples: number;
  readiness?: { rate: number; totalMs: number; blocks: number };
  /** Run the collector under --cpu-prof, writing into this directory. */
  cpuProfDir?: string;
}

export async function measureFleet(n: number, opts: FleetOptions, progress: Progress): Promise<FleetFigure> {
  const fig = await runFleet(n, opts, progress);
  if (!opts.cpuProfDir) return fig;
  // The collector wrote its profile and loop delays at exit (cpu-prof-preload.cjs).
  const prof = profilesIn(opts.cpuProfDir)[0];
  const loopFile = prof?.replace(/\.cpuprofile$/, '.loop.json');
  if (!prof || !loopFile || !fs.existsSync(loopFile)) return { ...fig, profileError: 'the collector wrote no profile' };
  const loop = JSON.parse(fs.readFileSync(loopFile, 'utf8')) as { marks: number[]; windows: LoopDelay[] };
  const [w0, w1, r0, r1] = loop.marks;
  return {
    ...fig,
    profile: {
      file: prof,
      window: { digest: digestProfiles([prof], { range: { fromUs: w0!, toUs: w1! } }), loop: loop.windows[0]! },
      ...(r0 !== undefined && r1 !== undefined
        ? { readiness: { digest: digestProfiles([prof], { range: { fromUs: r0, toUs: r1 } }), loop: loop.windows[1]! } }
        : {}),
    },
  };
}

async function runFleet(n: number, opts: FleetOptions, progress: Progress): Promise<FleetFigure> {
  // Node refuses --cpu-prof in NODE_OPTIONS: a preloaded script runs the same profiler.
  const profiler = opts.cpuProfDir
    ? {
        NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${path.join(ROOT, 'test/bench/fixtures/cpu-prof-preload.cjs')}`.trim(),
        VD_PROF_DIR: opts.cpuProfDir,
      }
    : {};
  const c = await startCollector({ args: QUIET_ARGS, env: profiler });
  const pid = c.proc.pid!;
  // Each session costs the collector two descriptors (its listener and the connection).
  const fdLimit = Number(/^Max open files\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/limits`, 'utf8'))?.[1] ?? Infinity);
  if (fdLimit < 2 * n + 256) {
    await c.stop();
    throw new Error(
      `the collector may open only ${fdLimit} files; ${n} sessions need ${2 * n + 256}: raise the soft limit (ulimit -n) before make bench`,
    );
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-f-'));
  const mark = () => void (opts.cpuProfDir && c.proc.kill('SIGUSR2'));
  let clients: Clients | null = null;
  try {
    const ids = Array.from({ length: n }, (_, i) => `f${i}`);
    const t0 = performance.now();
    await pool(ids, 16, async (id, i) => {
      const r = await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath: path.join(root, `${i}.v`) });
      if (r.status !== 201) throw new Error(`register ${id}: ${r.status} ${JSON.stringify(r.body)}`);
      if ((i + 1) % 500 === 0) progress(`fleet of ${n}: ${i + 1} sandboxes registered`);
    });
    const registerS = (performance.now() - t0) / 1000;

    clients = startClients();
    const t1 = performance.now();
    clients.send({ op: 'connect', paths: ids.map((_, i) => path.join(root, `${i}.v_${VSOCK_PORT}`)), readyEvery: 2 });
    // Under a loaded machine 5,000+ handshakes take minutes: the deadline grows with n.
    const conn = await clients.next('connected', Math.max(120_000, n * 60));
    const connectS = (performance.now() - t1) / 1000;
    progress(`fleet of ${n}: ${conn.n} sessions connected in ${connectS.toFixed(1)} s (${conn.failed} failed)`);
    // Let the connection surge settle (every client is in its 1 Hz rhythm after 1 s).
    await sleep(3000);

    // The quiet window: no API traffic.
    progress(`fleet of ${n}: ${opts.windowS} s CPU window`);
    const s0 = await statsOf(clients);
    mark(); // profiled runs: the window starts (cpu-prof-preload.cjs)
    const cpu0 = cpuMs(pid);
    const wait0 = runDelayMs(pid);
    const cli0 = cpuMs(clients.proc.pid!);
    const w0 = performance.now();
    await sleep(opts.windowS * 1000);
    const cpu1 = cpuMs(pid);
    const wait1 = runDelayMs(pid);
    mark();
    const cli1 = cpuMs(clients.proc.pid!);
    const windowMs = performance.now() - w0;
    const mem = statusFields(pid, ['VmRSS', 'VmHWM'] as const);
    const s1 = await statsOf(clients);
    const windowCpuMs = cpu1 - cpu0;

    // Ingest → API latency, samples spread over a few seconds.
    if (opts.latencySamples) progress(`fleet of ${n}: ingest → API latency, ${opts.latencySamples} samples`);
    const lat: number[] = [];
    for (let k = 0; k < opts.latencySamples; k++) {
      const i = Math.floor(Math.random() * n);
      const name = `lat-${n}-${k}`;
      clients.send({ op: 'phase', i, name });
      const sentMsg = await clients.next('phase', 10_000);
      if (sentMsg.at === null) continue;
      const deadline = Date.now() + 10_000;
      for (;;) {
        const r = await c.api('GET', `/v1/sandboxes/${ids[i]}`);
        const at = wallNow();
        if (r.body?.lastPhase === name) {
          lat.push(at - sentMsg.at);
          break;
        }
        if (Date.now() > deadline) throw new Error(`phase ${name} not shown by the API within 10 s`);
        await sleep(5);
      }
      await sleep(40 + Math.random() * 40);
    }

    const list = (await c.api<{ sandboxes: Array<{ state: string }> }>('GET', '/v1/sandboxes')).body.sandboxes;
    const states: Record<string, number> = {};
    for (const s of list) states[s.state] = (states[s.state] ?? 0) + 1;

    let readiness: FleetFigure['readiness'];
    if (opts.readiness) {
      const { rate, totalMs, blocks } = opts.readiness;
      progress(`fleet of ${n}: readiness API and /healthz at ${rate}/s each, ${(totalMs / 1000).toFixed(0)} s each`);
      readiness = await readinessLoad(c, ids, rate, totalMs, blocks, mark);
    }
    const s2 = await statsOf(clients);
    return {
      sessions: n,
      connected: conn.n,
      registerS,
      connectS,
      windowS: windowMs / 1000,
      cpuPct: (windowCpuMs / windowMs) * 100,
      cpuMs: windowCpuMs,
      runDelayPct: ((wait1 - wait0) / windowMs) * 100,
      rssMiB: mem.VmRSS / 1024,
      hwmMiB: mem.VmHWM / 1024,
      clientsCpuPct: ((cli1 - cli0) / windowMs) * 100,
      eventsPerS: (s1.sent - s0.sent) / (windowMs / 1000),
      states,
      ingestToApi: summarize(lat),
      closed: s2.closed,
      ...(readiness ? { readiness } : {}),
    };
  } finally {
    await clients?.stop();
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

async function statsOf(clients: Clients): Promise<{ sent: number; acked: number; closed: number }> {
  clients.send({ op: 'stats' });
  return clients.next('stats', 10_000);
}

// ---------------------------------------------------------------- one session flat out

export interface IngestFigure {
  rounds: number;
  eventsPerBatch: number;
  window: number;
  /** Medians over the rounds. */
  eventsPerS: number;
  mbPerS: number;
  rawMbPerS: number;
  ratio: number;
  bytesPerRound: number;
  eventsPerRound: number;
  meanEventBytes: number;
  /** The collector's CPU per MB ingested (ms), median. */
  cpuMsPerMb: number;
  /** The collector's main thread: % of the run spent runnable but waiting for a CPU, median. */
  runDelayPct: number;
  runs: Array<{ events: number; bytes: number; s: number; rawS: number; cpuMs: number; waitMs: number }>;
}

const LOG_LINE = '2026-11-30T12:00:00.000Z INFO  envd: handled request GET /health in 0.2ms (200)';

/** A realistic mix of small events: socket totals, target samples, system facts, log lines. */
function body(i: number): EventBody {
  switch (i % 4) {
    case 0:
      return { kind: 'sockets', tcpInUse: 10 + (i % 17), timeWait: i % 5 };
    case 1:
      return { kind: 'target.sample', pid: 100, state: 'S', threads: 12, rssKb: 50_000 + (i % 1000), fds: 30, cpuMs: i };
    case 2:
      return {
        kind: 'system',
        uptimeMs: 1000 + i,
        load: [0.1, 0.2, 0.3],
        memTotalKb: 2_000_000,
        memAvailableKb: 1_500_000,
        bootId: 'test-boot',
        wallMs: Date.now(),
      };
    default:
      return { kind: 'log.lines', stream: 'stdout', lines: [LOG_LINE] };
  }
}

/** Sink for the baseline: another process that counts bytes and says "done" at `want`. */
function startSink(sock: string, want: number): Promise<{ proc: ChildProcess; done: Promise<void> }> {
  const code = `const net=require('net');let n=0;const want=+process.argv[2];
net.createServer(s=>s.on('data',d=>{n+=d.length;if(n>=want)process.stdout.write('done\\n')})).listen(process.argv[1],()=>process.stdout.write('up\\n'));
setTimeout(()=>process.exit(3),60000).unref();`;
  const proc = spawn(process.execPath, ['-e', code, sock, String(want)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: proc.stdout! });
  const done = new Promise<void>((r) => lines.on('line', (l) => l === 'done' && r()));
  return new Promise((resolve, reject) => {
    lines.on('line', (l) => l === 'up' && resolve({ proc, done }));
    proc.once('exit', (code) => reject(new Error(`sink exited with ${code}`)));
  });
}

export async function measureIngest(rounds: number, maxS: number, maxBytes: number, progress: Progress): Promise<IngestFigure> {
  const c = await startCollector({ args: QUIET_ARGS });
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-i-'));
  const WINDOW = 8;
  const runs: IngestFigure['runs'] = [];
  try {
    for (let r = 0; r < rounds; r++) {
      const id = `ingest-${r}`;
      const udsPath = path.join(root, `${r}.v`);
      await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath });
      const client = new ProbeClient({
        path: `${udsPath}_${VSOCK_PORT}`,
        instanceId: `ingest${String(r).padStart(10, '0')}`,
        heartbeatMs: 1000,
      });
      await client.connect();
      // Warm-up: a few batches, not counted (JIT, SQLite page cache).
      for (let w = 0; w < 4; w++) {
        const last = client.events(Array.from({ length: MAX_EVENTS_PER_BATCH }, (_, i) => body(i)));
        await client.waitAcked(last);
      }
      const buffers: Buffer[] = [];
      let bytes = 0;
      let events = 0;
      const cpu0 = cpuMs(c.proc.pid!);
      const wait0 = runDelayMs(c.proc.pid!);
      const t0 = performance.now();
      let lastSeq = client.seq;
      const sendOne = () => {
        const first = client.seq + 1;
        const t = performance.now();
        const evs = Array.from({ length: MAX_EVENTS_PER_BATCH }, (_, i) => ({ ...body(events + i), seq: first + i, t }) as ProbeEvent);
        const buf = encodeMessage({ type: 'events', events: evs });
        client.socket!.write(buf);
        client.seq = lastSeq = first + MAX_EVENTS_PER_BATCH - 1;
        buffers.push(buf);
        bytes += buf.length;
        events += MAX_EVENTS_PER_BATCH;
      };
      const more = () => performance.now() - t0 < maxS * 1000 && bytes < maxBytes;
      // Refill the window on every ack (acks arrive as data on the client's socket, which the
      // client has decoded by the time this listener, added after its own, runs).
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('ingest: no ack for 10 s')), 10_000);
        const refill = () => {
          timer.refresh();
          while (more() && client.seq - client.acked < WINDOW * MAX_EVENTS_PER_BATCH) sendOne();
          if (!more() && client.acked >= lastSeq) {
            clearTimeout(timer);
            client.socket!.removeListener('data', refill);
            resolve();
          }
        };
        client.socket!.on('data', refill);
        client.socket!.once('close', () => reject(new Error('ingest: the collector closed the session')));
        refill();
      });
      const s = (performance.now() - t0) / 1000;
      const roundCpuMs = cpuMs(c.proc.pid!) - cpu0;
      const waitMs = runDelayMs(c.proc.pid!) - wait0;
      client.close();

      // The same bytes through a plain Unix socket to a reader that discards them.
      const sock = path.join(root, `raw-${r}.sock`);
      const sink = await startSink(sock, bytes);
      const rawS = await new Promise<number>((resolve, reject) => {
        const sk = net.connect({ path: sock });
        sk.once('error', reject);
        sk.once('connect', async () => {
          const r0 = performance.now();
          let i = 0;
          const pump = () => {
            while (i < buffers.length) if (!sk.write(buffers[i++]!)) return void sk.once('drain', pump);
          };
          pump();
          await sink.done;
          resolve((performance.now() - r0) / 1000);
          sk.destroy();
        });
      });
      sink.proc.kill('SIGKILL');
      runs.push({ events, bytes, s, rawS, cpuMs: roundCpuMs, waitMs });
      progress(
        `ingest round ${r + 1}/${rounds}: ${events} events, ${(bytes / 2 ** 20).toFixed(1)} MiB in ${s.toFixed(2)} s; raw relay ${rawS.toFixed(3)} s`,
      );
    }
  } finally {
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  const med = (xs: number[]) => summarize(xs).p50;
  const mb = (b: number) => b / 1e6;
  const eventsPerS = med(runs.map((x) => x.events / x.s));
  const mbPerS = med(runs.map((x) => mb(x.bytes) / x.s));
  const rawMbPerS = med(runs.map((x) => mb(x.bytes) / x.rawS));
  return {
    rounds,
    eventsPerBatch: MAX_EVENTS_PER_BATCH,
    window: WINDOW,
    eventsPerS,
    mbPerS,
    rawMbPerS,
    ratio: mbPerS / rawMbPerS,
    bytesPerRound: med(runs.map((x) => x.bytes)),
    eventsPerRound: med(runs.map((x) => x.events)),
    meanEventBytes: med(runs.map((x) => x.bytes / x.events)),
    cpuMsPerMb: med(runs.map((x) => x.cpuMs / mb(x.bytes))),
    runDelayPct: med(runs.map((x) => (x.waitMs / (x.s * 1000)) * 100)),
    runs,
  };
}
