// Runs only the dump figures (dumps.ts: the pprof path, as the baseline; go-dump.ts: the
// memory read of a 10,000-goroutine fake envd, its pause and the probe's RssAnon) and prints
// their BENCHMARKS.md section: for working on the Go reader without the whole `make bench`.
//   node test/run-ts.mjs test/bench/go-dump-only.ts [RUNS]
import { dumpSection, measureDumps } from './dumps.js';
import { measureGoDump } from './go-dump.js';

const progress = (msg: string) => process.stderr.write(`bench: ${msg}\n`);
const runs = Number(process.argv[2] ?? 10);
const dumps = await measureDumps(20, 5, progress);
const go = await measureGoDump(runs, runs, progress);
process.stdout.write(dumpSection(dumps, go));
process.stdout.write(`\nprobe note of the first memory dump: ${go.note}\n`);
