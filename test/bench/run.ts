// `make bench`: bounded benchmarks; writes BENCHMARKS.md and BENCHMARKS.json at the
// repository root. Figures are measured in this run, next to their baseline; nothing here
// is a pass/fail test (these machines are shared and noisy).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '@vsockdiag/proto';
import { ROOT } from '../harness/collector.js';
import { STALL_MS, measureVerdicts } from './verdicts.js';
import { dumpSection, measureDumps } from './dumps.js';
import { measureGoDump } from './go-dump.js';
import { fleetSection, measureFleetBench } from './fleet.js';
import { measureScaleBench, scaleSection } from './scale.js';
import { CENSUS_CPU_SHARE, CENSUS_EVERY_MS, censusPeriodMs } from '../../guest-probe/src/sockets.js';
import { BOOT_FAST_FOR_MS } from '../../guest-probe/src/sample-loop.js';
import { LOAD, measureProbeMicro, startProbeCost, type CpuFigure } from './probe-cost.js';

const BOOTS = Number(process.env.VSOCKDIAG_BENCH_BOOTS ?? 50);
/** The probe CPU window (s); bounded to 10–120. */
const CPU_WINDOW_S = Math.min(120, Math.max(10, Number(process.env.VSOCKDIAG_BENCH_CPU_S ?? 60)));
/** How long the probes run before their memory is read (the issue's 10 minutes); 60–1200 s. */
const SOAK_S = Math.min(1200, Math.max(60, Number(process.env.VSOCKDIAG_BENCH_SOAK_S ?? 600)));
/** Memory-read dumps (and pause-mode reads) of the 10,000-goroutine fake envd. */
const GO_DUMP_RUNS = 10;
/** Issue 17's targets for the probe's own cost: CPU at 1 Hz, and RssAnon after 10 minutes
 *  (both rates), absolute and as a ratio of idle node in the same run. */
const PROBE_TARGETS = { steadyCpuPct: 0.2, rssAnonMiB: 8, rssAnonRatio: 1.3 } as const;
const progress = (msg: string) => process.stderr.write(`bench: ${msg}\n`);

const machine = {
  cpus: os.cpus().length,
  cpuModel: os.cpus()[0]?.model ?? 'unknown',
  memoryGiB: Math.round(os.totalmem() / 2 ** 30),
  node: process.version,
  kernel: os.release(),
  date: new Date().toISOString(),
};
progress(`machine: ${machine.cpus} cores, ${machine.memoryGiB} GiB, node ${machine.node}`);

// The per-call figures first: a socket census walks the kernel's whole socket table, so it
// runs before the long-lived loaded sandboxes below add theirs.
const micro = await measureProbeMicro(progress);
// Two loaded sandboxes: the probes' CPU over a quiet window now; they keep running through
// the rest of the run, and their memory is read once they have run SOAK_S seconds.
const probeCost = await startProbeCost(CPU_WINDOW_S, progress);
const { verdicts, dumps, goDump, fleet, scale, soak } = await (async () => {
  try {
    const verdicts = await measureVerdicts(BOOTS, 5, progress);
    const dumps = await measureDumps(Number(process.env.VSOCKDIAG_BENCH_DUMPS ?? 100), 5, progress);
    // The same 10,000 goroutines read from the target's memory instead (go-dump.ts).
    const goDump = await measureGoDump(GO_DUMP_RUNS, GO_DUMP_RUNS, progress);
    // Probe start-up, the collector idle and under 1,000 sessions, one session's ingest,
    // automatic dumps; profiles what misses its target (fleet.ts).
    const fleet = await measureFleetBench(progress);
    // The collector under 5,000 sessions (CPU, RSS, readiness at 1,000/s, stuck lag, bind →
    // ready) and 20,000 asked for, with the first limit and the profiles (scale.ts).
    const scale = await measureScaleBench(progress);
    return { verdicts, dumps, goDump, fleet, scale, soak: await probeCost.soak(SOAK_S, progress) };
  } finally {
    await probeCost.stop();
  }
})();
const cpu = probeCost.cpu;
const probeMisses = probeMissed();
for (const line of probeMisses) progress(`probe: target missed: ${line}`);
const f = (n: number) => n.toFixed(1);
const rows = [
  ['target bind → `ready` on the API', verdicts.bindToReady, '—', '≤ 100 ms p99'],
  [
    `\`stuck\` after the stall threshold (${STALL_MS} ms)`,
    verdicts.stuckLag,
    `threshold ${STALL_MS} ms: p99 verdict at ${((STALL_MS + verdicts.stuckLag.p99) / STALL_MS).toFixed(3)} × threshold`,
    '≤ 250 ms p99',
  ],
  ["the collector placing a guest time: its `listen` marker − envd's stamp of it", verdicts.clockLag, '—', '—'],
] as const;

const md = `# Benchmarks

Measured by \`make bench\` on ${machine.date.slice(0, 10)}: ${machine.cpus} cores (${machine.cpuModel}), ${machine.memoryGiB} GiB,
Node ${machine.node}, Linux ${machine.kernel}. Each figure comes from this one run; latencies are
differences on the host's clock.

| figure | boots | p50 ms | p99 ms | max ms | baseline in the same run | target |
|---|---|---|---|---|---|---|
${rows.map(([name, s, base, target]) => `| ${name} | ${s.n} | ${f(s.p50)} | ${f(s.p99)} | ${f(s.max)} | ${base} | ${target} |`).join('\n')}

How: simulated sandboxes (own network and PID namespace, fake envd, emulated Firecracker vsock in a
process of its own, as a VM's is in its VMM), five at a time on ${machine.cpus} cores, against one collector
with \`--stall-after ${STALL_MS}ms\`; each boot awaited with the readiness long-poll (\`?wait=\`), as an
orchestrator would. The fake envd stamps each phase and its bind with the wall clock (\`-stamp-file\`:
the host's, as a simulated sandbox shares its kernel), so both latencies start at the moment itself.
- bind → ready starts when envd's listener on :49983 is bound and ends at the collector's \`ready\`
  state change (the moment the readiness API answers 200). It includes envd's READY=1, the
  probe noticing both (a boot tick is 40 ms), the trip to the collector and every wait for a CPU.
- stuck lag is the \`stuck\` state change minus (last phase + stall threshold): how late the
  stall timer's verdict lands.
- The collector places a guest's times on its own clock by the fastest message so far (the
  guest's clock is not the host's): the last row is how late that placed envd's \`listen\`
  marker. The stall timer runs from that placement, so its lateness is in the stuck lag.
- Waiting for a CPU (from \`schedstat\`): by the time it was ready, each probe's main thread had
  waited p50 ${f(verdicts.cpuWait.probeMs.p50)} / max ${f(verdicts.cpuWait.probeMs.max)} ms in the run queue; the collector's main
  thread waited ${(verdicts.cpuWait.collectorShare * 100).toFixed(1)} % of the time the healthy boots took.
${probeSection()}
${dumpSection(dumps, goDump)}
${fleetSection(fleet)}
${scaleSection(scale)}
${fs.readFileSync(path.join(ROOT, 'test/bench/FINDINGS.md'), 'utf8')}`;
fs.writeFileSync(path.join(ROOT, 'BENCHMARKS.md'), md);
fs.writeFileSync(
  path.join(ROOT, 'BENCHMARKS.json'),
  `${JSON.stringify({ machine, stallMs: STALL_MS, ...verdicts, probe: { micro, cpu, soak }, dumps, goDump, fleet, scale }, null, 2)}\n`,
);
process.stdout.write(md);

// Declarations, not consts: the top level above calls them before this line is reached.
function mib(kb: number): string {
  return (kb / 1024).toFixed(1);
}

/** Where a probe's memory is (smaps), in words. */
function anonWhere(f: CpuFigure): string {
  return `V8 heap ${mib(f.anon.v8PagesKb)} MiB resident in ${f.anon.v8Pages} pages of 256 KiB, malloc heap ${mib(f.anon.brkKb)} MiB, other ${mib(f.anon.otherKb)} MiB`;
}

function steadyCpuMet(): boolean {
  return cpu.steady.cpuPct <= PROBE_TARGETS.steadyCpuPct;
}

/** RssAnon after the soak, absolute and as a ratio of idle node in the same run. */
function rssAnonMet(kb: number): boolean {
  return kb <= PROBE_TARGETS.rssAnonMiB * 1024 && kb / soak.idleNode.rssAnonKb <= PROBE_TARGETS.rssAnonRatio;
}

/** The probe's targets this run missed, each with where its CPU or memory went. */
function probeMissed(): string[] {
  const out: string[] = [];
  const s = cpu.steady;
  if (!steadyCpuMet()) {
    out.push(
      `CPU at 1 Hz ${s.cpuPct.toFixed(2)} % > ${PROBE_TARGETS.steadyCpuPct} % (over ${s.windowS.toFixed(0)} s: main thread ${s.mainThreadMs.toFixed(0)} ms, other threads ${s.otherThreadsMs.toFixed(0)} ms, ${s.wakeupsPerS.toFixed(1)} wake-ups/s)`,
    );
  }
  const idle = soak.idleNode;
  for (const [name, f] of [
    ['boot rate', soak.bootRate],
    ['steady rate', soak.steady],
  ] as const) {
    if (rssAnonMet(f.rssAnonKb)) continue;
    out.push(
      `RssAnon at ${name} ${mib(f.rssAnonKb)} MiB, ${(f.rssAnonKb / idle.rssAnonKb).toFixed(2)} × idle node (≤ ${PROBE_TARGETS.rssAnonMiB} MiB, ≤ ${PROBE_TARGETS.rssAnonRatio} ×): ${anonWhere(f)}; idle node: ${anonWhere(idle)}`,
    );
  }
  return out;
}

/** The probe's own cost: per-call micro-benchmark and CPU share over a window (probe-cost.ts). */
function probeSection(): string {
  const us = micro.us;
  // The probe's own census period at the census's median cost here (µs → ms).
  const censusEveryS = censusPeriodMs(us.census.p50 / 1000) / 1000;
  const n = (v: number, digits = 0) => v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  const t = (v: number) => (v >= 1000 ? `${n(v)}` : v >= 100 ? n(v) : n(v, 1));
  const x = (a: number, b: number) => `${n(a / b, a / b >= 100 ? 0 : 1)}×`;
  const row = (name: string, s: { n: number; p50: number; p99: number }, ratio: string) =>
    `| ${name} | ${s.n} | ${t(s.p50)} | ${t(s.p99)} | ${ratio} |`;
  const microRows = [
    row('**one steady-state sample**: TargetWatcher + ListenerWatcher (sock_diag) + SocketWatcher totals', us.sample, '1 (the unit)'),
    row('&nbsp;&nbsp;of which TargetWatcher.tick (`/proc/<pid>/stat` of the known target)', us.target, '—'),
    row('&nbsp;&nbsp;of which ListenerWatcher.tick (LISTEN-only `inet_diag`, IPv4 + IPv6)', us.listener, '—'),
    row('&nbsp;&nbsp;of which SocketWatcher.tick, totals only (`/proc/net/sockstat`)', us.sockstat, '—'),
    row('**one census**: socketCensus top 10 (all states, counted in the addon)', us.census, `${x(us.census.p50, us.sample.p50)} sample`),
    row(
      'baseline: `/proc/net/tcp` + `tcp6` read + parse, LISTEN on :49983 (the /proc listener fallback)',
      us.tcp,
      `${x(us.tcp.p50, us.sample.p50)} sample`,
    ),
    row(
      'baseline: `/proc/net/tcp` + `tcp6` read + parse, every socket',
      us.tcpAll,
      `${x(us.tcpAll.p50, us.sample.p50)} sample, ${x(us.tcpAll.p50, us.census.p50)} census`,
    ),
    row('baseline: `/proc/*/comm` scan for a name (findProcessByName, no match)', us.scan, `${x(us.scan.p50, us.sample.p50)} sample`),
  ];
  const pct = (f: CpuFigure) => `${f.cpuPct.toFixed(2)} %`;
  const met = (ok: boolean) => (ok ? 'met' : '**not met**');
  const cpuRow = (name: string, f: CpuFigure, target: string) =>
    `| ${name} | ${pct(f)} | ${n(f.cpuMs)} | ${n(f.wakeupsPerS, 1)} | ${n(f.syscrPerS, 1)} | ${mib(f.rssAnonKb)} | ${mib(f.rssFileKb)} | ${target} |`;
  const steady = cpu.steady;
  const cpuRows = [
    cpuRow('probe at boot rate (envd hangs in `cgroup-manager`, before binding: 40 ms ticks)', cpu.bootRate, '—'),
    cpuRow('probe at steady rate (healthy envd, ready: 1 s ticks)', steady, `≤ ${PROBE_TARGETS.steadyCpuPct} %: ${met(steadyCpuMet())}`),
    cpuRow('baseline: idle `node -e "setInterval(()=>{},1000)"`', cpu.idleNode, '—'),
  ];
  const mbOf = (kb: number) => `${mib(kb)} MiB (${((kb * 1024) / 1e6).toFixed(1)} MB)`;
  const idleKb = soak.idleNode.rssAnonKb;
  const rssTarget = (kb: number) =>
    `${(kb / idleKb).toFixed(2)} × idle node; ≤ ${PROBE_TARGETS.rssAnonMiB} MiB and ≤ ${PROBE_TARGETS.rssAnonRatio} ×: ${met(rssAnonMet(kb))}`;
  const soakRow = (name: string, f: CpuFigure, target: boolean) =>
    `| ${name} | ${mbOf(f.rssAnonKb)} | ${mib(f.rssFileKb)} MiB | ${f.threads} | ${pct(f)} | ${target ? rssTarget(f.rssAnonKb) : '—'} |`;
  const soakRows = [
    soakRow('probe at boot rate (the hung sandbox)', soak.bootRate, true),
    soakRow('probe at steady rate (the healthy sandbox)', soak.steady, true),
    soakRow('baseline: idle `node`', soak.idleNode, false),
  ];
  const whereRows = (
    [
      ['probe at boot rate', cpu.bootRate, soak.bootRate],
      ['probe at steady rate', cpu.steady, soak.steady],
      ['idle `node`', cpu.idleNode, soak.idleNode],
    ] as const
  ).map(
    ([name, w, m]) =>
      `| ${name} | ${n(w.mainThreadMs)} | ${n(w.otherThreadsMs)} | ${m.anon.v8Pages} (${mib(m.anon.v8PagesKb)} MiB) | ${mib(m.anon.brkKb)} MiB | ${mib(m.anon.otherKb)} MiB |`,
  );
  const l = micro.load;
  const bootPerTickUs = (cpu.bootRate.cpuMs * 1000) / (cpu.bootRate.windowS * (1000 / DEFAULTS.bootIntervalMs));
  const steadyPerSUs = (cpu.steady.cpuMs * 1000) / cpu.steady.windowS;
  return `
## The probe's own cost

Same machine and run as above. Load: ${l.processes} processes (${LOAD.processes} idle \`sleep\`s, the shell, the socket
fixture, the target and the measuring process) and ${n(l.censusTotal)} TCP sockets (${n(LOAD.connections)} idle loopback
connections of a Node fixture, both ends, plus two listeners) in a fresh network + PID namespace,
with a fake envd listening on :49983 as the target. Listener source: ${micro.listenerSource}.

| call (one namespace: ${l.processes} processes, ${n(l.censusTotal)} sockets) | calls | median µs | p99 µs | ratio of medians |
|---|---|---|---|---|
${microRows.join('\n')}

How: the probe's own modules (guest-probe/src, bundled with esbuild) run inside the namespace;
after a warm-up (the target found and the listener seen bound, so only steady-state work is
timed), ${micro.rounds} rounds each time ${'`'}sample${'`'} 250×, each part 100×, census 15×, the tcp reads 3× and 2×,
the scan 5×, interleaved so noise falls on all alike; process.hrtime per call. These are warm,
JIT-optimised calls in a tight loop: the probe, ticking at 25 Hz or 1 Hz, pays more per tick
(colder caches, less optimised code; see the CPU share below). The census is run every ${CENSUS_EVERY_MS / 1000} s, or
less often when it costs more than ${CENSUS_CPU_SHARE * 100} % of a core at that period, and when the totals grow; the baselines are
what the probe avoids per tick.

| process (${cpu.windowS} s window, all at the same time) | CPU, % of one core | CPU ms | main-thread wake-ups/s | read syscalls/s | RssAnon MiB | RssFile MiB | target |
|---|---|---|---|---|---|---|---|
${cpuRows.join('\n')}

How: the real bundled probe (guest-probe/dist) in two simulated sandboxes side by side, each
with its own ${LOAD.processes} idle processes and ${n(cpu.load.sockets)} sockets (the load above, in each sandbox), both
streaming to one collector through the emulated vsock (registered, so the link traffic counts;
its stall and start deadlines are set past the window, so the hung sandbox stays \`starting\` and
the collector takes no stuck-time action during it; its probe is held at the boot rate with \`VSOCKDIAG_HUNG_INTERVAL=${DEFAULTS.bootIntervalMs}ms\`,
where by default it would slow to ${DEFAULTS.hungIntervalMs} ms ticks after the boot's first ${BOOT_FAST_FOR_MS / 1000} s). The probes and idle Node run in a guest's environment
(systemd's PATH, and the unit's \`MALLOC_ARENA_MAX=1\` for the probes), not this process's.
CPU is utime + stime from \`/proc/<pid>/stat\` (all threads; counted in 10 ms steps, i.e. ${(1 / cpu.windowS).toFixed(3)} % of a core
over the window), wake-ups are the main thread's voluntary context switches, reads are \`syscr\` from
\`/proc/<pid>/io\`, memory from \`/proc/<pid>/status\` at the end. The two sandboxes share one kernel here, so
each census walks both sandboxes' sockets: at the median above, the probes space them ${n(censusEveryS)} s apart.

| after ${n(soak.afterS / 60, 1)} min (the same processes) | RssAnon | RssFile | threads | CPU over the ${n(soak.afterS / 60, 1)} min | target |
|---|---|---|---|---|---|
${soakRows.join('\n')}

Where it goes: CPU of the main thread (the event loop) and of all other threads (V8's compiler and GC
helpers, libuv's pool) over the ${cpu.windowS} s window, from each thread's \`schedstat\`; RssAnon at the end of the
${n(soak.afterS / 60, 1)} min by kind, from \`smaps\` (V8 allocates its heap in 256 KiB pages; the malloc heap is \`[heap]\`).

| process | main thread ms | other threads ms | V8 heap: pages of 256 KiB (resident) | malloc heap | other anonymous |
|---|---|---|---|---|---|
${whereRows.join('\n')}
${probeMisses.length ? `\nTargets missed:\n${probeMisses.map((l) => `- ${l}`).join('\n')}\n` : '\nEvery probe target of this section was met.\n'}
How: the processes of the table above keep running while the rest of this run's benchmarks run (the verdict
boots, the dumps, the collector under load), then their \`/proc/<pid>/status\` is read once they have run
${n(soak.afterS)} s; the CPU column is over that whole time, other benchmarks running beside them (the ${cpu.windowS} s
window above is the quiet figure).

Per tick, from the figures above: at boot rate the probe's CPU ÷ ${1000 / DEFAULTS.bootIntervalMs} ticks/s is
${n(bootPerTickUs)} µs per tick, ${x(bootPerTickUs, us.sample.p50)} the warm sample's median; at steady rate, ${n(steadyPerSUs)} µs per
second. The census every ${n(censusEveryS)} s alone, at its median above, is ≈ ${(us.census.p50 / 1e4 / censusEveryS).toFixed(3)} % of a core.

Per-tick \`/proc/*\` scan at steady state: **${cpu.steadyScansProcPerTick ? 'yes' : 'no'}**: ${n(cpu.steadyReadsPerTick, 1)} read syscalls per 1 s tick, everything the probe
read (the target's stat, sockstat, /dev/kmsg, the link, ...), against ${cpu.steadyNamespaceProcesses} processes in the sandbox that a scan would read
at least once each.
`;
}
