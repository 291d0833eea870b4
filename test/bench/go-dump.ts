// The non-destructive Go goroutine dump (read from the target's memory), end to end through
// the real path: API POST → collector → probe session → the probe reads a fake envd with
// 10,000 parked goroutines from outside (process_vm_readv) and streams the text in chunks →
// the collector's worker parses and groups it → SQLite → 201. Beside it, in the same sandbox:
//   - the pause: the dump's pausedMs (0: read while the target runs), and pause mode's stop
//     (SIGSTOP → read → SIGCONT) from a direct readGoroutines(pid, { pause: true });
//   - the probe's memory: RssAnon of the probe process sampled every ~10 ms while each dump
//     runs, against its value before the first one (the reader is loaded on the first dump);
//   - the probe's CPU time per dump (user + system, from /proc): unlike the wall times, it
//     hardly grows when other work shares the machine; with the load average around the run.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { readGoroutines } from '../../guest-probe/src/dumps/go/index.js';
import { PROBE_BIN, ROOT, startCollector, waitForState } from '../harness/collector.js';
import { startSandbox } from '../harness/sandbox.js';
import { cpuMs, statusFields } from './proc.js';
import { summarize } from './stats.js';

export const GO_DUMP_TARGETS = { endToEndMs: 1000, pauseMs: 20, rssAnonDeltaKb: 16 * 1024 } as const;

const SAMPLE_MS = 10;

/** Peak RssAnon (kB) of `pid` while `fn` runs, sampled every SAMPLE_MS. */
async function peakRssAnon<T>(pid: number, fn: () => Promise<T>): Promise<{ result: T; peakKb: number; samples: number }> {
  let peakKb = 0;
  let samples = 0;
  const sample = () => {
    try {
      peakKb = Math.max(peakKb, statusFields(pid, ['RssAnon']).RssAnon);
      samples++;
    } catch {
      // The probe is gone: the dump fails below and says so.
    }
  };
  sample();
  const timer = setInterval(sample, SAMPLE_MS);
  try {
    const result = await fn();
    sample();
    return { result, peakKb, samples };
  } finally {
    clearInterval(timer);
  }
}

export async function measureGoDump(runs: number, pauseRuns: number, progress: (m: string) => void) {
  // The direct reads below run in this (bundled) process: the reader's addon is looked for
  // beside the running script first (native.ts).
  fs.copyFileSync(
    path.join(ROOT, 'guest-probe/dist/vsockdiag.node'),
    path.join(path.dirname(path.resolve(process.argv[1]!)), 'vsockdiag.node'),
  );
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-gd-'));
  const c = await startCollector({ args: ['--stall-after', '60s'] });
  // No pprof endpoint: a goroutines dump without `destructive` reads the target's memory.
  const sb = await startSandbox({ id: 'bench-go-dump', root, envd: ['-hang-in', 'api', '-idle-goroutines', '10000'] });
  try {
    await c.api('PUT', '/v1/sandboxes/bench-go-dump', { udsPath: sb.udsPath });
    await waitForState(c, 'bench-go-dump', 'starting', 30_000);
    const [probePid] = sb.pidsOf(PROBE_BIN);
    const [envdPid] = sb.pidsOf('-idle-goroutines');
    if (!probePid || !envdPid) throw new Error(`probe (${probePid}) or fake envd (${envdPid}) not found in the sandbox`);
    // Until every idle goroutine is parked (the fake envd starts them in a loop).
    for (const end = Date.now() + 30_000; ; ) {
      const r = await readGoroutines(envdPid);
      if (r.goroutines >= 10_000) break;
      if (Date.now() > end) throw new Error(`the fake envd has ${r.goroutines} goroutines after 30 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
    // Settled: the probe's heap as it is between dumps, before it ever loaded the reader.
    await new Promise((r) => setTimeout(r, 500));
    const baselineKb = statusFields(probePid, ['RssAnon']).RssAnon;
    const e2e: number[] = [];
    const paused: number[] = [];
    const peaks: number[] = [];
    const probeCpu: number[] = [];
    const loadBefore = os.loadavg()[0]!;
    let samples = 0;
    let goroutines = 0;
    let bytes = 0;
    let note = '';
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      const cpu0 = cpuMs(probePid);
      const m = await peakRssAnon(probePid, () => c.api('POST', '/v1/sandboxes/bench-go-dump/dumps', { mode: 'goroutines' }));
      e2e.push(performance.now() - t);
      probeCpu.push(cpuMs(probePid) - cpu0);
      const r = m.result;
      if (r.status !== 201 || r.body.source !== 'memory' || !r.body.complete)
        throw new Error(`the memory dump failed: ${JSON.stringify(r.body)}`);
      paused.push(r.body.pausedMs);
      peaks.push(m.peakKb);
      samples += m.samples;
      if (i === 0) {
        const d = (await c.api('GET', `/v1/sandboxes/bench-go-dump/dumps/${r.body.id}`)).body;
        goroutines = d.goroutines;
        bytes = d.bytes;
        note = d.note ?? '';
      }
      progress(`10,000-goroutine memory dumps: ${i + 1}/${runs}`);
    }
    // Pause mode, from this process (root, like the probe): the target stopped for the read.
    const pause: number[] = [];
    const stopWait: number[] = [];
    const copy: number[] = [];
    for (let i = 0; i < pauseRuns; i++) {
      const r = await readGoroutines(envdPid, { pause: true });
      if (!r.complete || !r.pause) throw new Error(`the paused read was not complete: ${r.notes.join('; ')}`);
      pause.push(r.pausedMs);
      stopWait.push(r.pause.stopWaitMs);
      copy.push(r.pause.copyMs);
    }
    progress(`pause-mode reads: ${pauseRuns}`);
    return {
      endToEnd: summarize(e2e),
      /** The first dump: the probe loads the reader and runs it cold. */
      firstMs: e2e[0]!,
      pausedMs: summarize(paused),
      pauseMode: summarize(pause),
      /** Of the stop: until every thread of envd had stopped, and the copy (memSnapshot). */
      pauseStopWait: summarize(stopWait),
      pauseCopy: summarize(copy),
      probeCpu: summarize(probeCpu),
      firstProbeCpuMs: probeCpu[0]!,
      /** 1-minute load average before the memory dumps and after the pause-mode reads (2 cores). */
      load: { before: loadBefore, after: os.loadavg()[0]! },
      // The first dump loads the reader; later ones may find garbage of earlier ones not collected yet.
      rss: {
        baselineKb,
        firstPeakKb: peaks[0]!,
        peakKb: Math.max(...peaks),
        deltaKb: Math.max(...peaks) - baselineKb,
        samples,
        everyMs: SAMPLE_MS,
      },
      goroutines,
      bytes,
      note,
    };
  } finally {
    await sb.stop();
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

export type GoDumpFigures = Awaited<ReturnType<typeof measureGoDump>>;

/** The table rows (the run.ts dump table's columns), the pprof path's p50 as the baseline, and the RssAnon line. */
export function goDumpRows(g: GoDumpFigures, pprofP50Ms: number): { rows: string[]; rss: string } {
  const f = (n: number) => n.toFixed(1);
  const t = GO_DUMP_TARGETS;
  const met = (ok: boolean) => (ok ? 'met' : '**not met**');
  const row = (name: string, s: { n: number; p50: number; p99: number; max: number }, base: string, target: string) =>
    `| ${name} | ${s.n} | ${f(s.p50)} | ${f(s.p99)} | ${f(s.max)} | ${base} | ${target} |`;
  const mib = (kb: number) => `${(kb / 1024).toFixed(1)} MiB`;
  const n = g.goroutines.toLocaleString('en-US');
  return {
    rows: [
      row(
        `${n}-goroutine Go dump (memory read, ${(g.bytes / 2 ** 20).toFixed(1)} MiB) end to end`,
        g.endToEnd,
        `pprof path p50 ${f(pprofP50Ms)} ms: ${(g.endToEnd.p50 / pprofP50Ms).toFixed(1)}×; the first (cold) ${f(g.firstMs)} ms`,
        `≤ ${t.endToEndMs} ms p99 (${(g.endToEnd.p99 / t.endToEndMs).toFixed(2)} × target): ${met(g.endToEnd.p99 <= t.endToEndMs)}`,
      ),
      row("&nbsp;&nbsp;the probe's CPU per dump (user + system, /proc)", g.probeCpu, `the first (cold) ${f(g.firstProbeCpuMs)} ms`, '—'),
      row(
        '&nbsp;&nbsp;its pause (pausedMs of those dumps)',
        g.pausedMs,
        '—',
        `≤ ${t.pauseMs} ms, none is better: ${met(g.pausedMs.max <= t.pauseMs)}`,
      ),
      row(
        "&nbsp;&nbsp;pause mode's stop (SIGSTOP → read → SIGCONT), direct readGoroutines",
        g.pauseMode,
        '—',
        `≤ ${t.pauseMs} ms p99 (${(g.pauseMode.p99 / t.pauseMs).toFixed(2)} × target): ${met(g.pauseMode.p99 <= t.pauseMs)}`,
      ),
      row("&nbsp;&nbsp;&nbsp;&nbsp;of which until envd's threads had all stopped", g.pauseStopWait, '—', '—'),
      row("&nbsp;&nbsp;&nbsp;&nbsp;of which copying its g's and stack tops (memSnapshot)", g.pauseCopy, '—', '—'),
    ],
    rss:
      `Probe RssAnon during the memory dumps: ${mib(g.rss.baselineKb)} before the first (the reader not loaded yet); peak during the first ` +
      `${mib(g.rss.firstPeakKb)} (+${mib(g.rss.firstPeakKb - g.rss.baselineKb)}), during any of the ${g.endToEnd.n} ${mib(g.rss.peakKb)} ` +
      `(${g.rss.samples} samples, every ${g.rss.everyMs} ms): **+${mib(g.rss.deltaKb)}**, target ≤ +${mib(t.rssAnonDeltaKb)} ` +
      `(${(g.rss.deltaKb / t.rssAnonDeltaKb).toFixed(2)} × target): ${met(g.rss.deltaKb <= t.rssAnonDeltaKb)}. ` +
      `The machine's 1-minute load average (2 cores): ${g.load.before.toFixed(1)} before the memory dumps, ${g.load.after.toFixed(1)} after.`,
  };
}
