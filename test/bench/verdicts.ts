// How fast verdicts land, measured over many simulated boots:
//   - bind → ready: from envd's `listen` phase marker (sent right before it binds :49983)
//     to the collector's `ready` state change, which is when the API answers ready;
//   - stuck after the stall threshold: from (last phase + stall-after) to the `stuck` state
//     change. The baseline is the threshold itself: the ratio says how much later than
//     asked the verdict came.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { allEvents, startCollector, waitForState, type CollectorProcess } from '../harness/collector.js';
import { startSandbox } from '../harness/sandbox.js';
import { waitFor } from '../support/wait.js';
import { summarize } from './stats.js';

export const STALL_MS = 1000;

async function boot(
  c: CollectorProcess,
  root: string,
  id: string,
  envd: string[],
  want: string,
  has: (events: any[]) => boolean,
): Promise<any[]> {
  const sb = await startSandbox({ id, root, envd });
  try {
    await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath: sb.udsPath });
    await waitForState(c, id, want, 30_000);
    // The verdict can come before the events it is timed against are stored: the listener
    // is seen bound in /proc before envd's own "listen" phase line is read from its output.
    let events: any[] = [];
    await waitFor(`${id}: the events timed`, async () => has((events = await allEvents(c, id))), { timeoutMs: 10_000 });
    return events;
  } finally {
    await sb.stop();
    await c.api('DELETE', `/v1/sandboxes/${id}`);
  }
}

/** Runs `count` boots of each kind, `parallel` at a time; returns latencies in ms. */
export async function measureVerdicts(count: number, parallel: number, progress: (msg: string) => void) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-b-'));
  const c = await startCollector({ args: ['--stall-after', `${STALL_MS}ms`, '--start-deadline', '60s'] });
  const bindToReady: number[] = [];
  const stuckLag: number[] = [];
  try {
    for (const kind of ['healthy', 'hung'] as const) {
      for (let done = 0; done < count; ) {
        const batch = Math.min(parallel, count - done);
        const runs = Array.from({ length: batch }, (_, i) => {
          const id = `${kind}-${done + i}`;
          return kind === 'healthy'
            ? boot(
                c,
                root,
                id,
                [],
                'ready',
                (events) =>
                  events.some((e) => e.kind === 'phase' && e.data.name === 'listen') &&
                  events.some((e) => e.kind === 'state' && e.data.state === 'ready'),
              ).then((events) => {
                const listen = events.find((e) => e.kind === 'phase' && e.data.name === 'listen');
                const ready = events.find((e) => e.kind === 'state' && e.data.state === 'ready');
                bindToReady.push(Date.parse(ready.at) - Date.parse(listen.at));
              })
            : boot(c, root, id, ['-hang-in', 'cgroup-manager'], 'stuck', (events) =>
                events.some((e) => e.kind === 'state' && e.data.state === 'stuck'),
              ).then((events) => {
                const last = events.filter((e) => e.kind === 'phase').at(-1);
                const stuck = events.find((e) => e.kind === 'state' && e.data.state === 'stuck');
                stuckLag.push(Date.parse(stuck.at) - (Date.parse(last.at) + STALL_MS));
              });
        });
        await Promise.all(runs);
        done += batch;
        progress(`${kind} boots: ${done}/${count}`);
      }
    }
  } finally {
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return { bindToReady: summarize(bindToReady), stuckLag: summarize(stuckLag) };
}
