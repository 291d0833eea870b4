// What tether.ts promises: a command started with diesWithUs goes when the process that
// spawned it is killed outright (no cleanup of its own runs), and one that is unshare with
// a PID namespace takes the namespace along. A control, started the usual way by the same
// process, outlives it: that is what the tether is for.

import { spawn } from 'node:child_process';
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

/** What a test started, to end should it fail: each pid with the command line it had, so a
 *  pid the kernel has since given to another process is left alone. */
const started = new Map<number, string>();
const cmdline = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return null;
  }
};
const track = (pids: number[]) => {
  for (const pid of pids) started.set(pid, cmdline(pid) ?? '');
};
afterEach(() => {
  for (const [pid, line] of started) {
    if (cmdline(pid) !== line) continue; // gone, as it should be (or not ours any more)
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

/** Starts a parent that spawns `commands`; resolves with it and the pids it printed. */
async function parentOf(commands: string[][]): Promise<{ parent: number; pids: number[] }> {
  const p = spawn(process.execPath, ['-e', PARENT, JSON.stringify(commands)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  p.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  const line = await waitFor('the parent to print its children', () => (out.includes('\n') ? out : null));
  const pids = line.trim().split(' ').map(Number);
  track([p.pid!]);
  return { parent: p.pid!, pids };
}

describe('diesWithUs', () => {
  it('has a command killed with the process that spawned it; a plain spawn outlives it', async () => {
    const { parent, pids } = await parentOf([diesWithUs(['sleep', '600']), ['sleep', '601']]);
    const [tethered, plain] = pids as [number, number];
    await waitFor('setpriv to exec sleep', () => cmdline(tethered)?.startsWith('sleep') || null);
    track(pids);
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
    track([unshare, ...namespace]);
    process.kill(parent, 'SIGKILL');
    await waitFor('every process of the namespace to be killed', () => ![unshare, ...namespace].some(alive) || null);
  });
});
