// A collector from source in a child process, with options the CLI does not offer (the
// fuzzer's budget): its crash is an exit the parent sees, its hang does not stall the
// parent's watchdogs, and its RSS is its own. Bundled by live-collector.ts into
// host-collector/dist/ (next to dump-worker.js, which it starts, and where its npm
// dependencies resolve). Prints {"url"} once listening; stops when stdin closes or on
// SIGTERM, and after MAX_LIFETIME_MS whatever happens.

import fs from 'node:fs';
import path from 'node:path';
import { Collector, type CollectorOptions } from '../../host-collector/src/collector/collector.js';
import { LOG_LEVELS, type LogLevel, createLogger } from '../../host-collector/src/collector/logger.js';

const MAX_LIFETIME_MS = 40 * 60_000;

const given = JSON.parse(process.argv[2] ?? '{}') as Partial<CollectorOptions> & { dataDir: string };
const dashboardDir = path.join(given.dataDir, 'ui');
fs.mkdirSync(dashboardDir, { recursive: true });
// JSON lines on stderr at VSOCKDIAG_LOG_LEVEL (the parent sets error: it counts them, as an
// exception handling a frame is a finding).
const level = process.env.VSOCKDIAG_LOG_LEVEL ?? 'info';
if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new Error(`VSOCKDIAG_LOG_LEVEL=${level}: not a level`);
const log = createLogger(level as LogLevel);
const collector = new Collector(
  {
    http: '127.0.0.1:0',
    vsockPort: 52000,
    probePort: 52001,
    stallAfterMs: 3_600_000,
    startDeadlineMs: 3_600_000,
    dashboardDir,
    ...given,
  },
  log,
);

let stopping = false;
async function stop(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    await collector.stop().catch(() => {});
  }
  process.exit(code);
}

setTimeout(() => void stop(3), MAX_LIFETIME_MS).unref();
process.on('SIGTERM', () => void stop(0));
process.stdin.on('end', () => void stop(0));
process.stdin.resume();
// What the collector holds, for the fuzzer (live-collector.ts, heldKb): on SIGUSR2 a full
// collection (the parent starts this process with --expose-gc), then the V8 heap in use as a
// JSON line. RSS alone moves with when V8 gets round to collecting, not with what is kept.
process.on('SIGUSR2', () => {
  globalThis.gc?.();
  const heldKb = globalThis.gc ? Math.round(process.memoryUsage().heapUsed / 1024) : null;
  process.stdout.write(`${JSON.stringify({ heldKb })}\n`);
});
const url = await collector.start();
process.stdout.write(`${JSON.stringify({ url })}\n`);
