// Automatic dumps: how long after the `stuck` verdict the dump taken on entering stuck is
// stored. Simulated sandboxes whose fake envd hangs in start-up (-hang-in cgroup-manager),
// a few at a time (their vsock devices in a process of their own, vmm-host.ts), against one
// collector with a short stall threshold; per boot, the `dump` event with trigger "auto"
// minus the `stuck` state event, both from the sandbox's history (/v1/sandboxes/:id/events;
// both are host-clock times the collector recorded).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { allEvents, settlesAs, startCollector, type CollectorProcess } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { startSandbox } from '../harness/sandbox.js';
import { summarize } from './stats.js';
import { startVmmHost, type VmmHost } from './vmm-host.js';

const STALL_MS = 1000;

async function hungBoot(
  c: CollectorProcess,
  vmm: VmmHost,
  root: string,
  id: string,
): Promise<{ ms: number; mode: string; complete: boolean }> {
  const sb = await startSandbox({ id, root, envd: ['-hang-in', 'cgroup-manager'], device: vmm.device });
  try {
    await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath: sb.udsPath });
    await settlesAs(c, id, 'stuck');
    const dump = await waitFor(
      `the automatic dump of ${id}`,
      async () => (await allEvents(c, id, 'dump')).find((e) => e.data.trigger === 'auto'),
      { timeoutMs: 20_000, intervalMs: 20 },
    );
    const stuck = (await allEvents(c, id, 'state')).find((e) => e.data.state === 'stuck');
    return {
      ms: Date.parse(dump.at) - Date.parse(stuck.at),
      mode: dump.data.mode,
      complete: dump.data.complete === true && !dump.data.error,
    };
  } finally {
    await sb.stop();
    await c.api('DELETE', `/v1/sandboxes/${id}`);
  }
}

export async function measureAutoDumps(count: number, parallel: number, progress: (m: string) => void) {
  const vmm = startVmmHost();
  const c = await startCollector({ args: ['--stall-after', `${STALL_MS}ms`, '--start-deadline', '60s'] });
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-ad-'));
  const ms: number[] = [];
  let failed = 0;
  const modes = new Set<string>();
  try {
    for (let done = 0; done < count; ) {
      const batch = Math.min(parallel, count - done);
      const results = await Promise.all(Array.from({ length: batch }, (_, i) => hungBoot(c, vmm, root, `auto-${done + i}`)));
      for (const r of results) {
        ms.push(r.ms);
        modes.add(r.mode);
        if (!r.complete) failed++;
      }
      done += batch;
      progress(`hung boots for auto dumps: ${done}/${count}`);
    }
  } finally {
    await c.stop();
    await vmm.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return { stallMs: STALL_MS, stuckToDump: summarize(ms), modes: [...modes], failed };
}
