// What tether.ts promises: a command started with diesWithUs goes when the process that
// spawned it is killed outright (no cleanup of its own runs), and one that is unshare with
// a PID namespace takes the namespace along. A control, started the usual way by the same
// process, outlives it: that is what the tether is for.

import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait.js';
import { descendants, namespacesAvailable } from './sandbox.js';
import { diesWithUs } from './tether.js';

// Spawns each command given (JSON argv lists), prints their pids on one line, then idles.
const PARENT = `
const { spawn } = require('node:child_process');
const pids = JSON.parse(process.argv[1]).map(([c, ...a]) => spawn(c, a, { stdio: 'ignore' }).pid);
process.stdout.write(pids.join(' ') + '\\n');
setInterval(() => {}, 1000);
`;

/** What a test started, to end should it fail: the parents (children of this process), and
 *  by pid what they started, each with the command names it may run under, so that a pid the
 *  kernel has since given to another process is left alone. */
const parents: ChildProcess[] = [];
const started = new Map<number, string[]>();
const cmdline = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return null;
  }
};
afterEach(() => {
  for (const p of parents.splice(0)) p.kill('SIGKILL');
  for (const [pid, names] of started) {
    const line = cmdline(pid);
    if (line === null || !names.some((n) => line.startsWith(`${n}\0`))) continue; // gone, as it should be
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  started.clear();
});

/** Running (a zombie waiting for its reaper counts as gone). */
function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** Starts a parent that spawns `commands`; resolves with its pid and the pids it printed. */
async function parentOf(commands: string[][]): Promise<{ parent: number; pids: number[] }> {
  const p = spawn(process.execPath, ['-e', PARENT, JSON.stringify(commands)], { stdio: ['ignore', 'pipe', 'inherit'] });
  parents.push(p);
  let out = '';
  p.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  const line = await waitFor('the parent to print its children', () => (out.includes('\n') ? out : null));
  const pids = line.trim().split(' ').map(Number);
  // Each under its command's name, or setpriv's until setpriv has run it.
  const nameOf = (argv: string[]) => (argv[0] === 'setpriv' ? argv[argv.indexOf('--') + 1]! : argv[0]!);
  pids.forEach((pid, i) => started.set(pid, ['setpriv', nameOf(commands[i]!)]));
  return { parent: p.pid!, pids };
}

describe('diesWithUs', () => {
  it('has a command killed with the process that spawned it; a plain spawn outlives it', async () => {
    const { parent, pids } = await parentOf([diesWithUs(['sleep', '600']), ['sleep', '601']]);
    const [tethered, plain] = pids as [number, number];
    await waitFor('setpriv to run sleep', () => cmdline(tethered)?.startsWith('sleep\0') || null);
    expect(alive(tethered) && alive(plain)).toBe(true);
    process.kill(parent, 'SIGKILL');
    await waitFor('the tethered sleep to be killed', () => !alive(tethered) || null);
    expect(alive(plain)).toBe(true);
  });

  it.skipIf(!namespacesAvailable())('takes a PID namespace under unshare --kill-child along', async () => {
    const inside = ['unshare', '--pid', '--fork', '--kill-child=SIGKILL', '--', 'sh', '-c', 'sleep 600 & sleep 601 & wait'];
    const { parent, pids } = await parentOf([diesWithUs(inside)]);
    const unshare = pids[0]!;
    const namespace = await waitFor('the namespace to run its two sleeps', () => {
      const all = descendants(unshare);
      return all.length === 3 ? all : null;
    });
    for (const pid of namespace) started.set(pid, ['sh', 'sleep']);
    process.kill(parent, 'SIGKILL');
    await waitFor('every process of the namespace to be killed', () => ![unshare, ...namespace].some(alive) || null);
  });
});
