// Runs only the collector-scale section (scale.ts) and prints its markdown; with a path
// argument, also writes its JSON there. For working on that section without the whole
// `make bench` (the 20,000-session run needs the descriptor limit raised first):
//   ulimit -n "$(ulimit -Hn)"; node test/run-ts.mjs test/bench/scale-only.ts [/tmp/scale.json]
import fs from 'node:fs';
import { measureScaleBench, scaleSection } from './scale.js';

const progress = (msg: string) => process.stderr.write(`bench: ${msg}\n`);
const result = await measureScaleBench(progress);
if (process.argv[2]) fs.writeFileSync(process.argv[2], `${JSON.stringify(result, null, 2)}\n`);
process.stdout.write(scaleSection(result));
