// The probe's V8 flag changes (v8-flags.ts) in a real V8: a plain Node, in a child process,
// goes through every change the probe makes (lean once up, settled and not, a dump and back),
// running the same regular expressions and allocating between them. A flag V8 cannot change
// in a running process crashes that child; the control shows the check sees such a crash.
import { spawnSync } from 'node:child_process';
import { expect, it } from 'vitest';
import { FOR_DUMPS, LEAN } from '../src/v8-flags.js';

/** Runs each flag string in turn in a fresh Node, with regular expressions run in every phase. */
function throughFlags(phases: string[]): { status: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string } {
  const script = `
    const v8 = require('node:v8');
    // A few patterns of the kinds the probe runs: captures, classes, alternation, anchors.
    const patterns = [/^(\\d+) \\((.*)\\) (\\S)/, /k\\d+0\\./, /(?:error|warn)=(\\w+)/i, new RegExp('^envd startup: (.+)$')];
    const lines = ['12 (envd) S 1 2', 'k100.5', 'level WARN=disk', 'envd startup: creating cgroup manager'];
    let hits = 0;
    const run = () => { for (let i = 0; i < 200; i++) for (const re of patterns) if (re.test(lines[i % lines.length] + i)) hits++; };
    let keep = [];
    const churn = () => { for (let i = 0; i < 20000; i++) { keep.push({ i, s: 'x' + i }); if (keep.length > 2000) keep = []; } };
    run();
    for (const flags of ${JSON.stringify(phases)}) {
      v8.setFlagsFromString(flags);
      run();
      churn();
      run();
    }
    console.log('survived', hits > 0);
  `;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

it('survives every change of flags the probe makes, with regular expressions run across them', () => {
  const settled = (on: boolean) => `${LEAN} ${on ? '--gc-global' : '--no-gc-global'}`;
  // Up (lean), settled, a dump, back settled, unsettled, a dump, back: twice over.
  const life = [settled(false), settled(true), FOR_DUMPS, settled(true), settled(false), FOR_DUMPS, settled(false)];
  const r = throughFlags([...life, ...life]);
  expect(r.signal, r.stderr).toBeNull();
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout.trim()).toBe('survived true');
});

it('control: a flag this V8 cannot change at run time (--regexp-interpret-all) crashes the same child', () => {
  // If a Node update makes this pass, the flag became safe to change: v8-flags.ts may use it again.
  const r = throughFlags(['--regexp-interpret-all', '--no-regexp-interpret-all']);
  expect(r.status).not.toBe(0);
  expect(r.signal).toBe('SIGSEGV');
});
