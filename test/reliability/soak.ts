// Soak: thousands of light probes (test/bench/load-clients.ts, in a child process) hold
// sessions with a real collector (the built CLI) over Unix sockets for minutes, each sending
// a heartbeat and one event a second. Then they stop sending; every event sent must be
// acked (acks follow the store's commit), and for a sample of sandboxes the stored events
// must be exactly 1..seq, no gap, no duplicate.
//
// Growth is judged on the live heap (objects alive after a full GC, test/harness/heap.ts),
// read once warmed up and again at the end, each time with the fleet paused and every event
// acked so that nothing in flight is counted: it may grow by 2 % at most. The small run's
// 400 sessions drift by −0.6 … +0.2 % from 20 to 50 s beside a running `make test`; a
// collector that keeps every event it receives grows by 5 % in those 30 s. The warm-up lets
// bounded per-sandbox state and V8's own fill (the live heap climbs for ~20 s, then is
// flat). RSS is no judge of a short run: a 200-session run's RSS sat 24 % below its median
// for half the run while the live heap stayed flat. The full run also requires RSS, sampled
// every 10 s after warm-up, to stay within 10 % above its median (a fall is memory handed
// back, not growth).
//
// Bounded: sessions, duration and the clients' own lifetime (15 min); traffic on Unix
// sockets and loopback HTTP only; every process started here is ended by pid.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pool, startClients, type Clients } from '../bench/collector-load.js';
import { allEvents, startCollector } from '../harness/collector.js';
import { heapAfterGc } from '../harness/heap.js';
import type { ReliabilityRow, Scenario } from './row.js';

export interface SoakOptions {
  sessions: number;
  seconds: number;
  warmupS: number;
  sampleEveryS: number;
  /** Sandboxes whose stored events are read back in full. */
  verify: number;
  /** Also judge RSS (long runs only: see the header). */
  judgeRss: boolean;
  log: (line: string) => void;
}

export interface SoakResult {
  sessions: number;
  connected: number;
  seconds: number;
  sent: number;
  unacked: number;
  verified: number;
  lost: number;
  duplicated: number;
  /** Sessions the collector closed during the run. */
  closed: number;
  rssMiB: { median: number; min: number; max: number; samples: number };
  /** The live heap (after a full GC) once warmed up and at the end, the fleet paused. */
  heapMiB: { start: number; end: number };
  held: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const QUIET_ARGS = ['--stall-after', '1h', '--start-deadline', '1h'];

export async function soak(opts: SoakOptions): Promise<SoakResult> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-soak-'));
  const heap = heapAfterGc(root);
  const c = await startCollector({ args: QUIET_ARGS, nodeArgs: heap.nodeArgs, env: heap.env }).catch((err) => {
    fs.rmSync(root, { recursive: true, force: true });
    throw err;
  });
  const pid = c.proc.pid!;
  let clients: Clients | null = null;
  const rssKb = () => Number(/^VmRSS:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? Number.NaN);
  try {
    const ids = Array.from({ length: opts.sessions }, (_, i) => `s${i}`);
    await pool(ids, 16, async (id, i) => {
      const r = await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath: path.join(root, `${i}.v`) });
      if (r.status !== 201) throw new Error(`register ${id}: ${r.status}`);
    });
    clients = startClients();
    clients.send({ op: 'connect', paths: ids.map((_, i) => path.join(root, `${i}.v_52000`)), readyEvery: 2 });
    const conn = await clients.next('connected', 300_000);
    opts.log(`soak: ${conn.n}/${opts.sessions} sessions connected in ${(conn.ms / 1000).toFixed(1)} s`);

    // Pauses the fleet until every event sent is acked (acks come once the store committed),
    // and returns each client's [seq, acked].
    const settle = async () => {
      clients!.send({ op: 'quiet' });
      await clients!.next('quiet', 10_000);
      let seqs: Array<[number, number] | null> = [];
      for (let tries = 0; tries < 40; tries++) {
        clients!.send({ op: 'seqs' });
        seqs = (await clients!.next('seqs', 30_000)).seqs;
        if (seqs.every((x) => !x || x[1] >= x[0])) break;
        await sleep(500);
      }
      return seqs;
    };

    const t0 = performance.now();
    const samples: number[] = [];
    let heapStart = 0;
    let nextLog = 60;
    while (performance.now() - t0 < opts.seconds * 1000) {
      await sleep(opts.sampleEveryS * 1000);
      const s = (performance.now() - t0) / 1000;
      if (s >= opts.warmupS && heapStart === 0) {
        await settle();
        heapStart = await heap.read(c.proc);
        clients.send({ op: 'resume' });
        await clients.next('resume', 10_000);
      }
      if (s >= opts.warmupS) samples.push(rssKb());
      if (s >= nextLog) {
        nextLog += 60;
        opts.log(`soak: ${s.toFixed(0)}/${opts.seconds} s, collector RSS ${(rssKb() / 1024).toFixed(0)} MiB`);
      }
    }
    const seqs = await settle();
    const heapEnd = await heap.read(c.proc);
    clients.send({ op: 'stats' });
    const stats = await clients.next('stats', 10_000);
    const sent = seqs.reduce((a, x) => a + (x ? x[0] : 0), 0);
    const unacked = seqs.reduce((a, x) => a + (x ? Math.max(0, x[0] - x[1]) : 0), 0);

    // Read back a sample in full: the stored seqs are exactly 1..seq.
    let lost = 0;
    let duplicated = 0;
    const step = Math.max(1, Math.floor(opts.sessions / opts.verify));
    let verified = 0;
    for (let i = 0; i < opts.sessions; i += step) {
      const x = seqs[i];
      if (!x) continue;
      const stored = (await allEvents(c, ids[i]!, 'sockets')).map((e) => e.seq as number);
      const distinct = new Set(stored);
      duplicated += stored.length - distinct.size;
      for (let s = 1; s <= x[0]; s++) if (!distinct.has(s)) lost++;
      verified++;
    }
    const sorted = [...samples].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)] ?? 0;
    const min = sorted[0] ?? 0;
    const max = sorted[sorted.length - 1] ?? 0;
    const heapHeld = heapStart > 0 && heapEnd <= heapStart * 1.02;
    const rssHeld = !opts.judgeRss || (median > 0 && max <= median * 1.1);
    return {
      sessions: opts.sessions,
      connected: conn.n,
      seconds: (performance.now() - t0) / 1000,
      sent,
      unacked,
      verified,
      lost,
      duplicated,
      closed: stats.closed,
      rssMiB: { median: median / 1024, min: min / 1024, max: max / 1024, samples: samples.length },
      heapMiB: { start: heapStart / 2 ** 20, end: heapEnd / 2 ** 20 },
      held: conn.n === opts.sessions && unacked === 0 && lost === 0 && duplicated === 0 && stats.closed === 0 && heapHeld && rssHeld,
    };
  } finally {
    await clients?.stop();
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/** `x` against `base` as a signed percentage: "+1.7 %", "-0.7 %". */
const signedPct = (x: number, base: number) => {
  const pct = ((x - base) / base) * 100;
  return `${pct >= 0 ? '+' : ''}${pct.toFixed(1)} %`;
};

export const run: Scenario = async ({ full, log }) => {
  const opts = full
    ? { sessions: 5000, seconds: 600, warmupS: 120, sampleEveryS: 10, verify: 100, judgeRss: true }
    : { sessions: 400, seconds: 50, warmupS: 20, sampleEveryS: 1, verify: 20, judgeRss: false };
  log(`soak: ${opts.sessions} sessions for ${opts.seconds} s`);
  const f = await soak({ ...opts, log });
  const row: ReliabilityRow = {
    area: 'load',
    scenario: `soak: ${f.sessions.toLocaleString('en')} sessions over Unix sockets for ${Math.round(f.seconds)} s, an event and a heartbeat a second each`,
    figure:
      `${f.connected}/${f.sessions} connected, ${f.closed} closed by the collector; ${f.sent.toLocaleString('en')} events sent, ${f.unacked} unacked; ` +
      `${f.verified} sandboxes read back: ${f.lost} lost, ${f.duplicated} duplicated; ` +
      `live heap ${f.heapMiB.start.toFixed(1)} → ${f.heapMiB.end.toFixed(1)} MiB (${signedPct(f.heapMiB.end, f.heapMiB.start)}); ` +
      `collector RSS median ${f.rssMiB.median.toFixed(0)} MiB ` +
      `(${signedPct(f.rssMiB.min, f.rssMiB.median)} to ${signedPct(f.rssMiB.max, f.rssMiB.median)} over ${f.rssMiB.samples} samples after warm-up)`,
    held: f.held,
    command: 'node test/run-ts.mjs test/reliability/run.ts soak',
  };
  return [row];
};
