// Dump latencies, end to end through the real path (API → collector → probe session →
// /proc or pprof → chunks → parse → SQLite → API answer):
//   - a threads dump's round trip, p50/p99 over many requests;
//   - a 10,000-goroutine Go dump (pprof, harmless) end to end, a few times.
// Baseline in the same run: GET /healthz round trips (the API's own floor).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startCollector, waitForState } from '../harness/collector.js';
import { startSandbox } from '../harness/sandbox.js';
import { summarize } from './stats.js';

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

export async function measureDumps(threadsRuns: number, bigRuns: number, progress: (m: string) => void) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-bd-'));
  const c = await startCollector({ args: ['--stall-after', '60s'] });
  const sb = await startSandbox({
    id: 'bench-dumps',
    root,
    envd: ['-hang-in', 'api', '-pprof', '127.0.0.1:6060', '-idle-goroutines', '10000'],
    probeArgs: ['--pprof-url', 'http://127.0.0.1:6060/debug/pprof/goroutine?debug=2'],
  });
  try {
    await c.api('PUT', '/v1/sandboxes/bench-dumps', { udsPath: sb.udsPath });
    await waitForState(c, 'bench-dumps', 'starting', 30_000);
    const post = (mode: string) => async () => {
      const r = await c.api('POST', '/v1/sandboxes/bench-dumps/dumps', { mode });
      if (r.status !== 201) throw new Error(`dump failed: ${JSON.stringify(r.body)}`);
    };
    const healthz: number[] = [];
    const threads: number[] = [];
    for (let i = 0; i < threadsRuns; i++) {
      healthz.push(await timed(() => c.api('GET', '/healthz')));
      threads.push(await timed(post('threads')));
      if ((i + 1) % 25 === 0) progress(`threads dumps: ${i + 1}/${threadsRuns}`);
    }
    const big: number[] = [];
    let goroutines = 0;
    let bytes = 0;
    for (let i = 0; i < bigRuns; i++) {
      big.push(await timed(post('goroutines')));
      progress(`10,000-goroutine dumps: ${i + 1}/${bigRuns}`);
    }
    const list = (await c.api('GET', '/v1/sandboxes/bench-dumps/dumps')).body.dumps;
    const last = (await c.api('GET', `/v1/sandboxes/bench-dumps/dumps/${list[0].id}`)).body;
    goroutines = last.goroutines;
    bytes = last.bytes;
    return { healthz: summarize(healthz), threads: summarize(threads), bigGoroutines: summarize(big), goroutines, bytes };
  } finally {
    await sb.stop();
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}
