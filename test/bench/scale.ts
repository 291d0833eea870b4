// Issue 17's collector-scale figures, measured together and written as one BENCHMARKS.md
// section (collector-load.ts does the measuring):
//   - one collector with 5,000 light probe sessions at 1 Hz, half ready and half booting:
//     CPU and RSS over a quiet window; then, under the same load, stuck verdict lag and
//     bind → ready (a few of the booting sandboxes cycling into stuck, others binding), and
//     the readiness API at 1,000 requests/s next to /healthz at the same rate;
//   - 20,000 sessions asked for, bounded (setup deadline, fixed window), always profiled:
//     what it reached, CPU, RSS, event-loop delay, descriptors, and the first limit named
//     from those figures and the profile (first-limit.ts).
// The 5,000-session collector is profiled after its figures are measured (the same process,
// another quiet window and readiness run: collector-load.ts's profileTail); where a target
// is missed, the section says where the main thread's time went. About 5 minutes in all on
// a quiet machine (registering and connecting are most of it).

import fs from 'node:fs';
import os from 'node:os';
import { HEARTBEAT_INTERVAL_MS } from '@vsockdiag/proto';
import path from 'node:path';
import { measureFleet, type FleetFigure } from './collector-load.js';
import type { ProfileDigest } from './cpu-profile.js';
import { digestRows, entries, share } from './fleet.js';
import { firstLimit, LOOP_BEHIND_MS, SQLITE_DOMINANT_PCT, type LimitVerdict } from './first-limit.js';

type Progress = (msg: string) => void;

export const SCALE_TARGETS = {
  sessions: 5000,
  cpuPct: 50,
  rssMiB: 400,
  readinessRate: 1000,
  readinessP99Ms: 5,
  stuckLagP99Ms: 50,
  bindToReadyP99Ms: 100,
  bigSessions: 20_000,
  /** The 20,000-session run: registering and connecting each stop at a deadline, then the window. */
  bigSetup: { registerMs: 75_000, connectMs: 45_000 },
  bigWindowS: 30,
} as const;

/** A short stall threshold: the cycling sandboxes turn stuck often. It changes nothing for
 *  the rest of the fleet (no target: booting; bound: ready; neither has a stall timer). */
const STALL_MS = 1000;
/** The readiness thread on, as a dense host runs it (docs/orchestrator.md): the readiness
 *  target is its answers; the main API's are measured beside them. */
const ARGS = ['--stall-after', `${STALL_MS}ms`, '--start-deadline', '1h', '--readiness-http', '127.0.0.1:0'];
/** The 20,000-session run keeps its sandboxes in their first state (no stall), thread on too. */
const BIG_ARGS = ['--stall-after', '1h', '--start-deadline', '1h', '--readiness-http', '127.0.0.1:0'];

export interface ScaleBench {
  loadavg: { start: number[]; end: number[] };
  fleet: FleetFigure;
  met: { cpu: boolean; rss: boolean; readiness: boolean; stuckLag: boolean; bindToReady: boolean };
  big: FleetFigure;
  memAvailableMiB: number;
  sqlitePct: number;
  limit: LimitVerdict | null;
}

/** Share (% of busy time) of the SQLite writer: the store's calls, better-sqlite3 included. */
export const sqliteShare = (d: ProfileDigest) => share(d.byFile, 'collector/store.ts', 'better-sqlite3');

function memAvailableMiB(): number {
  return Number(/^MemAvailable:\s+(\d+)/m.exec(fs.readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? Number.NaN) / 1024;
}

export async function measureScaleBench(progress: Progress): Promise<ScaleBench> {
  const T = SCALE_TARGETS;
  const start = os.loadavg();
  const profRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-prof-'));
  try {
    const fleet = await measureFleet(
      T.sessions,
      {
        windowS: 15,
        latencySamples: 0,
        args: ARGS,
        verdicts: { stuck: 16, bind: 60, ms: 15_000, stallMs: STALL_MS },
        readiness: { rate: T.readinessRate, totalMs: 10_000, blocks: 10 },
        cpuProfDir: path.join(profRoot, 'fleet'),
        profileTail: { windowS: 10, readiness: { rate: T.readinessRate, totalMs: 6000, blocks: 6 } },
      },
      progress,
    );
    return await withBig(fleet, profRoot, start, progress);
  } finally {
    fs.rmSync(profRoot, { recursive: true, force: true });
  }
}

async function withBig(fleet: FleetFigure, profRoot: string, start: number[], progress: Progress): Promise<ScaleBench> {
  const T = SCALE_TARGETS;
  const v = fleet.verdicts!;
  const r = readinessFigure(fleet);
  // A fleet that did not all connect, or that the collector cut off (silent for 5 s when its
  // loop falls behind), is a lighter load: its CPU and RSS meet nothing.
  const whole = wholeFleet(fleet);
  const met = {
    cpu: fleet.cpuPct <= T.cpuPct && whole,
    rss: fleet.rssMiB <= T.rssMiB && whole,
    readiness: r.latency.p99 <= T.readinessP99Ms && r.rate >= T.readinessRate * 0.95,
    stuckLag: v.stuckLag.p99 <= T.stuckLagP99Ms && v.stuckCensored === 0,
    bindToReady: v.bindToReady.p99 <= T.bindToReadyP99Ms && v.bindMissed === 0,
  };
  for (const line of missedLines(fleet, met)) progress(`scale: target missed: ${line}`);
  {
    const mem = memAvailableMiB();
    progress(
      `${T.bigSessions} sessions asked for, profiled: ${T.bigSetup.registerMs / 1000} s to register, ${T.bigSetup.connectMs / 1000} s to connect, a ${T.bigWindowS} s window`,
    );
    const big = await measureFleet(
      T.bigSessions,
      { windowS: T.bigWindowS, latencySamples: 0, fitFds: true, setup: T.bigSetup, cpuProfDir: path.join(profRoot, 'big'), args: BIG_ARGS },
      progress,
    );
    const bw = big.profile?.window;
    const sqlitePct = bw ? sqliteShare(bw.digest) : Number.NaN;
    const busy = (f: FleetFigure | undefined) =>
      f?.profile ? (f.profile.window.digest.busyMs / f.profile.window.digest.totalMs) * 100 : undefined;
    // A window without one loop-delay sample had every turn of the loop longer than itself.
    const loopP99 = (w: NonNullable<FleetFigure['profile']>['window']) => (w.loop.count ? w.loop.p99 : w.digest.totalMs);
    const runs = [
      {
        sessions: fleet.connected,
        busyPct: busy(fleet) ?? fleet.cpuPct,
        ...(fleet.profile ? { loopP99Ms: loopP99(fleet.profile.window) } : {}),
      },
      ...(bw ? [{ sessions: big.connected, busyPct: busy(big)!, loopP99Ms: loopP99(bw) }] : []),
    ];
    const limit = big.connected
      ? firstLimit({
          requested: big.requested,
          sessions: big.connected,
          fds: big.fds,
          rssMiB: { atStart: big.startRssMiB, atEnd: big.rssMiB },
          memAvailableMiB: mem,
          runs,
          sqlitePct: Number.isNaN(sqlitePct) ? 0 : sqlitePct,
        })
      : null;
    if (limit) progress(`scale: ${T.bigSessions} sessions: first limit ${limit.name} at ~${limit.atSessions} sessions`);
    // Profiles are summarised already; drop the (removed) directories.
    for (const f of [fleet, big]) if (f.profile) f.profile.file = path.basename(f.profile.file);
    return { loadavg: { start, end: os.loadavg() }, fleet, met, big, memAvailableMiB: mem, sqlitePct, limit };
  }
}

// ---------------------------------------------------------------- markdown

const n0 = (v: number, d = 0) => v.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const ms = (v: number) => (v >= 100 ? n0(v) : n0(v, 1));
const met = (ok: boolean) => (ok ? 'met' : '**not met**');
const la = (l: number[]) => l.map((x) => x.toFixed(1)).join(' / ');
const x = (measured: number, target: number) => `${n0(measured / target, 2)}×`;

const wholeFleet = (f: FleetFigure) => f.connected === f.requested && f.closed === 0;

/** The answers the readiness target is judged on: the readiness thread's. */
const readinessFigure = (f: FleetFigure) => f.readiness!.thread ?? f.readiness!.readiness;

function missedLines(f: FleetFigure, m: ScaleBench['met']): string[] {
  const T = SCALE_TARGETS;
  const v = f.verdicts!;
  const r = readinessFigure(f);
  const out: string[] = [];
  const whole = wholeFleet(f)
    ? ''
    : ` (not the whole fleet: ${n0(f.connected)} of ${n0(f.requested)} connected, ${n0(f.closed)} sessions closed by the collector)`;
  if (!m.cpu) out.push(`collector CPU with ${n0(f.connected)} sessions ${n0(f.cpuPct, 1)} % of a core, target ≤ ${T.cpuPct} %${whole}`);
  if (!m.rss) out.push(`collector RSS with ${n0(f.connected)} sessions ${n0(f.rssMiB)} MiB, target ≤ ${T.rssMiB} MiB${whole}`);
  if (!m.readiness) {
    out.push(
      `readiness (thread) p99 ${ms(r.latency.p99)} ms > ${T.readinessP99Ms} ms (at ${n0(r.rate)}/s of ${n0(T.readinessRate)}/s asked)`,
    );
  }
  if (!m.stuckLag) {
    out.push(
      `stuck verdict lag p99 ${ms(v.stuckLag.p99)} ms > ${T.stuckLagP99Ms} ms (${v.stuckCensored} verdicts later than ${v.censoredAfterMs} ms)`,
    );
  }
  if (!m.bindToReady) out.push(`bind → ready p99 ${ms(v.bindToReady.p99)} ms > ${T.bindToReadyP99Ms} ms (${v.bindMissed} never ready)`);
  return out;
}

const codes = (st: Record<string, number>) =>
  Object.entries(st)
    .map(([k, c]) => `${n0(c)} × ${k}`)
    .join(', ');

const states = (f: FleetFigure) =>
  Object.entries(f.states)
    .map(([k, c]) => `${n0(c)} ${k}`)
    .join(', ');

export function scaleSection(b: ScaleBench): string {
  const T = SCALE_TARGETS;
  const f = b.fleet;
  const v = f.verdicts!;
  const { readiness: mainApi, healthz: h, runDelayPct } = f.readiness!;
  const r = readinessFigure(f);
  const stat = (s: { n: number; p50: number; p99: number; max: number }) =>
    `p50 ${ms(s.p50)} / p99 ${ms(s.p99)} / max ${ms(s.max)} ms (n ${s.n})`;
  let out = `
## One collector for ${n0(T.sessions)} and ${n0(T.bigSessions)} sandboxes

Same machine, one run (\`node test/run-ts.mjs test/bench/scale-only.ts\` runs this section alone). Load average
(1/5/15 min) ${la(b.loadavg.start)} at the start of this section and ${la(b.loadavg.end)} at its end, on ${os.cpus().length} cores; the
collector's main thread was runnable but waiting for a CPU ${n0(f.runDelayPct, 1)} % of the quiet window and ${n0(runDelayPct.collector, 1)} % of the
readiness run, which every latency here includes.

| ${n0(f.connected)} of ${n0(f.requested)} sessions connected, at 1 Hz (at the window's end: ${states(f)}) | measured | baseline in the same run | ratio to target | target |
|---|---|---|---|---|
| collector CPU, % of one core (${n0(f.windowS)} s, no API traffic; ${n0(f.eventsPerS)} events/s in) | ${n0(f.cpuPct, 1)} % | the clients' process, the other end of the same sessions: ${n0(f.clientsCpuPct, 1)} % | ${x(f.cpuPct, T.cpuPct)} | ≤ ${T.cpuPct} %: ${met(b.met.cpu)} |
| collector RSS at the window's end | ${n0(f.rssMiB, 1)} MiB (peak ${n0(f.hwmMiB, 1)}) | at start-up, no sandboxes: ${n0(f.startRssMiB, 1)} MiB | ${x(f.rssMiB, T.rssMiB)} | ≤ ${T.rssMiB} MiB: ${met(b.met.rss)} |
| GET /v1/sandboxes/:id/readiness from the readiness thread (\`--readiness-http\`) at ${n0(T.readinessRate)}/s (random id; achieved ${n0(r.rate)}/s; ${codes(r.statuses)}) | ${stat(r.latency)} | the same route on the main API at the same rate (achieved ${n0(mainApi.rate)}/s; ${codes(mainApi.statuses)}): ${stat(mainApi.latency)}; GET /healthz there (achieved ${n0(h.rate)}/s; ${codes(h.statuses)}): ${stat(h.latency)} | ${x(r.latency.p99, T.readinessP99Ms)} | ≤ ${T.readinessP99Ms} ms p99: ${met(b.met.readiness)} |
| stuck verdict lag: \`stuck\` − (last phase + ${n0(v.stallMs)} ms stall-after) | ${stat(v.stuckLag)}; ${v.stuckCensored} later than ${n0(v.censoredAfterMs)} ms | the threshold itself, ${n0(v.stallMs)} ms: p99 verdict at ${n0((v.stallMs + v.stuckLag.p99) / v.stallMs, 3)} × it | ${x(v.stuckLag.p99, T.stuckLagP99Ms)} | ≤ ${T.stuckLagP99Ms} ms p99: ${met(b.met.stuckLag)} |
| bind → ready: the client's write of its bound listener → the collector's \`ready\` | ${stat(v.bindToReady)}; ${v.bindMissed} never ready | — | ${x(v.bindToReady.p99, T.bindToReadyP99Ms)} | ≤ ${T.bindToReadyP99Ms} ms p99: ${met(b.met.bindToReady)} |

How: the fleet of the section above (a real collector, light probes in a child process on their own Unix sockets, hello
\`ready\` or \`booting\`, one small batch a second each and, as the probe's link does, no heartbeat while it sends more often than every ${n0(HEARTBEAT_INTERVAL_MS / 1000)} s), here with \`--stall-after ${n0(v.stallMs)}ms\`. Registered in
${n0(f.registerS, 1)} s, connected in ${n0(f.connectS, 1)} s. After the quiet window, for ${n0(v.windowS)} s while the fleet keeps streaming:
${v.stuckClients} booting sandboxes get a target that never binds and a \`phase\` every ${n0(v.stallMs + v.censoredAfterMs)} ms, so each goes stuck, back to
starting and stuck again; the lag is from the sandbox's history (both times on the collector's clock, as in the first
table); a verdict not in by the next phase counts as later than ${n0(v.censoredAfterMs)} ms. Spread over the same ${n0(v.windowS)} s,
${v.bindToReady.n + v.bindMissed} other booting sandboxes get a target and its bound listener in one batch; bind → ready is from the client's
wall clock just after that write to the \`ready\` state event (the collector's wall clock, the same host clock, 1 ms steps),
so it includes the trip over the socket and any wait behind the event loop, not an API round trip. Then readiness from
the readiness thread, readiness from the main API and the main API's /healthz, each at ${n0(T.readinessRate)} requests/s on an
open-loop schedule, in blocks taken in turn, ${n0(r.seconds, 1)} s each
(a lean keep-alive HTTP/1.1 client, \`lean-http.ts\`, where node:http's own would cost a quarter of a core; a request not answered 2 s after its block's schedule ended counts as \`unanswered\`, its wait so far as
its latency, a lower bound; this process, the measuring client, at nice ${f.readiness!.clientNice} so that a reply waiting for it to get a CPU is not
counted as the collector's latency: worst send lag ${ms(Math.max(r.maxSendLagMs, h.maxSendLagMs))} ms, run-queue wait ${n0(runDelayPct.bench, 1)} %).
Sessions the collector closed during the run: ${n0(f.closed)}${
    f.closed
      ? ' (the collector closes a session it has not heard from for 5 s, and with its event loop seconds behind, heartbeats wait unread; CPU and RSS count as met only with the whole fleet)'
      : ''
  }.
`;
  out += bigSection(b);
  out += profileSection(b);
  return out;
}

function bigSection(b: ScaleBench): string {
  const T = SCALE_TARGETS;
  const g = b.big;
  const w = g.profile?.window;
  const busyPct = w ? (w.digest.busyMs / w.digest.totalMs) * 100 : Number.NaN;
  const l = b.limit;
  const cut = g.requested - g.sessions;
  const rows = [
    `| sessions | ${n0(g.requested)} asked for${cut ? `; ${n0(g.sessions)} fit the collector's ${n0(g.fds.limit)} descriptors (2 each + ${n0(g.fds.limit - 2 * g.sessions)} spare)` : ''}; ${n0(g.registered)} registered in ${n0(g.registerS, 1)} s, ${n0(g.connected)} connected in ${n0(g.connectS, 1)} s (${n0(g.connectCut)} not tried by the ${T.bigSetup.connectMs / 1000} s deadline; registering stops at ${T.bigSetup.registerMs / 1000} s); ${states(g)} |`,
    `| collector CPU, % of one core (${n0(g.windowS)} s, no API traffic, profiler on) | ${n0(g.cpuPct, 1)} %; run-queue wait ${n0(g.runDelayPct, 1)} %; the clients' process ${n0(g.clientsCpuPct, 1)} %; ${n0(g.eventsPerS)} events/s in |`,
    `| collector RSS | ${n0(g.rssMiB, 1)} MiB (peak ${n0(g.hwmMiB, 1)}); ${n0(g.startRssMiB, 1)} MiB at start-up; ${n0(b.memAvailableMiB)} MiB available on the machine |`,
    `| event-loop delay in the window (10 ms sampling) | ${w ? (w.loop.count ? `p50 ${ms(w.loop.p50)} / p99 ${ms(w.loop.p99)} / max ${ms(w.loop.max)} ms (${n0(w.loop.count)} samples)` : 'no sample: every turn of the loop took longer than the window') : `no profile (${g.profileError ?? 'unknown'})`} |`,
    `| main thread busy (profile) | ${w ? `${n0(busyPct, 1)} % of the window; GC ${n0((w.digest.gcMs / w.digest.busyMs) * 100, 1)} % of that, the SQLite writer (store.ts + better-sqlite3) ${n0(b.sqlitePct, 1)} %` : '—'} |`,
    `| descriptors | ${n0(g.fds.atEnd)} open at the window's end, ${n0(g.fds.atStart)} before any sandbox; limit ${n0(g.fds.limit)} |`,
    `| sessions the collector closed during the run | ${n0(g.closed)} |`,
  ];
  const limitText = l
    ? `**First limit: ${l.name}**, ${l.reached ? 'reached' : 'not reached'} by the ${n0(g.requested)} asked for, at about ${n0(l.atSessions)} sessions. Each limit's fleet
size, extrapolated linearly from this run's figures (test/bench/first-limit.ts): ${l.candidates
        .map((c) => `${c.name} ~${n0(c.atSessions)}`)
        .join(', ')}. Descriptors: 2 per session (its listener and its connection) against the limit; memory: RSS per session against
what the machine has available; event loop: sessions × 100 / busy % of the collector's main thread, the lowest over the
${n0(b.fleet.connected)}-session load${b.fleet.profile ? ' (its profiled window)' : ' (its CPU %)'} and this one, a loop with p99 delay over ${LOOP_BEHIND_MS} ms counting as saturated at its own
size; it is named SQLite when the writer takes ≥ ${SQLITE_DOMINANT_PCT} % of the busy time.${
        l.name === 'file descriptors'
          ? ` The limit is the process's \`ulimit -n\` (make bench raises the soft limit to the hard one, ${n0(g.fds.limit)} here); the shipped unit (deploy/host/systemd/vsockdiag-collector.service) sets \`LimitNOFILE=65536\`, room for ~32,000 sessions.`
          : ''
      }`
    : `No session connected: ${g.profileError ?? 'see the progress lines'}.`;
  let out = `
| ${n0(T.bigSessions)} sessions asked for, bounded | figure |
|---|---|
${rows.join('\n')}

${limitText}
`;
  if (w) {
    out += `
| ${n0(w.digest.totalMs / 1000)} s with ${n0(g.connected)} sessions at 1 Hz, profiled | where |
|---|---|
${digestRows('window', w.digest, w.loop)}
`;
  }
  return out;
}

function profileSection(b: ScaleBench): string {
  const missed = Object.entries(b.met)
    .filter(([, ok]) => !ok)
    .map(([k]) => k);
  if (missed.length === 0) return `\nEvery ${n0(SCALE_TARGETS.sessions)}-session target was met.\n`;
  const p = b.fleet;
  let out = `
### ${n0(SCALE_TARGETS.sessions)} sessions: targets missed, and where the time goes

Missed in this run: ${missedLines(b.fleet, b.met).join('; ')}. After its figures were measured, the same collector, with the
same fleet, was profiled over another quiet window and readiness run (the inspector's sampling profiler, 1 ms, wall clock:
a thread waiting for a CPU is charged to whatever it was running; event-loop delay sampled every 10 ms).
`;
  if (!p.profile || !p.tail) return `${out}\nThe profiled run wrote no profile (${p.profileError ?? 'unknown'}).\n`;
  const w = p.profile.window;
  out += `
| ${n0(w.digest.totalMs / 1000)} s at 1 Hz, no API traffic (CPU ${n0(p.tail.cpuPct, 1)} % of a core with the profiler on) | where |
|---|---|
${digestRows('window', w.digest, w.loop)}
| the SQLite writer (store.ts + better-sqlite3) | ${n0(sqliteShare(w.digest), 1)} % of the busy time |
`;
  const rd = p.profile.readiness;
  const tr = p.tail.readiness;
  if (rd && tr) {
    const thread = tr.thread ? `${ms(tr.thread.latency.p99)} ms p99 from the thread, ` : '';
    out += `
| readiness + /healthz at ${n0(SCALE_TARGETS.readinessRate)}/s each (${thread}${ms(tr.readiness.latency.p99)} / ${ms(tr.healthz.latency.p99)} ms p99 from the main API, with the profiler on) | where (the main thread) |
|---|---|
${digestRows('readiness run', rd.digest, rd.loop)}
| inclusive, collector functions | ${entries(rd.digest.inclusive, 10)} |
`;
  }
  return out;
}
