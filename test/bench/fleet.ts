// Issue 7's fleet figures, measured together and written as one BENCHMARKS.md section:
//   - probe exec → first frame at the collector, next to `node -e 0` (probe-startup.ts);
//   - the collector idle and with 1,000 light probe sessions at 1 Hz: CPU, RSS, ingest →
//     API latency (collector-load.ts); the collector's scale targets (5,000 and 20,000
//     sessions, the readiness API at 1,000/s) are scale.ts's section;
//   - one session's ingest throughput next to a raw Unix-socket relay of the same bytes;
//   - the automatic dump stored after the `stuck` verdict (auto-dumps.ts).
// Where a target is missed, the run profiles what missed (probe: an unminified build under
// --cpu-prof) and the section says where the time went. The digest helpers here
// (digestRows, entries, share) are scale.ts's too.
// Bounded: fixed counts, fixed windows (VSOCKDIAG_BENCH_FLEET_S, 10–60 s, default 20).

import os from 'node:os';
import { HEARTBEAT_INTERVAL_MS } from '@vsockdiag/proto';
import { measureAutoDumps } from './auto-dumps.js';
import { measureFleet, measureIngest, type FleetFigure, type IngestFigure } from './collector-load.js';
import type { ProfileDigest, ProfileEntry } from './cpu-profile.js';
import { measureProbeStartup, profileProbeStartup, type ProbeStartup, type ProbeStartupProfile } from './probe-startup.js';

type Progress = (msg: string) => void;

export const FLEET_TARGETS = {
  /** Issue 17: the probe starts about as fast as Node itself does. */
  startupRatio: 1.05,
  autoDumpP99Ms: 1000,
} as const;

export interface FleetBench {
  windowS: number;
  loadavg: { start: number[]; end: number[] };
  startup: ProbeStartup;
  ingest: IngestFigure;
  autoDumps: Awaited<ReturnType<typeof measureAutoDumps>>;
  /** The collector with no sandboxes, measured alike: the baseline of the fleet rows. */
  idle: FleetFigure;
  fleet: FleetFigure[];
  met: { startup: boolean; autoDump: boolean };
  /** Re-runs under a profiler, for the targets missed. */
  profiles: { startup?: ProbeStartupProfile };
}

/** Alternating rounds of the start-up series (about 20 s in all). The ratio's target is 5 %,
 *  and one exec's time moves by more than that with the host: the more rounds, the less the
 *  median moves with a few slow ones. */
const STARTUP_ROUNDS = 60;

export async function measureFleetBench(progress: Progress): Promise<FleetBench> {
  const windowS = Math.min(60, Math.max(10, Number(process.env.VSOCKDIAG_BENCH_FLEET_S ?? 20)));
  const start = os.loadavg();
  const startup = await measureProbeStartup(STARTUP_ROUNDS, progress);
  const ingest = await measureIngest(5, 5, 7 * 2 ** 20, progress);
  const autoDumps = await measureAutoDumps(20, 5, progress);
  // Baseline: the same collector with no sandboxes at all, measured alike.
  const idle = await measureFleet(0, { windowS: 10, latencySamples: 0 }, progress);
  const f1000 = await measureFleet(1000, { windowS, latencySamples: 100 }, progress);
  const met = {
    startup: startup.firstFrame.p50 / startup.nodeExit.p50 <= FLEET_TARGETS.startupRatio,
    autoDump: autoDumps.stuckToDump.p99 <= FLEET_TARGETS.autoDumpP99Ms,
  };
  const profiles: FleetBench['profiles'] = {};
  if (!met.startup) {
    progress('probe start-up missed its target: profiling it');
    profiles.startup = await profileProbeStartup(8, progress);
  }
  return { windowS, loadavg: { start, end: os.loadavg() }, startup, ingest, autoDumps, idle, fleet: [f1000], met, profiles };
}

// ---------------------------------------------------------------- markdown

const n0 = (v: number, d = 0) => v.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const ms = (v: number) => (v >= 100 ? n0(v) : n0(v, 1));
const met = (ok: boolean) => (ok ? 'met' : '**not met**');
const la = (l: number[]) => l.map((x) => x.toFixed(1)).join(' / ');

export function entries(list: ProfileEntry[], k = 8): string {
  return list
    .slice(0, k)
    .map((e) => `${e.name.replace(/\|/g, '\\|')} ${n0(e.pct, 1)} %`)
    .join('; ');
}

/** Share (% of busy time) of the entries of `list` whose name starts with one of `prefixes`. */
export function share(list: ProfileEntry[], ...prefixes: string[]): number {
  return list.filter((e) => prefixes.some((p) => e.name.startsWith(p))).reduce((a, e) => a + e.pct, 0);
}

/** The loop delay as read; a window in which the 10 ms timer never fired has no sample. */
function loopText(l: { p50: number; p99: number; max: number; count?: number }): string {
  if (l.count === 0) return '; event-loop delay: no sample (its 10 ms timer never fired in the window: every turn of the loop took longer)';
  return `; event-loop delay p50 ${ms(l.p50)} ms, p99 ${ms(l.p99)} ms, max ${ms(l.max)} ms (10 ms sampling${l.count !== undefined ? `, ${n0(l.count)} samples` : ''})`;
}

export function digestRows(title: string, d: ProfileDigest, loop?: { p50: number; p99: number; max: number; count?: number }): string {
  const lines = [
    `| ${title}: main thread busy | ${n0(d.busyMs)} ms of ${n0(d.totalMs)} ms${loop ? loopText(loop) : ''}; GC ${n0(d.gcMs)} ms |`,
    `| by own function (nearest collector/probe frame) | ${entries(d.byOwnFunction)} |`,
    `| by source file | ${entries(d.byFile)} |`,
    `| self time (leaf) | ${entries(d.self)} |`,
  ];
  if (d.longest.length) {
    lines.push(`| longest busy stretches | ${d.longest.map((l) => `${ms(l.ms)} ms (${l.top.replace(/\|/g, '\\|')})`).join('; ')} |`);
  }
  return lines.join('\n');
}

export function fleetSection(b: FleetBench): string {
  const s = b.startup;
  const [f1] = b.fleet as [FleetFigure];
  const ratio = (a: number, c: number) => `${n0(a / c, 2)}×`;
  const vsIdle = (f: FleetFigure) => (f.sessions ? ` (+${n0(f.cpuPct - b.idle.cpuPct, 1)})` : '');
  const rssVsIdle = (f: FleetFigure) => (f.sessions ? ` (+${n0(f.rssMiB - b.idle.rssMiB, 1)})` : '');
  const fleetRow = (f: FleetFigure, target: string) =>
    `| ${
      f.sessions
        ? `${n0(f.sessions)} (${Object.entries(f.states)
            .map(([k, v]) => `${n0(v)} ${k}`)
            .join(', ')})`
        : 'baseline: none (the idle collector)'
    } | ${n0(f.eventsPerS)} | ${n0(f.cpuPct, 1)} %${vsIdle(f)} | ${n0(f.runDelayPct, 1)} % | ${n0(f.rssMiB, 1)}${rssVsIdle(f)}, peak ${n0(f.hwmMiB, 1)} | ${
      f.ingestToApi.n ? `${ms(f.ingestToApi.p50)} / ${ms(f.ingestToApi.p99)} (n ${f.ingestToApi.n})` : '—'
    } | ${f.sessions ? `${n0(f.clientsCpuPct, 1)} %` : '—'} | ${f.sessions ? `${n0(f.registerS, 1)} s / ${n0(f.connectS, 1)} s` : '—'} | ${target} |`;
  const i = b.ingest;
  const ad = b.autoDumps.stuckToDump;

  let out = `
## Collector under load, probe start-up, dumps on stuck

Same machine, one run. The machine was not idle: load average (1/5/15 min) ${la(b.loadavg.start)} at the start of
this section and ${la(b.loadavg.end)} at its end, on ${os.cpus().length} cores; the run-queue wait columns say how long
the collector's main thread was runnable but waiting for a CPU, which every latency here includes.

| figure | runs | p50 ms | p99 ms | CPU ms per exec | baseline in the same run | ratio of medians (of CPU) | target |
|---|---|---|---|---|---|---|---|
| probe exec → first frame (its hello, ${n0(s.helloBytes)} bytes) at the collector's socket | ${s.rounds} | ${ms(s.firstFrame.p50)} | ${ms(s.firstFrame.p99)} | ${ms(s.cpuMs.probe)} | \`node -e 0\` exec → exit: p50 ${ms(s.nodeExit.p50)} ms, p99 ${ms(s.nodeExit.p99)} ms, CPU ${ms(s.cpuMs.node)} ms | ${ratio(s.firstFrame.p50, s.nodeExit.p50)} (${ratio(s.cpuMs.probe, s.cpuMs.node)}) | ≤ ${FLEET_TARGETS.startupRatio} ×: ${met(b.met.startup)} |
| probe exec → first byte | ${s.rounds} | ${ms(s.firstByte.p50)} | ${ms(s.firstByte.p99)} | — | same | ${ratio(s.firstByte.p50, s.nodeExit.p50)} | — |
| \`vsockdiag-probe --version\` exec → exit (loading the bundle, printing, exiting; no start-up work) | ${s.rounds} | ${ms(s.versionExit.p50)} | ${ms(s.versionExit.p99)} | ${ms(s.cpuMs.version)} | same | ${ratio(s.versionExit.p50, s.nodeExit.p50)} (${ratio(s.cpuMs.version, s.cpuMs.node)}) | — |

How: the shipped bundle (guest-probe/dist) with \`--connect unix:<a socket of this process> --listen off
--notify-socket off --kmsg off\` and a target that never appears; a server here notes the first byte and the
first whole frame, then kills the probe by pid. All three run in a guest's environment (systemd's PATH, and
the unit's \`MALLOC_ARENA_MAX=1\` for the probe), not this process's. The three series alternate, in rotating
order, after one warm-up of each. \`--version\` minus \`node -e 0\` is what loading the bundle costs, with what printing costs
(Node's stdout loads its streams, which the probe's hello goes out before: the hello is written on the raw fd,
before \`node:net\` and the streams load), so first frame minus \`--version\` (the probe's own work before its hello
less that) can be below zero. CPU per exec is the mean of this process's
children's user + system time (\`cutime + cstime\` from /proc/self/stat, each child waited for; 10 ms ticks summed
over the series): unlike the wall clock, it does not grow while a busy machine makes the process wait.

| sessions at 1 Hz (states) | events/s in | collector CPU, % of one core (over the baseline) | run-queue wait | RSS MiB (over the baseline) | ingest → API p50 / p99 ms | clients' CPU | register / connect | target |
|---|---|---|---|---|---|---|---|---|
${fleetRow(b.idle, '—')}
${fleetRow(f1, 'the 5,000-session targets: next section')}

How: a real collector (\`--stall-after 1h --start-deadline 1h\`, so nothing turns stuck), N sandboxes
registered through the API, each with its own udsPath (the collector listens on \`<udsPath>_52000\`), and N
light probes (test/harness/probe-client.ts) in one child process, each on its own Unix socket, speaking the
real protocol: hello (every second one with a target that is up and bound, so \`ready\`; the others \`booting\`),
one batch a second with a \`sockets\` totals event, at spread-out offsets, and, as the probe's link does, a heartbeat
only after ${n0(HEARTBEAT_INTERVAL_MS / 1000)} s with nothing sent (so none: the batches come first). After the
connection surge settles, a ${n0(f1.windowS)} s window with no API traffic (${n0(b.idle.windowS)} s for the idle baseline): CPU is utime + stime from
\`/proc/<pid>/stat\` (10 ms ticks), run-queue wait from \`/proc/<pid>/schedstat\`, RSS (\`VmRSS\`, peak \`VmHWM\`) at
its end. Then ingest → API: ${f1.ingestToApi.n} times, a random client sends a \`phase\` event with a unique name
(source \`log\`, so no state changes) and GET /v1/sandboxes/:id is polled every 5 ms until \`lastPhase\` shows it;
from the client's write to the answer that shows it, one wall clock (the two processes share it), so the
figure includes one API round trip and up to 5 ms of polling. Sessions the collector closed during the run:
${f1.closed}.

| one session, batches of ${i.eventsPerBatch} events, ${i.window} batches in flight | rounds | median | baseline in the same run | ratio | target |
|---|---|---|---|---|---|
| ingest: events stored and acked | ${i.rounds} | ${n0(i.eventsPerS)} events/s = ${n0(i.mbPerS, 2)} MB/s | a raw Unix-socket relay of the same bytes: ${n0(i.rawMbPerS)} MB/s | ${n0(i.ratio * 100, 2)} % of the relay (1 : ${n0(1 / i.ratio)}) | report the ratio |
| the collector's CPU per MB ingested | ${i.rounds} | ${n0(i.cpuMsPerMb)} ms/MB (a whole core would take ${n0(1000 / i.cpuMsPerMb, 1)} MB/s) | — | — | — |

How: one light probe (in this process) sends ${n0(i.eventsPerRound)} events (${n0(i.bytesPerRound / 2 ** 20, 1)} MiB; a mix of \`sockets\`, \`target.sample\`,
\`system\` and one-line \`log.lines\`, ${n0(i.meanEventBytes)} bytes each on the wire) as fast as acks allow (an ack comes only after the
SQLite commit; each batch asks for its ack at once, where the fleet's clients take theirs with the collector's
liveness tick, as probes do), timed from the first write to the last ack; a round stops at 5 s or 7 MiB, whichever first, because the
collector's per-sandbox budget (512 KiB/s, 8 MiB burst) cuts off a probe beyond that: one session's *sustained* ingest
is capped at 512 KiB/s by design, and this figure is what the collector itself can take. The baseline writes the very
same frames to a plain Unix socket read and discarded by another Node process, timed to its last byte. Rounds alternate
ingest and relay, each ingest round on a fresh sandbox; the collector's main thread waited for a CPU ${n0(i.runDelayPct, 1)} % of
the ingest time (median).

| figure | hung boots | p50 ms | p99 ms | max ms | baseline in the same run | target |
|---|---|---|---|---|---|---|
| automatic dump stored after the \`stuck\` verdict | ${ad.n} | ${ms(ad.p50)} | ${ms(ad.p99)} | ${ms(ad.max)} | — | ≤ 1 s p99: ${met(b.met.autoDump)} |

How: simulated sandboxes whose fake envd hangs in \`cgroup-manager\`, five at a time (their vsock devices in a
process of their own, each boot awaited with the readiness long-poll), one collector with
\`--stall-after ${b.autoDumps.stallMs}ms\`; per boot, the \`dump\` event with trigger \`auto\` minus the \`stuck\` state event in
/v1/sandboxes/:id/events (both recorded by the collector on its clock). Dumps taken: ${b.autoDumps.modes.join(', ')}; ${b.autoDumps.failed} failed.
`;
  out += profileSection(b);
  return out;
}

function profileSection(b: FleetBench): string {
  const s = b.startup;
  const missed = Object.entries(b.met)
    .filter(([, ok]) => !ok)
    .map(([k]) => k);
  if (missed.length === 0) return '\nEvery target of this section was met; nothing was profiled.\n';
  let out = `
### Targets missed, and where the time goes

Missed in this run: ${missed.join(', ')}. What missed was run again under a profiler. The sampling profiler samples
wall-clock time every 1 ms: a thread waiting for a CPU is charged to whatever it was running, and a busy stretch (no
idle sample) can span several turns of the event loop, so it bounds, rather than equals, how long a request waited.
`;
  const p = b.profiles.startup;
  if (p) {
    const d = p.digest;
    out += `
**Probe start-up** (the shipped layout, launcher + bundle + its code cache, built unminified, under \`node --cpu-prof\`,
${p.runs} runs, each until its first frame, each profile read up to the hello's write; exec → first frame p50 ${ms(p.firstFrame.p50)} ms with the profiler on; this bundle is
${n0(p.bundleBytes.profiled / 1024)} KiB against the shipped ${n0(p.bundleBytes.shipped / 1024)} KiB). Node's own modules the probe had loaded when it wrote its hello
that \`node -e 0\` does not load: ${p.builtinsBeforeHello.map((x) => `\`${x}\``).join(', ') || 'none'}.

| probe start-up, per run | where |
|---|---|
${digestRows('exec → hello written', d)}
| inclusive, probe functions | ${entries(d.inclusive, 10)} |

Reading: loading the bundle and printing (\`--version\` − \`node -e 0\`) costs ${ms(s.versionExit.p50 - s.nodeExit.p50)} ms wall, ${ms(s.cpuMs.version - s.cpuMs.node)} ms CPU;
first frame − \`--version\` is ${ms(s.firstFrame.p50 - s.versionExit.p50)} ms wall, ${ms(s.cpuMs.probe - s.cpuMs.version)} ms CPU (see above for why it can be below zero; the probe's CPU
counts until it is killed, after its hello). At
${FLEET_TARGETS.startupRatio} × the probe may add ${ms(s.nodeExit.p50 * (FLEET_TARGETS.startupRatio - 1))} ms to \`node -e 0\` here. In the profile, compiling Node's own modules
(\`compileForInternalLoader\`) is ${n0(share(d.self, 'compileForInternalLoader'), 1)} % of the main thread and compiling the bundle (\`Script\`, with the
code cache a lookup) ${n0(share(d.self, 'Script', 'compileFunction', 'wrapSafe'), 1)} %.
`;
  }
  return out;
}
