// `make reliability`: every scenario in full, one after the other, with progress lines, then
// RELIABILITY.md (a table per area: scenario, figure, held, command) and RELIABILITY.json.
// Names on the command line run only those scenarios (and print their rows, writing nothing):
//   node test/run-ts.mjs test/reliability/run.ts fuzz soak
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

async function main(): Promise<void> {
  const only = process.argv.slice(2);
  const unknown = only.filter((n) => !SCENARIOS.some((s) => s.name === n));
  if (unknown.length) throw new Error(`no scenario ${unknown.join(', ')}: one of ${SCENARIOS.map((s) => s.name).join(', ')}`);
  const chosen = only.length ? SCENARIOS.filter((s) => only.includes(s.name)) : SCENARIOS;
  const estimate = chosen.reduce((a, s) => a + s.estimateS, 0);
  log(
    `reliability: ${chosen.map((s) => s.name).join(', ')}; estimated ${Math.round(estimate / 60)} min, at most ${Math.round((2 * estimate) / 60)} min`,
  );
  const load0 = os.loadavg()[0]!;
  const started = Date.now();
  const rows: ReliabilityRow[] = [];
  for (const s of chosen) {
    log(`${s.name}: starting (about ${Math.round(s.estimateS / 60)} min)`);
    const t0 = Date.now();
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
              command: `node test/run-ts.mjs test/reliability/run.ts ${s.name}`,
            },
          ]),
        2 * s.estimateS * 1000,
      );
    });
    try {
      rows.push(...(await Promise.race([s.run({ full: true, log }), overdue])));
    } catch (err) {
      rows.push({
        area: 'hostile input',
        scenario: `${s.name}: failed`,
        figure: String(err).slice(0, 300),
        held: false,
        command: `node test/run-ts.mjs test/reliability/run.ts ${s.name}`,
      });
    } finally {
      clearTimeout(timer);
    }
    log(`${s.name}: done in ${Math.round((Date.now() - t0) / 1000)} s`);
  }
  for (const r of rows) log(`${r.held ? 'held' : 'NOT HELD'} · ${r.area} · ${r.scenario}: ${r.figure}`);
  if (only.length) return;
  const meta = {
    date: new Date(started).toISOString(),
    minutes: Math.round((Date.now() - started) / 6000) / 10,
    commit: execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim(),
    cpus: os.cpus().length,
    loadAverage: { start: load0, end: os.loadavg()[0]! },
  };
  fs.writeFileSync(path.join(ROOT, 'RELIABILITY.json'), `${JSON.stringify({ ...meta, rows }, null, 2)}\n`);
  fs.writeFileSync(path.join(ROOT, 'RELIABILITY.md'), markdown(meta, rows));
  log(`wrote RELIABILITY.md and RELIABILITY.json (${rows.filter((r) => r.held).length}/${rows.length} held)`);
}

function markdown(
  meta: { date: string; minutes: number; commit: string; cpus: number; loadAverage: { start: number; end: number } },
  rows: ReliabilityRow[],
): string {
  const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  const areas = [...new Set([...AREAS, ...rows.map((r) => r.area)])].filter((a) => rows.some((r) => r.area === a));
  const out = [
    '# Reliability',
    '',
    `Produced by \`make reliability\` (test/reliability/run.ts) on ${meta.date.slice(0, 16).replace('T', ' ')} UTC at commit ${meta.commit}, in ${meta.minutes} min,`,
    `on a ${meta.cpus}-core machine shared with other work (load average ${meta.loadAverage.start.toFixed(1)} at the start, ${meta.loadAverage.end.toFixed(1)} at the end),`,
    'so times and rates here are upper bounds. Each row says what was done, what came out, whether that meets',
    'what the scenario promises, and the command that reproduces it alone. `make test` runs each scenario small.',
    '',
  ];
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
