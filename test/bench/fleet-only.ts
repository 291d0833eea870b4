// Runs only the fleet section (fleet.ts) and prints its markdown; with a path argument, also
// writes its JSON there. For working on that section without the whole `make bench`:
//   node test/run-ts.mjs test/bench/fleet-only.ts [/tmp/fleet.json]
import fs from 'node:fs';
import { fleetSection, measureFleetBench } from './fleet.js';

const progress = (msg: string) => process.stderr.write(`bench: ${msg}\n`);
const result = await measureFleetBench(progress);
if (process.argv[2]) fs.writeFileSync(process.argv[2], `${JSON.stringify(result, null, 2)}\n`);
process.stdout.write(fleetSection(result));
