// Runs only the probe start-up figure (probe-startup.ts) and prints it: for working on the
// probe's start-up without the whole `make bench`:
//   node test/run-ts.mjs test/bench/startup-only.ts [ROUNDS]
import { measureProbeStartup } from './probe-startup.js';

const progress = (msg: string) => process.stderr.write(`bench: ${msg}\n`);
const s = await measureProbeStartup(Number(process.argv[2] ?? 20), progress);
const ms = (v: number) => v.toFixed(1);
process.stdout.write(
  `exec → first frame p50 ${ms(s.firstFrame.p50)} ms (p99 ${ms(s.firstFrame.p99)}), CPU ${ms(s.cpuMs.probe)} ms\n` +
    `--version exit p50 ${ms(s.versionExit.p50)} ms, CPU ${ms(s.cpuMs.version)} ms\n` +
    `node -e 0 p50 ${ms(s.nodeExit.p50)} ms, CPU ${ms(s.cpuMs.node)} ms\n` +
    `ratio of medians ${(s.firstFrame.p50 / s.nodeExit.p50).toFixed(2)}× (CPU ${(s.cpuMs.probe / s.cpuMs.node).toFixed(2)}×)\n`,
);
