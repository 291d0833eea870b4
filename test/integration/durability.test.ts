// The collector acks an event only after it is committed, and the probe replays whatever
// was not acked: so a collector SIGKILLed mid-boot and restarted loses nothing and
// duplicates nothing.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { allEvents, startCollector, waitForState, type CollectorProcess } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { startSandbox, type Sandbox } from '../harness/sandbox.js';
import { FAKE_ENVD_PHASES } from '../harness/fake-envd.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

it('a collector killed and restarted mid-boot loses and duplicates no event', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
  cleanup.push(() => fs.rmSync(root, { recursive: true, force: true }));
  const args = ['--stall-after', '10s'];
  let collector: CollectorProcess = await startCollector({ args });
  const dataDir = collector.dataDir;
  cleanup.push(() => fs.rmSync(dataDir, { recursive: true, force: true }));
  cleanup.push(() => collector.stop());

  // A slow boot: 12 phases, 300 ms each.
  const sb: Sandbox = await startSandbox({ id: 'slow', root, envd: ['-slow', '300ms'] });
  cleanup.push(() => sb.stop());
  await collector.api('PUT', '/v1/sandboxes/slow', { udsPath: sb.udsPath });

  await waitFor('a few phases stored', async () => (await allEvents(collector, 'slow', 'phase')).length >= 3);
  collector.proc.kill('SIGKILL');
  await new Promise((r) => collector.proc.once('exit', r));
  // Phases keep coming while no collector listens: the probe holds them in its ring.
  await new Promise((r) => setTimeout(r, 1200));
  collector = await startCollector({ dataDir, args });

  await waitForState(collector, 'slow', 'ready', 20_000);
  await waitFor('READY=1 stored', async () => (await allEvents(collector, 'slow', 'phase')).some((e) => e.data.ready));

  const events = await allEvents(collector, 'slow');
  const seqs = events.filter((e) => e.seq !== null).map((e) => e.seq as number);
  const sorted = [...seqs].sort((a, b) => a - b);
  // Exactly 1..N, each once: nothing lost, nothing twice.
  expect(sorted).toEqual(Array.from({ length: sorted.length }, (_, i) => i + 1));
  expect(new Set(seqs).size).toBe(seqs.length);
  expect(events.filter((e) => e.kind === 'gap')).toHaveLength(0);
  // Every phase arrived once, in order, across the two sessions.
  const names = events.filter((e) => e.kind === 'phase' && e.data.name).map((e) => e.data.name);
  expect(names).toEqual([...FAKE_ENVD_PHASES]);
  // A collector restart is a new session of the same life of the VM, not a new generation.
  const detail = (await collector.api('GET', '/v1/sandboxes/slow')).body;
  expect([detail.generation, detail.session]).toEqual([1, 2]);
  const probeEvents = events.filter((e) => e.seq !== null);
  expect(new Set(probeEvents.map((e) => e.generation))).toEqual(new Set([1]));
  expect([...new Set(probeEvents.map((e) => e.session))].sort()).toEqual([1, 2]);
});
