// What the probe itself costs, under load: 500 idle processes and 10,000 TCP sockets.
//
// 1. measureProbeMicro: one namespace (`unshare --net --pid --fork --mount-proc`) holding the
//    load, a listener on :49983 owned by a process named like the target (fake-envd), and
//    probe-micro.ts (bundled from guest-probe/src with esbuild) timing one steady-state sample,
//    one census, and the baselines the probe avoids per tick (/proc/net/tcp, /proc/*/comm).
// 2. measureProbeCpu: the real bundled probe in two loaded sandboxes side by side, one whose
//    fake envd hangs before binding (the probe stays at the 40 ms boot interval) and one
//    healthy (1 Hz), both streaming to a real collector through the emulated vsock. CPU from
//    /proc/<pid>/stat over a bounded window, next to an idle Node process measured alike.
//
// Everything runs in namespaces created here, traffic only on their loopback; every process
// started here is killed by pid. Nothing is asserted: figures only.

import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '@vsockdiag/proto';
import { GUEST_ENV, PROBE_ENV, ROOT, startCollector, waitForState, type CollectorProcess } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { REQUIRE_BANNER, bundleForNode } from './bundle.js';
import { buildFakeEnvd } from '../harness/fake-envd.js';
import { FirecrackerVsock } from '../harness/firecracker.js';
import { descendants, namespacesAvailable, probeCommand } from '../harness/sandbox.js';
import { spawnTethered } from '../harness/tether.js';
import { anonBreakdown, cpuMs, statusFields, threadCpuMs, type AnonBreakdown } from './proc.js';

export const LOAD = { processes: 500, connections: 5000 } as const;
const TARGET = 'fake-envd';
const FIXTURE = path.join(ROOT, 'test/bench/fixtures/socket-load.mjs');
const PROBE_ADDON = path.join(ROOT, 'guest-probe/dist/vsockdiag.node');

type Progress = (msg: string) => void;

function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** Shell lines that raise the fd limit, start the idle processes and the socket load, and
 *  wait (at most 60 s) until every connection is open. Background pids collect in $PIDS. */
function loadLines(dir: string, processes: number, connections: number): string[] {
  const ready = path.join(dir, 'load.ready');
  return [
    'set -e',
    'ip link set lo up',
    'ulimit -n "$(ulimit -Hn)"',
    'set +e',
    'PIDS=""',
    // sleep bounds itself (600 s); one fork+exec each, no shell per process.
    `i=0; while [ $i -lt ${processes} ]; do sleep 600 & PIDS="$PIDS $!"; i=$((i+1)); done`,
    `${shq(process.execPath)} ${shq(FIXTURE)} ${connections} ${shq(ready)} 600 & PIDS="$PIDS $!"`,
    `i=0; while [ ! -e ${shq(ready)} ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done`,
    `[ -e ${shq(ready)} ] || { echo 'bench: socket load not ready after 60 s' >&2; kill -9 $PIDS; exit 1; }`,
  ];
}

interface NsProcess {
  proc: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
  /** Kills every descendant and the namespace's unshare, by pid. */
  stop: () => Promise<void>;
}

function startNamespace(script: string, onLine?: (line: string) => void): NsProcess {
  // Killed with this process should it die before stop(), with its whole namespace (tether.ts).
  // A guest's environment, not this process's (GUEST_ENV says why).
  const proc = spawnTethered(['unshare', '--net', '--pid', '--fork', '--mount-proc', '--kill-child=SIGKILL', '--', 'sh', script], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: GUEST_ENV,
  });
  let output = '';
  let partial = '';
  const onData = (d: Buffer) => {
    const text = d.toString();
    output += text;
    if (!onLine) return;
    partial += text;
    const lines = partial.split('\n');
    partial = lines.pop()!;
    for (const l of lines) onLine(l);
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  const stop = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    for (const p of [...descendants(proc.pid!), proc.pid!]) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    await exited;
  };
  return { proc, output: () => output, exited, stop };
}

function buildMicro(): string {
  const outfile = path.join(ROOT, 'test/.build/probe-micro.mjs');
  bundleForNode(path.join(ROOT, 'test/bench/probe-micro.ts'), outfile, { banner: REQUIRE_BANNER });
  // The addon is looked for beside the running script first (native.ts).
  fs.copyFileSync(PROBE_ADDON, path.join(path.dirname(outfile), 'vsockdiag.node'));
  return outfile;
}

export interface MicroStat {
  n: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

export interface ProbeMicro {
  load: {
    processes: number;
    tcpInUse: number | null;
    timeWait: number | null;
    censusTotal: number;
    censusByState: Record<string, number>;
    censusTop: Array<{ address: string; port: number; count: number }>;
    procNetTcpLines: number;
  };
  listenerSource: string;
  rounds: number;
  elapsedMs: number;
  us: Record<'sample' | 'target' | 'listener' | 'sockstat' | 'census' | 'tcp' | 'tcpAll' | 'scan', MicroStat>;
}

/** Part 1: µs per call of one sample, one census and the baselines, in a loaded namespace. */
export async function measureProbeMicro(progress: Progress): Promise<ProbeMicro> {
  if (!namespacesAvailable()) throw new Error('the probe benchmark needs network + PID namespaces (root and unshare)');
  const envd = await buildFakeEnvd();
  const micro = buildMicro();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-pm-'));
  const out = path.join(dir, 'micro.json');
  const lines = [
    ...loadLines(dir, LOAD.processes, LOAD.connections),
    'echo "bench: load up: $(ls /proc | grep -c "^[0-9]") processes, $(grep "^TCP:" /proc/net/sockstat)" >&2',
    // The listener the probe looks for, owned by a process named like the target.
    `${shq(envd)} -addr 0.0.0.0 -port ${DEFAULTS.expectPort} & PIDS="$PIDS $!"`,
    `${shq(process.execPath)} ${shq(micro)} ${shq(out)} ${TARGET} ${DEFAULTS.expectPort}`,
    'rc=$?',
    'kill -9 $PIDS',
    'exit $rc',
  ];
  const script = path.join(dir, 'micro.sh');
  fs.writeFileSync(script, `${lines.join('\n')}\n`);
  progress(`probe micro: ${LOAD.processes} processes + ${LOAD.connections * 2} sockets in a fresh namespace`);
  const ns = startNamespace(script, (l) => {
    if (/^(bench|micro): /.test(l)) progress(l.replace(/^(bench|micro): /, 'probe micro: '));
  });
  const timeout = setTimeout(() => void ns.stop(), 180_000);
  try {
    const code = await ns.exited;
    if (code !== 0 || !fs.existsSync(out)) throw new Error(`probe micro-benchmark failed (exit ${code}):\n${ns.output()}`);
    return JSON.parse(fs.readFileSync(out, 'utf8')) as ProbeMicro;
  } finally {
    clearTimeout(timeout);
    await ns.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Part 2: CPU share of the real probe over a window.

export interface LoadedSandbox {
  id: string;
  udsPath: string;
  ns: NsProcess;
  vm: FirecrackerVsock;
  dir: string;
  probePid: () => number | null;
  stop: () => Promise<void>;
}

/** For a probe in a hung sandbox: the boot rate for as long as it runs. By default a boot not
 *  ready after 30 s is sampled at --hung-interval (250 ms); "at boot rate" is what these
 *  figures measure. An environment variable, not a flag: builds from before it ignore it. */
export const HOLD_BOOT_RATE = { VSOCKDIAG_HUNG_INTERVAL: `${DEFAULTS.bootIntervalMs}ms` };

/** A simulated sandbox (as test/harness/sandbox.ts builds them) with the load started before
 *  the probe: idle processes, socket load, then the probe, then the fake envd. */
export async function startLoadedSandbox(
  root: string,
  id: string,
  envdArgs: string[],
  load: { processes: number; connections: number },
  /** The probe's command up to its flags (node, its options, the launcher); default the built probe. */
  probeHead?: string[],
  /** More of the probe's environment, over PROBE_ENV. */
  probeEnv: Record<string, string> = {},
): Promise<LoadedSandbox> {
  const envd = await buildFakeEnvd();
  const dir = path.join(root, id);
  fs.mkdirSync(dir, { recursive: true });
  const udsPath = path.join(dir, 'v.sock');
  const vm = new FirecrackerVsock({ udsPath, guestDir: dir, halfClose: 'firecracker' });
  await vm.start();
  await vm.exposeHostPort(DEFAULTS.vsockPort);
  const notify = path.join(dir, 'notify.sock');
  const probe = [
    'env',
    ...Object.entries({ ...PROBE_ENV, ...probeEnv }).map(([k, v]) => `${k}=${v}`),
    ...(probeHead ?? []),
    ...probeCommand(dir, notify, DEFAULTS.expectPort, TARGET).slice(probeHead ? 2 : 0),
  ];
  const lines = [
    ...loadLines(dir, load.processes, load.connections),
    `${probe.map(shq).join(' ')} &`,
    `i=0; while [ ! -S ${shq(notify)} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done`,
    `NOTIFY_SOCKET=${shq(notify)} ${[envd, '-addr', '0.0.0.0', '-port', String(DEFAULTS.expectPort), ...envdArgs].map(shq).join(' ')} &`,
    'wait',
  ];
  const script = path.join(dir, 'init.sh');
  fs.writeFileSync(script, `${lines.join('\n')}\n`);
  const ns = startNamespace(script);
  const probePid = () =>
    descendants(ns.proc.pid!).find((p) => {
      try {
        // Only the probe has the notify socket's path among its arguments (envd gets it in its environment).
        return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(`\0${notify}\0`);
      } catch {
        return false;
      }
    }) ?? null;
  const stop = async () => {
    await ns.stop();
    await vm.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  return { id, udsPath, ns, vm, dir, probePid, stop };
}

interface ProcSnapshot {
  at: number;
  cpuMs: number;
  threads: Map<number, number>;
  syscr: number;
  voluntaryCtxt: number;
}

function snapshot(pid: number): ProcSnapshot {
  const io = fs.readFileSync(`/proc/${pid}/io`, 'utf8');
  return {
    at: performance.now(),
    cpuMs: cpuMs(pid),
    threads: threadCpuMs(pid),
    syscr: Number(/^syscr:\s+(\d+)/m.exec(io)?.[1] ?? Number.NaN),
    voluntaryCtxt: statusFields(pid, ['voluntary_ctxt_switches'] as const).voluntary_ctxt_switches,
  };
}

function memory(pid: number): { rssAnonKb: number; rssFileKb: number; vmRssKb: number; threads: number; anon: AnonBreakdown } {
  const s = statusFields(pid, ['RssAnon', 'RssFile', 'VmRSS', 'Threads'] as const);
  return { rssAnonKb: s.RssAnon, rssFileKb: s.RssFile, vmRssKb: s.VmRSS, threads: s.Threads, anon: anonBreakdown(pid) };
}

export interface CpuFigure {
  /** utime+stime over the window, as % of one core. */
  cpuPct: number;
  cpuMs: number;
  windowS: number;
  /** read-type syscalls (/proc/<pid>/io syscr) per second over the window. */
  syscrPerS: number;
  /** Voluntary context switches of the main thread per second (≈ event-loop wake-ups). */
  wakeupsPerS: number;
  rssAnonKb: number;
  rssFileKb: number;
  vmRssKb: number;
  threads: number;
  /** Where the CPU went (schedstat, ms over the window): the main thread (the event loop),
   *  and every other thread (V8's compiler and GC helpers, libuv's pool). */
  mainThreadMs: number;
  otherThreadsMs: number;
  /** RssAnon by kind at the end (smaps). */
  anon: AnonBreakdown;
}

export interface ProbeCpu {
  load: { processes: number; sockets: number; perSandbox: true };
  windowS: number;
  bootRate: CpuFigure;
  steady: CpuFigure;
  idleNode: CpuFigure;
  /** Processes in the steady sandbox's namespace (what a /proc/* scan would read). */
  steadyNamespaceProcesses: number;
  /** syscr per steady tick; a /proc/* scan would be ≥ one read per process per tick. */
  steadyReadsPerTick: number;
  steadyScansProcPerTick: boolean;
}

function figure(a: ProcSnapshot, b: ProcSnapshot, pid: number): CpuFigure {
  const windowS = (b.at - a.at) / 1000;
  const used = b.cpuMs - a.cpuMs;
  let mainThreadMs = 0;
  let otherThreadsMs = 0;
  for (const [tid, ms] of b.threads) {
    const spent = ms - (a.threads.get(tid) ?? 0);
    if (tid === pid) mainThreadMs = spent;
    else otherThreadsMs += spent;
  }
  return {
    mainThreadMs,
    otherThreadsMs,
    cpuPct: (used / 1000 / windowS) * 100,
    cpuMs: used,
    windowS,
    syscrPerS: (b.syscr - a.syscr) / windowS,
    wakeupsPerS: (b.voluntaryCtxt - a.voluntaryCtxt) / windowS,
    ...memory(pid),
  };
}

/** Memory of the probes (and the idle Node) after a long run, with their CPU over it. */
export interface ProbeSoak {
  /** Seconds since the probes started. */
  afterS: number;
  bootRate: CpuFigure;
  steady: CpuFigure;
  idleNode: CpuFigure;
}

export interface ProbeCost {
  cpu: ProbeCpu;
  /** The same probes keep running: waits until they have run `totalS` seconds, measures, stops them. */
  soak(totalS: number, progress: Progress): Promise<ProbeSoak>;
  /** Ends everything now (idempotent; soak() calls it too). */
  stop(): Promise<void>;
}

/**
 * Part 2: the real probe's CPU share at boot rate and at 1 Hz over a window, next to an idle
 * Node; then the same processes keep running (while the rest of the benchmarks run) until
 * soak() reads their memory after the issue's 10 minutes.
 */
export async function startProbeCost(windowS: number, progress: Progress): Promise<ProbeCost> {
  if (!namespacesAvailable()) throw new Error('the probe benchmark needs network + PID namespaces (root and unshare)');
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-pc-'));
  let c: CollectorProcess | undefined;
  const sandboxes: LoadedSandbox[] = [];
  let idle: ChildProcess | undefined;
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    if (idle?.pid && idle.exitCode === null && idle.signalCode === null) {
      const gone = new Promise((r) => idle!.once('exit', r));
      process.kill(idle.pid, 'SIGKILL');
      await gone;
    }
    for (const sb of sandboxes) {
      await c?.api('DELETE', `/v1/sandboxes/${sb.id}`).catch(() => undefined);
      await sb.stop();
    }
    if (c) {
      await c.stop();
    }
    fs.rmSync(root, { recursive: true, force: true });
  };
  try {
    // The hung sandbox must stay a booting one for the whole run: with the default stall and
    // start deadlines the collector would call it stuck and act on that (automatic dumps
    // through the probe), which is not the boot-rate cost being measured.
    c = await startCollector({ args: ['--stall-after', '3h', '--start-deadline', '3h'] });
    progress(`probe cpu: starting two sandboxes, each ${LOAD.processes} processes + ${LOAD.connections * 2} sockets`);
    const started = await Promise.allSettled([
      startLoadedSandbox(root, 'hung', ['-hang-in', 'cgroup-manager'], LOAD, undefined, HOLD_BOOT_RATE),
      startLoadedSandbox(root, 'healthy', [], LOAD),
    ]);
    for (const r of started) if (r.status === 'fulfilled') sandboxes.push(r.value);
    for (const r of started) if (r.status === 'rejected') throw r.reason;
    const [hung, healthy] = sandboxes;
    idle = spawn(process.execPath, ['-e', 'setInterval(()=>{},1000); setTimeout(()=>process.exit(0), 3_600_000)'], {
      stdio: 'ignore',
      env: GUEST_ENV,
    });
    for (const sb of sandboxes) await c.api('PUT', `/v1/sandboxes/${sb.id}`, { udsPath: sb.udsPath });
    await waitForState(c, 'healthy', 'ready', 120_000);
    await waitForState(c, 'hung', 'starting', 120_000);
    const pids = await waitFor(
      'both probes',
      () => {
        const h = hung!.probePid();
        const s = healthy!.probePid();
        return h !== null && s !== null ? { hung: h, healthy: s } : null;
      },
      { timeoutMs: 10_000 },
    );
    // Let the healthy probe's first 1 Hz ticks and both probes' first census pass.
    await new Promise((r) => setTimeout(r, 3000));
    const nsProcs = descendants(healthy!.ns.proc.pid!).length;
    progress(`probe cpu: both probes up (hung: boot rate, healthy: 1 Hz); measuring for ${windowS} s`);
    const idlePid = idle.pid!;
    const startedAt = performance.now();
    const start = { hung: snapshot(pids.hung), healthy: snapshot(pids.healthy), idle: snapshot(idlePid) };
    const endAt = performance.now() + windowS * 1000;
    while (performance.now() < endAt) {
      await new Promise((r) => setTimeout(r, Math.min(15_000, endAt - performance.now())));
      const left = Math.max(0, Math.round((endAt - performance.now()) / 1000));
      if (left > 0) progress(`probe cpu: ${windowS - left}/${windowS} s`);
    }
    const alive = () => {
      for (const [sb, pid] of [
        [hung!, pids.hung],
        [healthy!, pids.healthy],
      ] as const) {
        if (!fs.existsSync(`/proc/${pid}/stat`)) {
          throw new Error(`the ${sb.id} sandbox's probe (pid ${pid}) exited; sandbox output:\n${sb.ns.output().slice(-4000)}`);
        }
      }
    };
    alive();
    const end = { hung: snapshot(pids.hung), healthy: snapshot(pids.healthy), idle: snapshot(idlePid) };
    const steady = figure(start.healthy, end.healthy, pids.healthy);
    const readsPerTick = steady.syscrPerS / (1000 / DEFAULTS.intervalMs);
    const cpu: ProbeCpu = {
      load: { processes: LOAD.processes, sockets: LOAD.connections * 2, perSandbox: true },
      windowS,
      bootRate: figure(start.hung, end.hung, pids.hung),
      steady,
      idleNode: figure(start.idle, end.idle, idlePid),
      steadyNamespaceProcesses: nsProcs,
      steadyReadsPerTick: readsPerTick,
      steadyScansProcPerTick: readsPerTick >= nsProcs,
    };
    const soak = async (totalS: number, report: Progress): Promise<ProbeSoak> => {
      try {
        for (;;) {
          const left = totalS - (performance.now() - startedAt) / 1000;
          if (left <= 0) break;
          report(`probe soak: ${Math.round(totalS - left)}/${totalS} s since the probes started`);
          await new Promise((r) => setTimeout(r, Math.min(30_000, left * 1000)));
        }
        alive();
        const last = { hung: snapshot(pids.hung), healthy: snapshot(pids.healthy), idle: snapshot(idlePid) };
        return {
          afterS: (performance.now() - startedAt) / 1000,
          bootRate: figure(start.hung, last.hung, pids.hung),
          steady: figure(start.healthy, last.healthy, pids.healthy),
          idleNode: figure(start.idle, last.idle, idlePid),
        };
      } finally {
        await stop();
      }
    };
    return { cpu, soak, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
