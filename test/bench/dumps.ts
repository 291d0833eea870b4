// Dump latencies, end to end through the real path (API → collector → probe session →
// /proc or pprof → chunks → parse → SQLite → API answer):
//   - a threads dump's round trip, p50/p99 over many requests;
//   - a 10,000-goroutine Go dump (pprof, harmless) end to end, a few times.
// Baseline in the same run: GET /healthz round trips (the API's own floor). The same
// goroutines read from the target's memory are measured by go-dump.ts; dumpSection prints both.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startCollector, waitForState } from '../harness/collector.js';
import { startSandbox } from '../harness/sandbox.js';
import { type GoDumpFigures, goDumpRows } from './go-dump.js';
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

export type DumpFigures = Awaited<ReturnType<typeof measureDumps>>;

/** The BENCHMARKS.md section: these dumps and the memory-read ones (go-dump.ts). */
export function dumpSection(dumps: DumpFigures, go: GoDumpFigures): string {
  const f = (n: number) => n.toFixed(1);
  const row = (name: string, s: { n: number; p50: number; p99: number; max: number }, base: string, target: string) =>
    `| ${name} | ${s.n} | ${f(s.p50)} | ${f(s.p99)} | ${f(s.max)} | ${base} | ${target} |`;
  const g = goDumpRows(go, dumps.bigGoroutines.p50);
  return `
## Dumps

| figure | runs | p50 ms | p99 ms | max ms | baseline in the same run | target |
|---|---|---|---|---|---|---|
${row('threads dump round trip (POST → stored → 201)', dumps.threads, `GET /healthz p50 ${f(dumps.healthz.p50)} ms: ${(dumps.threads.p50 / dumps.healthz.p50).toFixed(0)}×`, '≤ 50 ms p50')}
${row(`${dumps.goroutines.toLocaleString('en-US')}-goroutine Go dump (pprof, ${(dumps.bytes / 2 ** 20).toFixed(1)} MiB) end to end`, dumps.bigGoroutines, '—', '≤ 2 s')}
${g.rows.join('\n')}

${g.rss}

How: one simulated sandbox whose fake envd hangs in start-up with ${dumps.goroutines.toLocaleString('en-US')} parked goroutines and a pprof
endpoint; each request goes API → collector → probe session → /proc (threads) or pprof (goroutines) →
256 KiB chunks → parse and group → SQLite → 201. The memory read: a second sandbox, the same fake
envd without pprof; \`POST …/dumps {"mode":"goroutines"}\` makes the probe read the goroutines from
envd's memory (guest-probe/src/dumps/go/, \`process_vm_readv\`) while envd runs, in Go's own traceback
text (GOTRACEBACK=all style: every frame with its arguments and fp/sp/pc, hence the larger text),
streamed in the same chunks as it is made → parse → SQLite → 201. The first of these dumps loads the
reader and runs it cold (shown apart). Pause mode is timed by the reader itself, from the SIGSTOP to
the SIGCONT, in a direct call on the same envd. RssAnon is the probe's, from \`/proc/<pid>/status\`.
`;
}
