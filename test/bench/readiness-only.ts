// Runs only the readiness figure (1,000 live sessions; readiness from the readiness thread
// and from the main API, and /healthz, at 500/s each, collector-load.ts) and prints it: for
// working on the collector's latency
// without the whole `make bench`. With --profile, the collector runs under the profiler and
// the busiest stretches are printed too.
//   node test/run-ts.mjs test/bench/readiness-only.ts [--profile]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { measureFleet } from './collector-load.js';

const progress = (msg: string) => process.stderr.write(`bench: ${msg}\n`);
const profile = process.argv.includes('--profile');
const profDir = profile ? fs.mkdtempSync(path.join(os.tmpdir(), 'vd-prof-')) : undefined;
try {
  const f = await measureFleet(
    1000,
    {
      windowS: 10,
      latencySamples: 0,
      args: ['--stall-after', '1h', '--start-deadline', '1h', '--readiness-http', '127.0.0.1:0'],
      readiness: { rate: 500, totalMs: 10_000, blocks: 10 },
      ...(profDir ? { cpuProfDir: profDir } : {}),
    },
    progress,
  );
  const r = f.readiness!;
  const line = (name: string, x: typeof r.readiness) =>
    `${name}: p50 ${x.latency.p50.toFixed(2)} ms, p99 ${x.latency.p99.toFixed(2)} ms, max ${x.latency.max.toFixed(1)} ms (${x.requests} at ${x.rate.toFixed(0)}/s)`;
  process.stdout.write(
    `${r.thread ? `${line('thread   ', r.thread)}\n` : ''}${line('readiness', r.readiness)}\n${line('/healthz  ', r.healthz)}\n` +
      `collector: ${f.cpuPct.toFixed(1)} % of a core at 1 Hz, RSS ${f.rssMiB.toFixed(1)} MiB; run-queue wait during requests ${r.runDelayPct.collector.toFixed(1)} % (the client at nice ${r.clientNice})\n`,
  );
  const rd = f.profile?.readiness;
  if (rd) {
    process.stdout.write(
      `loop delay p99 ${rd.loop.p99.toFixed(1)} ms, max ${rd.loop.max.toFixed(1)} ms; GC ${rd.digest.gcMs.toFixed(0)} ms\n`,
    );
    for (const l of rd.digest.longest) process.stdout.write(`  busy ${l.ms.toFixed(1)} ms: ${l.top}\n`);
    for (const e of rd.digest.byOwnFunction.slice(0, 10)) process.stdout.write(`  ${e.pct.toFixed(1)} % ${e.name}\n`);
  }
} finally {
  if (profDir) fs.rmSync(profDir, { recursive: true, force: true });
}
