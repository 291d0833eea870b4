// `make reliability`: every scenario in full, one after the other, with progress lines, then
// RELIABILITY.md (a table per area: scenario, figure, held, command) and RELIABILITY.json.
// Names on the command line run only those scenarios (and print their rows, writing nothing):
//   node test/run-ts.mjs test/reliability/run.ts fuzz soak
// With --update first, their rows replace those scenarios' rows in RELIABILITY.json and .md,
// and the others stay as they were; the table says when and at which commit each scenario ran:
//   node test/run-ts.mjs test/reliability/run.ts --update soak
// Bounded: each scenario bounds itself; the run gives each one its estimate twice over and
// records a scenario that is still going then as not held.
//
// Adding a scenario is one line in SCENARIOS.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from '../harness/collector.js';
import * as access from './access.js';
import * as crash from './crash.js';
import * as faults from './faults.js';
import * as fuzz from './fuzz.js';
import * as probe from './probe.js';
import * as restores from './restores.js';
import type { ReliabilityRow, Scenario } from './row.js';
import * as soak from './soak.js';

interface Entry {
  name: string;
  /** What it takes on this machine, roughly (s): for the estimate printed at the start. */
  estimateS: number;
  run: Scenario;
}

const SCENARIOS: Entry[] = [
  { name: 'fuzz', estimateS: 600, run: fuzz.run },
  { name: 'soak', estimateS: 720, run: soak.run },
  { name: 'access', estimateS: 60, run: access.run },
  { name: 'crash', estimateS: 240, run: crash.run },
  { name: 'faults', estimateS: 300, run: faults.run },
  { name: 'probe', estimateS: 660, run: probe.run },
  { name: 'restores', estimateS: 120, run: restores.run },
];

/** The table's sections, in this order; an area not listed comes after them. */
const AREAS = ['hostile input', 'crash safety', 'Firecracker faults', 'load', 'access', 'probe'];

const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);

/** When and where one scenario's rows were made. */
interface Run {
  date: string;
  minutes: number;
  commit: string;
  cpus: number;
  loadAverage: { start: number; end: number };
}

interface Report {
  runs: Record<string, Run>;
  rows: ReliabilityRow[];
}

const JSON_FILE = path.join(ROOT, 'RELIABILITY.json');
const MD_FILE = path.join(ROOT, 'RELIABILITY.md');

/** The scenario a row came from: the last word of the command that reproduces it. */
const scenarioOf = (r: ReliabilityRow) => r.command.trim().split(/\s+/).at(-1)!;

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const update = args[0] === '--update';
  const only = update ? args.slice(1) : args;
  if (update && only.length === 0) throw new Error('--update needs the names of the scenarios to run again');
  const unknown = only.filter((n) => !SCENARIOS.some((s) => s.name === n));
  if (unknown.length) throw new Error(`no scenario ${unknown.join(', ')}: one of ${SCENARIOS.map((s) => s.name).join(', ')}`);
  // Read before the long run: a file that cannot be updated fails now, not after it.
  const previous: Report | null = update ? readReport() : null;
  const chosen = only.length ? SCENARIOS.filter((s) => only.includes(s.name)) : SCENARIOS;
  const estimate = chosen.reduce((a, s) => a + s.estimateS, 0);
  log(
    `reliability: ${chosen.map((s) => s.name).join(', ')}; estimated ${Math.round(estimate / 60)} min, at most ${Math.round((2 * estimate) / 60)} min`,
  );
  const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
  const rows: ReliabilityRow[] = [];
  const runs: Record<string, Run> = {};
  for (const s of chosen) {
    log(`${s.name}: starting (about ${Math.round(s.estimateS / 60)} min)`);
    const t0 = Date.now();
    const load0 = os.loadavg()[0]!;
    const command = `node test/run-ts.mjs test/reliability/run.ts ${s.name}`;
    let timer: NodeJS.Timeout | undefined;
    const overdue = new Promise<ReliabilityRow[]>((resolve) => {
      timer = setTimeout(
        () =>
          resolve([
            {
              area: 'hostile input',
              scenario: `${s.name}: did not finish`,
              figure: `still running after ${2 * s.estimateS} s`,
              held: false,
              command,
            },
          ]),
        2 * s.estimateS * 1000,
      );
    });
    try {
      rows.push(...(await Promise.race([s.run({ full: true, log }), overdue])));
    } catch (err) {
      rows.push({ area: 'hostile input', scenario: `${s.name}: failed`, figure: String(err).slice(0, 300), held: false, command });
    } finally {
      clearTimeout(timer);
    }
    runs[s.name] = {
      date: new Date(t0).toISOString(),
      minutes: Math.round((Date.now() - t0) / 6000) / 10,
      commit,
      cpus: os.cpus().length,
      loadAverage: { start: load0, end: os.loadavg()[0]! },
    };
    log(`${s.name}: done in ${Math.round((Date.now() - t0) / 1000)} s`);
  }
  for (const r of rows) log(`${r.held ? 'held' : 'NOT HELD'} · ${r.area} · ${r.scenario}: ${r.figure}`);
  if (only.length && !update) return;
  const report: Report = previous
    ? {
        runs: { ...previous.runs, ...runs },
        // The rerun scenarios' rows take the place of their old ones; the others keep theirs.
        rows: [...previous.rows.filter((r) => !only.includes(scenarioOf(r))), ...rows],
      }
    : { runs, rows };
  report.rows.sort((a, b) => order(a) - order(b));
  fs.writeFileSync(JSON_FILE, `${JSON.stringify(report, null, 2)}\n`);
  fs.writeFileSync(MD_FILE, markdown(report));
  log(`wrote RELIABILITY.md and RELIABILITY.json (${report.rows.filter((r) => r.held).length}/${report.rows.length} held)`);
}

/** Rows in the order of SCENARIOS, each scenario's rows as it made them. */
function order(r: ReliabilityRow): number {
  const i = SCENARIOS.findIndex((s) => s.name === scenarioOf(r));
  return i < 0 ? SCENARIOS.length : i;
}

function readReport(): Report {
  let parsed: Partial<Report>;
  try {
    parsed = JSON.parse(fs.readFileSync(JSON_FILE, 'utf8')) as Partial<Report>;
  } catch (err) {
    throw new Error(`--update reads ${JSON_FILE}, which a full \`make reliability\` writes: ${(err as Error).message}`);
  }
  if (!parsed.runs || !Array.isArray(parsed.rows)) {
    throw new Error(`${JSON_FILE} is from an older runner (no per-scenario runs): run \`make reliability\` in full once`);
  }
  return { runs: parsed.runs, rows: parsed.rows };
}

function markdown(report: Report): string {
  const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  const { rows } = report;
  const areas = [...new Set([...AREAS, ...rows.map((r) => r.area)])].filter((a) => rows.some((r) => r.area === a));
  const out = [
    '# Reliability',
    '',
    'Produced by `make reliability` (test/reliability/run.ts); a scenario rerun alone with',
    '`node test/run-ts.mjs test/reliability/run.ts --update NAME` replaces its own rows. Each row says what was',
    'done, what came out, whether that meets what the scenario promises, and the command that reproduces it',
    'alone. `make test` runs each scenario small. Where and when each scenario ran (the machine may have been',
    'shared with other work: the load averages say how busy it was, and times and rates are upper bounds then):',
    '',
    '| scenario | ran at (UTC) | commit | minutes | CPUs | load average at start → end |',
    '|---|---|---|---|---|---|',
  ];
  for (const s of SCENARIOS) {
    const r = report.runs[s.name];
    if (!r) continue;
    out.push(
      `| ${s.name} | ${r.date.slice(0, 16).replace('T', ' ')} | ${r.commit} | ${r.minutes} | ${r.cpus} | ${r.loadAverage.start.toFixed(1)} → ${r.loadAverage.end.toFixed(1)} |`,
    );
  }
  out.push('');
  for (const area of areas) {
    out.push(`## ${area[0]!.toUpperCase()}${area.slice(1)}`, '', '| scenario | figure | held | command |', '|---|---|---|---|');
    for (const r of rows.filter((x) => x.area === area))
      out.push(`| ${cell(r.scenario)} | ${cell(r.figure)} | ${r.held ? 'yes' : '**no**'} | \`${cell(r.command)}\` |`);
    out.push('');
  }
  return `${out.join('\n')}`;
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
