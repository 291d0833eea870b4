// Soak: thousands of light probes (test/bench/load-clients.ts, in a child process) hold
// sessions with a real collector (the built CLI) over Unix sockets for minutes, each sending
// a heartbeat and one event a second. Then they stop sending; every event sent must be
// acked (acks follow the store's commit), and for a sample of sandboxes the stored events
// must be exactly 1..seq, no gap, no duplicate. The collector's RSS, sampled every few
// seconds after a warm-up, must stay within 10 % above its median (a fall is memory handed
// back, not growth: one run fell 24 % and was wrongly judged a failure).
//
// Bounded: sessions, duration and the clients' own lifetime (15 min); traffic on Unix
// sockets and loopback HTTP only; every process started here is ended by pid.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pool, startClients, type Clients } from '../bench/collector-load.js';
import { allEvents, startCollector } from '../harness/collector.js';
import type { ReliabilityRow, Scenario } from './row.js';

export interface SoakOptions {
  sessions: number;
  seconds: number;
  warmupS: number;
  sampleEveryS: number;
  /** Sandboxes whose stored events are read back in full. */
  verify: number;
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
  held: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const QUIET_ARGS = ['--stall-after', '1h', '--start-deadline', '1h'];

export async function soak(opts: SoakOptions): Promise<SoakResult> {
  const c = await startCollector({ args: QUIET_ARGS });
  const pid = c.proc.pid!;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-soak-'));
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

    const t0 = performance.now();
    const samples: number[] = [];
    let nextLog = 60;
    while (performance.now() - t0 < opts.seconds * 1000) {
      await sleep(opts.sampleEveryS * 1000);
      const s = (performance.now() - t0) / 1000;
      if (s >= opts.warmupS) samples.push(rssKb());
      if (s >= nextLog) {
        nextLog += 60;
        opts.log(`soak: ${s.toFixed(0)}/${opts.seconds} s, collector RSS ${(rssKb() / 1024).toFixed(0)} MiB`);
      }
    }
    clients.send({ op: 'quiet' });
    await clients.next('quiet', 10_000);
    // Acks come once the store committed: give the last ones a moment, then count.
    let seqs: Array<[number, number] | null> = [];
    for (let tries = 0; tries < 40; tries++) {
      clients.send({ op: 'seqs' });
      seqs = (await clients.next('seqs', 30_000)).seqs;
      if (seqs.every((x) => !x || x[1] >= x[0])) break;
      await sleep(500);
    }
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
    const notGrowing = median > 0 && max <= median * 1.1;
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
      held: conn.n === opts.sessions && unacked === 0 && lost === 0 && duplicated === 0 && stats.closed === 0 && notGrowing,
    };
  } finally {
    await clients?.stop();
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

export const run: Scenario = async ({ full, log }) => {
  const opts = full
    ? { sessions: 5000, seconds: 600, warmupS: 120, sampleEveryS: 10, verify: 100 }
    : { sessions: 200, seconds: 20, warmupS: 5, sampleEveryS: 1, verify: 20 };
  log(`soak: ${opts.sessions} sessions for ${opts.seconds} s`);
  const f = await soak({ ...opts, log });
  const pct = (x: number) => `${(((x - f.rssMiB.median) / f.rssMiB.median) * 100).toFixed(1)} %`;
  const row: ReliabilityRow = {
    area: 'load',
    scenario: `soak: ${f.sessions.toLocaleString('en')} sessions over Unix sockets for ${Math.round(f.seconds)} s, an event and a heartbeat a second each`,
    figure:
      `${f.connected}/${f.sessions} connected, ${f.closed} closed by the collector; ${f.sent.toLocaleString('en')} events sent, ${f.unacked} unacked; ` +
      `${f.verified} sandboxes read back: ${f.lost} lost, ${f.duplicated} duplicated; collector RSS median ${f.rssMiB.median.toFixed(0)} MiB ` +
      `(${pct(f.rssMiB.min)} to +${pct(f.rssMiB.max).replace(/^\+/, '')} over ${f.rssMiB.samples} samples after warm-up)`,
    held: f.held,
    command: 'node test/run-ts.mjs test/reliability/run.ts soak',
  };
  return [row];
};
