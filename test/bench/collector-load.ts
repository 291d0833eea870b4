// The collector under a fleet, and one session flat out:
//
// 1. measureFleet(N): a real collector with N registered sandboxes (each its own udsPath;
//    the collector listens on <udsPath>_52000) and N light probes (load-clients.ts, in a
//    child process so their CPU is neither ours nor the collector's) speaking the real
//    protocol over those Unix sockets: hello, then one small event batch a second each (and a
//    heartbeat only after a second with nothing else sent, as the probe's link does: none
//    while batches flow). Half say hello as `ready`, half as `booting`, so the states are real.
//    Then, in turn:
//      - a quiet window: the collector's CPU (utime + stime from /proc/<pid>/stat, % of one
//        core) and RSS at the end; no API traffic during it;
//      - ingest → API latency: a `phase` event with a unique name sent by a random client,
//        timed until GET /v1/sandboxes/:id shows it as lastPhase (polled every 5 ms);
//      - optionally verdicts under that load (FleetOptions.verdicts): a few booting clients
//        whose target appears and then sends no phase for --stall-after, again and again
//        (stuck verdict lag: the `stuck` state event minus last phase + stall-after, both
//        from the sandbox's history), and others whose target appears bound (bind → ready:
//        the `ready` state event, on the collector's clock, minus the client's write);
//      - optionally the readiness API at a steady open-loop rate against /healthz at the
//        same rate, in alternating blocks (a lean keep-alive client, lean-http.ts; random
//        sandbox ids).
//    With FleetOptions.fitFds, a fleet larger than the collector's descriptor limit allows is
//    cut to what fits (2 per session) instead of refused; with `setup`, registering and
//    connecting each stop at a deadline and the run goes on with the sessions it has. With
//    `profileTail`, everything above is measured unprofiled, then the same process is
//    profiled over another quiet window (and readiness run): no second fleet to set up.
// 2. measureIngest: one session pushing batches of 256 events as fast as acks allow (a
//    window of outstanding batches), next to the same bytes written to a plain Unix socket
//    whose reader (another process) only counts and discards them, alternately.
//
// Bounded everywhere: sessions, windows, sample counts, bytes (a session's budget allows an
// 8 MiB burst: a run stops below it). Traffic on Unix sockets and loopback HTTP only; every
// process started here is ended by pid.

import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { MAX_EVENTS_PER_BATCH, encodeMessage, type EventBody, type ProbeEvent } from '@vsockdiag/proto';
import { ROOT, allEvents, startCollector, type CollectorProcess } from '../harness/collector.js';
import { REQUIRE_BANNER, bundleForNode } from './bundle.js';
import { ProbeClient } from '../harness/probe-client.js';
import { spawnTethered } from '../harness/tether.js';
import { digestProfiles, profilesIn, type ProfileDigest } from './cpu-profile.js';
import { LeanHttpPool } from './lean-http.js';
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
  // Its own fd limit: one socket per client (raised to the hard limit, 20,000 here); killed
  // with this process should it die before stop() (tether.ts).
  const proc = spawnTethered(['sh', '-c', 'ulimit -n "$(ulimit -Hn)" && exec "$0" "$1"', process.execPath, bundle], {
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

/** How long past its schedule a block waits for its last answers: a collector too slow for
 *  the rate would otherwise stretch the run without bound. The unanswered are counted as
 *  status `unanswered`, with the time they had waited as their latency (a lower bound). */
const ANSWER_GRACE_MS = 2000;

/** Fires GETs at `rate`/s for `ms` on a fixed schedule (not waiting for answers). */
async function openLoop(
  pool: LeanHttpPool,
  rate: number,
  ms: number,
  pathOf: () => string,
  into: { lat: number[]; statuses: Record<string, number>; lag: number[] },
) {
  const start = performance.now();
  const total = Math.floor((rate * ms) / 1000);
  let sent = 0;
  let answered = 0;
  /** Send time by request number, for those not answered yet. */
  const pending = new Map<number, number>();
  await new Promise<void>((resolve) => {
    const cutoff = setTimeout(() => {
      const now = performance.now();
      for (const t0 of pending.values()) {
        into.lat.push(now - t0);
        into.statuses.unanswered = (into.statuses.unanswered ?? 0) + 1;
      }
      pending.clear();
      pool.abandon();
      sent = total;
      resolve();
    }, ms + ANSWER_GRACE_MS);
    const fire = () => {
      const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
      for (; sent < due; sent++) {
        const scheduled = start + (sent * 1000) / rate;
        const t0 = performance.now();
        into.lag.push(t0 - scheduled);
        const id = sent;
        pending.set(id, t0);
        pool.get(pathOf(), (result) => {
          if (!pending.delete(id)) return;
          if (result === 'error') into.statuses.error = (into.statuses.error ?? 0) + 1;
          else {
            into.lat.push(performance.now() - t0);
            into.statuses[result] = (into.statuses[result] ?? 0) + 1;
          }
          if (++answered === total) {
            clearTimeout(cutoff);
            resolve();
          }
        });
      }
      if (sent < total) setTimeout(fire, 1);
    };
    fire();
  });
  return performance.now() - start;
}

/** The measuring process's nice value during the readiness run (root may lower it; else it
 *  stays). On the 2-core bench host the client shares the cores with the collector and the
 *  fleet's clients, and a reply waiting for this process to get a CPU is not the collector's
 *  latency: at 5,000 sessions the thread's p99 was 8–26 ms at nice 0 and 4–5 ms at −10. */
const CLIENT_NICE = -10;

/** Readiness of random sandboxes from the main API, from the readiness thread when the
 *  collector has one (--readiness-http), and /healthz: blocks in turn, each at `rate`/s. */
async function readinessLoad(c: CollectorProcess, ids: string[], rate: number, totalMs: number, blocks: number, mark: () => void) {
  const main = new URL(c.url);
  const thread = c.readinessUrl ? new URL(c.readinessUrl) : null;
  const series = () => ({ lat: [] as number[], statuses: {} as Record<string, number>, lag: [] as number[], ms: 0 });
  const acc = { readiness: series(), thread: series(), healthz: series() };
  type Which = keyof typeof acc;
  const randomReadiness = () => `/v1/sandboxes/${ids[Math.floor(Math.random() * ids.length)]}/readiness`;
  const pool = (u: URL) => new LeanHttpPool(u.hostname, Number(u.port), 64);
  const mainPool = pool(main);
  const threadPool = thread ? pool(thread) : mainPool;
  const target: Record<Which, { pool: LeanHttpPool; path: () => string }> = {
    readiness: { pool: mainPool, path: randomReadiness },
    thread: { pool: threadPool, path: randomReadiness },
    healthz: { pool: mainPool, path: () => '/healthz' },
  };
  const order: Which[] = thread ? ['readiness', 'thread', 'healthz'] : ['readiness', 'healthz'];
  const blockMs = totalMs / blocks;
  const pid = c.proc.pid!;
  // Warm the connections and the routes.
  for (let i = 0; i < 20; i++) {
    for (const which of order) {
      const path = which === 'healthz' ? '/healthz' : `/v1/sandboxes/${ids[i % ids.length]}/readiness`;
      await openLoop(target[which].pool, 200, 50, () => path, { lat: [], statuses: {}, lag: [] });
    }
  }
  const niceBefore = os.getPriority();
  let clientNice = niceBefore;
  try {
    os.setPriority(CLIENT_NICE);
    clientNice = CLIENT_NICE;
  } catch {}
  mark();
  const wait0 = { collector: runDelayMs(pid), self: runDelayMs('self') };
  const t0 = performance.now();
  try {
    for (let b = 0; b < blocks; b++) {
      // Each block starts with the next series, so none always follows the same one.
      for (let k = 0; k < order.length; k++) {
        const which = order[(b + k) % order.length]!;
        acc[which].ms += await openLoop(target[which].pool, rate, blockMs, target[which].path, acc[which]);
      }
    }
  } finally {
    if (clientNice !== niceBefore) os.setPriority(niceBefore);
  }
  mark();
  const ms = performance.now() - t0;
  const runDelayPct = {
    collector: ((runDelayMs(pid) - wait0.collector) / ms) * 100,
    bench: ((runDelayMs('self') - wait0.self) / ms) * 100,
  };
  mainPool.destroy();
  threadPool.destroy();
  const fig = (a: ReturnType<typeof series>): RateFigure => ({
    requests: a.lat.length,
    seconds: a.ms / 1000,
    // Answered requests only.
    rate: (a.lat.length - (a.statuses.unanswered ?? 0)) / (a.ms / 1000),
    latency: summarize(a.lat),
    statuses: a.statuses,
    maxSendLagMs: Math.max(...a.lag),
  });
  return {
    readiness: fig(acc.readiness),
    ...(thread ? { thread: fig(acc.thread) } : {}),
    healthz: fig(acc.healthz),
    runDelayPct,
    clientNice,
  };
}

// ---------------------------------------------------------------- the fleet

export interface FleetFigure {
  sessions: number;
  /** The fleet asked for (more than `sessions` when fitFds cut it). */
  requested: number;
  /** Sandboxes registered (fewer than `sessions` when setupDeadlineMs cut it). */
  registered: number;
  connected: number;
  /** Connects never tried, the deadline having passed. */
  connectCut: number;
  /** The collector's descriptors: its limit, open once started, open at the window's end. */
  fds: { limit: number; atStart: number; atEnd: number };
  loadavg: { start: number[]; end: number[] };
  registerS: number;
  connectS: number;
  windowS: number;
  cpuPct: number;
  cpuMs: number;
  /** The collector's main thread: % of the window spent runnable but waiting for a CPU. */
  runDelayPct: number;
  rssMiB: number;
  hwmMiB: number;
  /** RSS once started, before any sandbox. */
  startRssMiB: number;
  /** The client process's own CPU over the same window (it shares the machine). */
  clientsCpuPct: number;
  /** Events the clients sent per second over the window (one batch each a second). */
  eventsPerS: number;
  states: Record<string, number>;
  ingestToApi: Stat;
  /** Sessions the collector closed during the run (should be 0). */
  closed: number;
  /** readiness: the main API's; thread: the readiness thread's (--readiness-http), when it has one. */
  readiness?: {
    readiness: RateFigure;
    thread?: RateFigure;
    healthz: RateFigure;
    runDelayPct: { collector: number; bench: number };
    /** The measuring process's nice value during the run (CLIENT_NICE when it could be set). */
    clientNice: number;
  };
  verdicts?: VerdictFigure;
  /** With FleetOptions.profileTail: the profiled window's CPU and readiness run (profiler on). */
  tail?: { windowS: number; cpuPct: number; readiness?: FleetFigure['readiness'] };
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

export interface VerdictFigure {
  stallMs: number;
  windowS: number;
  /** `stuck` state event − (last phase event + stall-after); `stuckCensored`: cycles whose
   *  verdict had not come by the next phase (lag over `censoredAfterMs`). */
  stuckLag: Stat;
  stuckClients: number;
  stuckCensored: number;
  censoredAfterMs: number;
  /** `ready` state event − the client's write of target.found + listener.bound. */
  bindToReady: Stat;
  bindMissed: number;
}

export interface FleetOptions {
  windowS: number;
  latencySamples: number;
  readiness?: { rate: number; totalMs: number; blocks: number };
  /** Collector flags (default: deadlines far past any window, so nothing turns stuck). */
  args?: string[];
  /** Stuck verdicts and binds measured under the load; `stallMs` must be the collector's
   *  --stall-after (args). */
  verdicts?: { stuck: number; bind: number; ms: number; stallMs: number };
  fitFds?: boolean;
  /** Deadlines (ms) for registering and for connecting. */
  setup?: { registerMs: number; connectMs: number };
  /** With cpuProfDir: profile only after the measured phases, over these. */
  profileTail?: { windowS: number; readiness?: { rate: number; totalMs: number; blocks: number } };
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
  if (w0 === undefined) return { ...fig, profileError: "the collector's event loop never took the window's start mark" };
  // A loop stalled past the window takes its end mark late or not before exit: the window then
  // runs to the profile's end, with no loop-delay sample (every turn was longer than it).
  const noSamples: LoopDelay = { p50: 0, p99: 0, max: 0, mean: 0, count: 0 };
  return {
    ...fig,
    profile: {
      file: prof,
      window: {
        digest: digestProfiles([prof], w1 === undefined ? {} : { range: { fromUs: w0, toUs: w1 } }),
        loop: loop.windows[0] ?? noSamples,
      },
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
        ...(opts.profileTail ? { VD_PROF_LAZY: '1' } : {}),
      }
    : {};
  const loadStart = os.loadavg();
  const c = await startCollector({ args: opts.args ?? QUIET_ARGS, env: profiler });
  const pid = c.proc.pid!;
  const fdsAtStart = openFds(pid);
  const startRssMiB = statusFields(pid, ['VmRSS'] as const).VmRSS / 1024;
  // Each session costs the collector two descriptors (its listener and the connection).
  const fdLimit = Number(/^Max open files\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/limits`, 'utf8'))?.[1] ?? Infinity);
  const requested = n;
  if (fdLimit < 2 * n + FD_SPARE) {
    if (opts.fitFds) n = Math.floor((fdLimit - FD_SPARE) / 2);
    else {
      await c.stop();
      throw new Error(
        `the collector may open only ${fdLimit} files; ${n} sessions need ${2 * n + FD_SPARE}: raise the soft limit (ulimit -n) before make bench`,
      );
    }
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-f-'));
  const profMark = () => void c.proc.kill('SIGUSR2');
  // The marks of the measured phases (a profiled tail marks only its own).
  const mark = () => void (opts.cpuProfDir && !opts.profileTail && profMark());
  let clients: Clients | null = null;
  try {
    let ids = Array.from({ length: n }, (_, i) => `f${i}`);
    const t0 = performance.now();
    let registered = 0;
    const registerBy = t0 + (opts.setup?.registerMs ?? Number.POSITIVE_INFINITY);
    await pool(ids, 16, async (id, i) => {
      if (performance.now() > registerBy) return;
      const r = await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath: path.join(root, `${i}.v`) });
      if (r.status !== 201) throw new Error(`register ${id}: ${r.status} ${JSON.stringify(r.body)}`);
      if (++registered % 1000 === 0) progress(`fleet of ${n}: ${registered} sandboxes registered`);
    });
    const registerS = (performance.now() - t0) / 1000;
    // Registered in index order, 16 at a time: at a deadline, the first `registered` ones.
    ids = ids.slice(0, registered);

    clients = startClients();
    const t1 = performance.now();
    const connectBudgetMs = opts.setup?.connectMs ?? Number.POSITIVE_INFINITY;
    clients.send({
      op: 'connect',
      paths: ids.map((_, i) => path.join(root, `${i}.v_${VSOCK_PORT}`)),
      readyEvery: 2,
      ...(Number.isFinite(connectBudgetMs) ? { deadlineMs: connectBudgetMs } : {}),
    });
    // Under a loaded machine 5,000+ handshakes take minutes: the deadline grows with n (a
    // connect under way at the client's own deadline may still take its 5 s welcome timeout).
    const conn = await clients.next('connected', Number.isFinite(connectBudgetMs) ? connectBudgetMs + 30_000 : Math.max(120_000, n * 60));
    const connectS = (performance.now() - t1) / 1000;
    progress(`fleet of ${n}: ${conn.n} sessions connected in ${connectS.toFixed(1)} s (${conn.failed} failed, ${conn.cut} not tried)`);
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
    const fdsAtEnd = openFds(pid);
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

    const list = await c.api<{ sandboxes: Array<{ state: string }> }>('GET', '/v1/sandboxes');
    const states: Record<string, number> = {};
    if (list.status === 200) for (const s of list.body.sandboxes) states[s.state] = (states[s.state] ?? 0) + 1;
    else states[`(GET /v1/sandboxes answered ${list.status}: ${JSON.stringify(list.body).slice(0, 200)})`] = 1;

    let verdicts: VerdictFigure | undefined;
    if (opts.verdicts) verdicts = await verdictsUnderLoad(c, clients, ids.length, opts.verdicts, progress);

    let readiness: FleetFigure['readiness'];
    if (opts.readiness) {
      const { rate, totalMs, blocks } = opts.readiness;
      progress(`fleet of ${n}: readiness API and /healthz at ${rate}/s each, ${(totalMs / 1000).toFixed(0)} s each`);
      readiness = await readinessLoad(c, ids, rate, totalMs, blocks, mark);
    }
    let tail: FleetFigure['tail'];
    if (opts.profileTail) {
      progress(`fleet of ${n}: profiling the same load, ${opts.profileTail.windowS} s`);
      profMark();
      const p0 = cpuMs(pid);
      const pt = performance.now();
      await sleep(opts.profileTail.windowS * 1000);
      const p1 = cpuMs(pid);
      const pms = performance.now() - pt;
      profMark();
      const tr = opts.profileTail.readiness;
      tail = {
        windowS: pms / 1000,
        cpuPct: ((p1 - p0) / pms) * 100,
        ...(tr ? { readiness: await readinessLoad(c, ids, tr.rate, tr.totalMs, tr.blocks, profMark) } : {}),
      };
    }
    const s2 = await statsOf(clients);
    return {
      sessions: n,
      requested,
      registered,
      connected: conn.n,
      connectCut: conn.cut,
      fds: { limit: fdLimit, atStart: fdsAtStart, atEnd: fdsAtEnd },
      loadavg: { start: loadStart, end: os.loadavg() },
      registerS,
      connectS,
      windowS: windowMs / 1000,
      cpuPct: (windowCpuMs / windowMs) * 100,
      cpuMs: windowCpuMs,
      runDelayPct: ((wait1 - wait0) / windowMs) * 100,
      rssMiB: mem.VmRSS / 1024,
      hwmMiB: mem.VmHWM / 1024,
      startRssMiB,
      clientsCpuPct: ((cli1 - cli0) / windowMs) * 100,
      eventsPerS: (s1.sent - s0.sent) / (windowMs / 1000),
      states,
      ingestToApi: summarize(lat),
      closed: s2.closed,
      ...(readiness ? { readiness } : {}),
      ...(verdicts ? { verdicts } : {}),
      ...(tail ? { tail } : {}),
    };
  } finally {
    await clients?.stop();
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/** Descriptors beyond 2 per session: stdio, the HTTP listener and its connections, SQLite's
 *  files, Node's own (epoll, eventfds, the worker threads'). */
const FD_SPARE = 256;

const openFds = (pid: number) => fs.readdirSync(`/proc/${pid}/fd`).length;

/**
 * Stuck verdicts and binds while the fleet keeps streaming: `stuck` booting clients (odd
 * indices: readyEvery 2 makes the even ones ready) get a target and then a `phase` every
 * stall + 1 s, so each cycle goes starting → stuck → starting; `bind` others get a target
 * that is bound at once, spread over the window. Timed from the sandboxes' histories after
 * the window (the stuck verdicts of the last cycle are waited for).
 */
async function verdictsUnderLoad(
  c: CollectorProcess,
  clients: Clients,
  n: number,
  o: NonNullable<FleetOptions['verdicts']>,
  progress: Progress,
): Promise<VerdictFigure> {
  const booting = Array.from({ length: Math.floor(n / 2) }, (_, k) => 2 * k + 1);
  for (let k = booting.length - 1; k > 0; k--) {
    const j = Math.floor(Math.random() * (k + 1));
    [booting[k], booting[j]] = [booting[j]!, booting[k]!];
  }
  const stuck = booting.slice(0, o.stuck);
  const bind = booting.slice(o.stuck, o.stuck + o.bind);
  const cycleMs = o.stallMs + 1000;
  progress(`fleet of ${n}: verdicts under load, ${stuck.length} sandboxes cycling into stuck, ${bind.length} binds, ${o.ms / 1000} s`);
  for (const i of stuck) {
    clients.send({ op: 'target', i });
    await clients.next('target', 10_000);
  }
  const t0 = performance.now();
  const phaseDue = stuck.map((_, k) => (k * cycleMs) / stuck.length);
  const bindAt = new Map<number, number>();
  let phases = 0;
  let binds = 0;
  while (performance.now() - t0 < o.ms) {
    const t = performance.now() - t0;
    for (let k = 0; k < stuck.length; k++) {
      if (t < phaseDue[k]!) continue;
      clients.send({ op: 'phase', i: stuck[k], name: `cycle-${phases++}` });
      await clients.next('phase', 10_000);
      phaseDue[k]! += cycleMs;
    }
    if (binds < bind.length && t >= (binds * o.ms) / bind.length) {
      const i = bind[binds++]!;
      clients.send({ op: 'bind', i });
      const m = await clients.next('bind', 10_000);
      if (m.at !== null) bindAt.set(i, m.at);
    }
    await sleep(20);
  }
  // The last cycles' verdicts are due a stall after their phase; give them the slack of a cycle.
  await sleep(cycleMs);

  const lag: number[] = [];
  let censored = 0;
  for (const i of stuck) {
    const events = await allEvents(c, `f${i}`);
    const marks = events.filter((e) => (e.kind === 'phase' && String(e.data.name).startsWith('cycle-')) || e.kind === 'state');
    for (let k = 0; k < marks.length; k++) {
      if (marks[k].kind !== 'phase') continue;
      const deadline = Date.parse(marks[k].at) + o.stallMs;
      const verdict = marks.slice(k + 1).find((e) => e.kind === 'phase' || (e.kind === 'state' && e.data.state === 'stuck'));
      if (verdict?.kind === 'state') lag.push(Date.parse(verdict.at) - deadline);
      else censored++;
    }
  }
  const bindLag: number[] = [];
  for (const [i, at] of bindAt) {
    const ready = (await allEvents(c, `f${i}`, 'state')).find((e) => e.data.state === 'ready');
    if (ready) bindLag.push(Date.parse(ready.at) - at);
  }
  return {
    stallMs: o.stallMs,
    windowS: o.ms / 1000,
    stuckLag: summarize(lag),
    stuckClients: stuck.length,
    stuckCensored: censored,
    censoredAfterMs: cycleMs - o.stallMs,
    bindToReady: summarize(bindLag),
    bindMissed: bind.length - bindLag.length,
  };
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
        // Each batch asks for its ack at once (as a probe waiting on it does): the window is
        // refilled by acks, which otherwise come with the collector's liveness tick.
        const buf = encodeMessage({ type: 'events', events: evs, sentAt: t, ackNow: true });
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
