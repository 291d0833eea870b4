// `make bench`: bounded benchmarks; writes BENCHMARKS.md and BENCHMARKS.json at the
// repository root. Figures are measured in this run, next to their baseline; nothing here
// is a pass/fail test (these machines are shared and noisy).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from '../harness/collector.js';
import { STALL_MS, measureVerdicts } from './verdicts.js';

const BOOTS = Number(process.env.VSOCKDIAG_BENCH_BOOTS ?? 50);
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

const verdicts = await measureVerdicts(BOOTS, 5, progress);
const f = (n: number) => n.toFixed(1);
const rows = [
  ['target bind → `ready` on the API', verdicts.bindToReady, '—', '≤ 100 ms p99'],
  [
    `\`stuck\` after the stall threshold (${STALL_MS} ms)`,
    verdicts.stuckLag,
    `threshold ${STALL_MS} ms: p99 verdict at ${((STALL_MS + verdicts.stuckLag.p99) / STALL_MS).toFixed(3)} × threshold`,
    '≤ 250 ms p99',
  ],
] as const;

const md = `# Benchmarks

Measured by \`make bench\` on ${machine.date.slice(0, 10)}: ${machine.cpus} cores (${machine.cpuModel}), ${machine.memoryGiB} GiB,
Node ${machine.node}, Linux ${machine.kernel}. Each figure comes from this one run; latencies are
host-clock differences between events the collector recorded.

| figure | boots | p50 ms | p99 ms | max ms | baseline in the same run | target |
|---|---|---|---|---|---|---|
${rows.map(([name, s, base, target]) => `| ${name} | ${s.n} | ${f(s.p50)} | ${f(s.p99)} | ${f(s.max)} | ${base} | ${target} |`).join('\n')}

How: simulated sandboxes (own network and PID namespace, fake envd, emulated Firecracker vsock),
five at a time, against one collector with \`--stall-after ${STALL_MS}ms\`.
- bind → ready starts at envd's \`listen\` phase marker, sent right before it binds :49983, and
  ends at the collector's \`ready\` state change (the moment the readiness API answers 200).
  It includes the bind itself, envd's READY=1, the probe noticing both and the trip to the
  collector.
- stuck lag is the \`stuck\` state change minus (last phase marker + stall threshold): how late
  the stall timer's verdict lands.
`;
fs.writeFileSync(path.join(ROOT, 'BENCHMARKS.md'), md);
fs.writeFileSync(path.join(ROOT, 'BENCHMARKS.json'), `${JSON.stringify({ machine, stallMs: STALL_MS, ...verdicts }, null, 2)}\n`);
process.stdout.write(md);
