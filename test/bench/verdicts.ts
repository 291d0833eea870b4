// How fast verdicts land, measured over many simulated boots:
//   - bind → ready: from the moment envd's listener is bound to the collector's `ready` state
//     change, which is when the API answers ready;
//   - stuck after the stall threshold: from (last phase + stall-after) to the `stuck` state
//     change. The baseline is the threshold itself: the ratio says how much later than
//     asked the verdict came.
// Both start from the fake envd's own stamps (-stamp-file: the host's clock, as a simulated
// sandbox shares its kernel), not from the phase markers as the collector placed them: that
// placement is the collector's estimate of the guest's clock, late by however long the
// fastest message so far took to arrive (clockLag below, measured at the listen marker).
// The sandboxes' vsock devices run in a process of their own (vmm-host.ts), and the boots
// are awaited with the readiness long-poll, as an orchestrator would, not by polling.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PROBE_BIN, allEvents, settlesAs, startCollector, type CollectorProcess } from '../harness/collector.js';
import { startSandbox } from '../harness/sandbox.js';
import { waitFor } from '../support/wait.js';
import { runDelayMs } from './proc.js';
import { summarize } from './stats.js';
import { startVmmHost, type VmmHost } from './vmm-host.js';

export const STALL_MS = 1000;
/** Where the hung boots' fake envd hangs: their last phase, which the stall is timed from. */
const HANG_PHASE = 'cgroup-manager';

/** What one boot's fake envd stamped (host ms by phase name, and "bound"); `of` throws,
 *  naming the boot, for a stamp it does not have, rather than time a boot from nothing. */
interface Stamps {
  of(name: string): number;
}

function readStamps(file: string, id: string): Stamps {
  const at = new Map<string, number>();
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const [name, ms] = line.split(' ');
    if (name && ms) at.set(name, Number(ms));
  }
  return {
    of(name) {
      const ms = at.get(name);
      if (ms === undefined || !Number.isFinite(ms)) throw new Error(`${id}: the fake envd stamped no "${name}" (${file})`);
      return ms;
    },
  };
}

async function boot(
  c: CollectorProcess,
  vmm: VmmHost,
  root: string,
  id: string,
  envd: string[],
  want: 'ready' | 'stuck',
  has: (events: any[]) => boolean,
): Promise<{ events: any[]; stamps: Stamps; probeWaitMs: number }> {
  const stampFile = path.join(root, `${id}.stamps`);
  const sb = await startSandbox({ id, root, envd: [...envd, '-stamp-file', stampFile], device: vmm.device });
  try {
    await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath: sb.udsPath });
    await settlesAs(c, id, want);
    // How long the probe had waited for a CPU by then: five boots at a time contend for the cores.
    const probeWaitMs = runDelayMs(sb.pidsOf(PROBE_BIN)[0]!);
    // The verdict can come before the events it is timed against are stored: the listener
    // is seen bound in /proc before envd's own "listen" phase line is read from its output.
    let events: any[] = [];
    await waitFor(`${id}: the events timed`, async () => has((events = await allEvents(c, id))), { timeoutMs: 10_000 });
    return { events, stamps: readStamps(stampFile, id), probeWaitMs };
  } finally {
    await sb.stop();
    await c.api('DELETE', `/v1/sandboxes/${id}`);
  }
}

/** Runs `count` boots of each kind, `parallel` at a time; returns latencies in ms. */
export async function measureVerdicts(count: number, parallel: number, progress: (msg: string) => void) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-b-'));
  const vmm = startVmmHost();
  const c = await startCollector({ args: ['--stall-after', `${STALL_MS}ms`, '--start-deadline', '60s'] });
  const bindToReady: number[] = [];
  const stuckLag: number[] = [];
  const clockLag: number[] = [];
  const probeWait: number[] = [];
  let collectorWaitShare = Number.NaN;
  const collectorWait0 = runDelayMs(c.proc.pid!);
  const t0 = performance.now();
  const at = (e: any) => Date.parse(e.at);
  try {
    for (const kind of ['healthy', 'hung'] as const) {
      for (let done = 0; done < count; ) {
        const batch = Math.min(parallel, count - done);
        const runs = Array.from({ length: batch }, (_, i) => {
          const id = `${kind}-${done + i}`;
          return kind === 'healthy'
            ? boot(
                c,
                vmm,
                root,
                id,
                [],
                'ready',
                (events) =>
                  events.some((e) => e.kind === 'phase' && e.data.name === 'listen') &&
                  events.some((e) => e.kind === 'state' && e.data.state === 'ready'),
              ).then(({ events, stamps, probeWaitMs }) => {
                probeWait.push(probeWaitMs);
                const listen = events.find((e) => e.kind === 'phase' && e.data.name === 'listen');
                const ready = events.find((e) => e.kind === 'state' && e.data.state === 'ready');
                bindToReady.push(at(ready) - stamps.of('bound'));
                clockLag.push(at(listen) - stamps.of('listen'));
              })
            : boot(c, vmm, root, id, ['-hang-in', HANG_PHASE], 'stuck', (events) =>
                events.some((e) => e.kind === 'state' && e.data.state === 'stuck'),
              ).then(({ events, stamps }) => {
                const stuck = events.find((e) => e.kind === 'state' && e.data.state === 'stuck');
                stuckLag.push(at(stuck) - (stamps.of(HANG_PHASE) + STALL_MS));
              });
        });
        await Promise.all(runs);
        done += batch;
        progress(`${kind} boots: ${done}/${count}`);
      }
      if (kind === 'healthy') collectorWaitShare = (runDelayMs(c.proc.pid!) - collectorWait0) / (performance.now() - t0);
    }
  } finally {
    await c.stop();
    await vmm.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return {
    bindToReady: summarize(bindToReady),
    stuckLag: summarize(stuckLag),
    clockLag: summarize(clockLag),
    /** Run-queue waits during the healthy boots: each probe's main thread up to its `ready`
     *  (ms), and the collector's main thread's share of the time. */
    cpuWait: { probeMs: summarize(probeWait), collectorShare: collectorWaitShare },
    /** Every boot's figure, in the order the boots ended. */
    values: { bindToReady, stuckLag, clockLag },
  };
}
