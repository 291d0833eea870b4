// Sessions and generations (the lesson of seed 003): a generation is a life of the VM (a
// boot or a restore), a session one connection. A snapshot's transport reset ends every
// connection and the probe comes back on a fresh one: by itself that is a new session; with
// the evidence of a restore (the kernel's NEW_VMGENID, the orchestrator's hint) a new
// generation, and the two lives' events stay apart. Clones restored from one snapshot (same
// probe memory, different sockets) are different sandboxes; a restore that moves uds_path is
// followed and is a new generation.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { initialStatus } from '@vsockdiag/proto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { allEvents, cli, startCollector, waitForState, type CollectorProcess } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { ProbeClient } from '../harness/probe-client.js';
import { startSandbox, type Sandbox } from '../harness/sandbox.js';
import { sendUevent } from '../harness/uevent.js';

let collector: CollectorProcess;
let root: string;
const cleanup: Array<() => Promise<void> | void> = [];

beforeAll(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
  collector = await startCollector();
});
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});
afterAll(async () => {
  await collector?.stop();
  fs.rmSync(root, { recursive: true, force: true });
});

async function readySandbox(id: string): Promise<Sandbox> {
  const sb = await startSandbox({ id, root, envd: [] });
  cleanup.push(() => sb.stop());
  await collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: sb.udsPath });
  await waitForState(collector, id, 'ready');
  return sb;
}

describe('generations', () => {
  it('a transport reset alone (a dropped link) → the probe reconnects on session 2 of generation 1', async () => {
    const sb = await readySandbox('reset');
    sb.vm.reset();
    await waitFor('session 2', async () => {
      const d = (await collector.api('GET', '/v1/sandboxes/reset')).body;
      return d.session === 2 && d.connected;
    });
    sb.notify('PHASE=after-reset');
    await waitFor('the new phase', async () => (await allEvents(collector, 'reset', 'phase')).some((e) => e.data.name === 'after-reset'));
    const d = (await collector.api('GET', '/v1/sandboxes/reset')).body;
    expect([d.generation, d.session]).toEqual([1, 2]);
    const events = await allEvents(collector, 'reset');
    expect(new Set(events.map((e) => e.generation))).toEqual(new Set([1]));
    const open2 = events.find((e) => e.kind === 'session.open' && e.session === 2);
    // The probe said where its link was lost: everything before it was already durable.
    expect(open2.data.lostAtSeq).toBe(open2.data.ack);
    await waitForState(collector, 'reset', 'ready');
  });

  it("a restore: the transport reset with the guest kernel's NEW_VMGENID → generation 2, the lives kept apart", async (ctx) => {
    const sb = await readySandbox('restore');
    if (!sb.isolated) return ctx.skip(); // the uevent goes into the sandbox's own network namespace only
    const before = await allEvents(collector, 'restore');
    const maxSeq1 = Math.max(...before.filter((e) => e.seq !== null).map((e) => e.seq));
    const [probePid] = sb.pidsOf('vsockdiag-probe');
    sendUevent(probePid!);
    sb.vm.reset();
    await waitFor('generation 2', async () => (await collector.api('GET', '/v1/sandboxes/restore')).body.generation === 2);
    sb.notify('PHASE=after-restore\nSTATUS=resumed');
    await waitFor('the new phase', async () =>
      (await allEvents(collector, 'restore', 'phase')).some((e) => e.data.name === 'after-restore'),
    );

    const d = (await collector.api('GET', '/v1/sandboxes/restore')).body;
    expect(d.generationInfo).toMatchObject({ generation: 2, cause: 'vmgenid' });
    const gen1 = (await collector.api('GET', '/v1/sandboxes/restore/events?generation=1&limit=1000')).body.events;
    const gen2 = (await collector.api('GET', '/v1/sandboxes/restore/events?generation=2&limit=1000')).body.events;
    expect(gen1.every((e: any) => e.generation === 1)).toBe(true);
    expect(gen2.every((e: any) => e.generation === 2)).toBe(true);
    // Every probe event of the first life came before the kernel's word, every one of the second after it.
    const genid = gen2.find((e: any) => e.kind === 'vm.genid');
    expect(genid.seq).toBeGreaterThan(maxSeq1);
    expect(gen1.filter((e: any) => e.seq !== null).every((e: any) => e.seq < genid.seq)).toBe(true);
    expect(gen2.filter((e: any) => e.seq !== null).every((e: any) => e.seq >= genid.seq)).toBe(true);
    const phase = gen2.find((e: any) => e.kind === 'phase' && e.data.name === 'after-restore');
    expect(phase.seq).toBeGreaterThan(genid.seq);
    const seqs = [...gen1, ...gen2].filter((e: any) => e.seq !== null).map((e: any) => e.seq);
    expect(new Set(seqs).size).toBe(seqs.length);
    await waitForState(collector, 'restore', 'ready');
    expect(sb.vm.stats().guestInitiated).toBeGreaterThanOrEqual(2);
  });

  it('a restore the orchestrator announced (lifecycle pause) → generation 2 on the next connection', async () => {
    const sb = await readySandbox('hinted');
    const said = await cli(collector, ['lifecycle', 'hinted', 'pause']);
    expect(said.code, said.stderr).toBe(0);
    expect(said.stdout).toMatch(/^hinted: paused \(generation 1, session 1\); the next connection opens a new generation/);
    expect((await collector.api('GET', '/v1/sandboxes/hinted')).body).toMatchObject({ state: 'paused', expectNewGeneration: true });
    sb.vm.reset();
    await waitFor('generation 2', async () => {
      const d = (await collector.api('GET', '/v1/sandboxes/hinted')).body;
      return d.generation === 2 && d.connected;
    });
    const d = await waitForState(collector, 'hinted', 'ready');
    expect([d.generation, d.session, d.generationInfo.cause, d.pausedSince]).toEqual([2, 2, 'lifecycle', null]);
  });

  it('a reset that never surfaces as a socket error (blackholed link) is caught by the idle timeout', async () => {
    const sb = await readySandbox('blackhole');
    sb.vm.blackhole(true);
    const silent = await waitForState(collector, 'blackhole', 'silent', 15_000);
    expect(silent.reason).toMatch(/ERR_IDLE/);
    sb.vm.blackhole(false);
    const back = await waitForState(collector, 'blackhole', 'ready', 15_000);
    // The idle timeout ended the session; the same life of the VM goes on in the next.
    expect([back.generation, back.session]).toEqual([1, 2]);
  });

  it('a restore that moves uds_path (vsock_override) is followed after re-registration, as a new generation', async () => {
    const sb = await readySandbox('moved');
    const newPath = path.join(sb.dir, 'moved.sock');
    await collector.api('PUT', '/v1/sandboxes/moved', { udsPath: newPath });
    await sb.vm.moveUds(newPath);
    await waitFor('generation 2 on the new path', async () => {
      const d = (await collector.api('GET', '/v1/sandboxes/moved')).body;
      return d.generation === 2 && d.connected && d.udsPath === newPath;
    });
    expect((await collector.api('GET', '/v1/sandboxes/moved')).body.generationInfo.cause).toBe('uds-moved');
    await waitForState(collector, 'moved', 'ready');
    expect(fs.existsSync(`${newPath}_52000`)).toBe(true);
    expect(fs.existsSync(`${sb.udsPath}_52000`)).toBe(false);
  });

  it('one snapshot restored into two sandboxes (same probe memory) yields two separate sandboxes', async () => {
    const dirs = ['clone-a', 'clone-b'].map((id) => {
      const d = path.join(root, id);
      fs.mkdirSync(d, { recursive: true });
      return { id, uds: path.join(d, 'v.sock') };
    });
    for (const d of dirs) {
      expect((await collector.api('PUT', `/v1/sandboxes/${d.id}`, { udsPath: d.uds })).status).toBe(201);
    }
    // Identical guest memory: same instance id, same session counter, same last seq.
    const status = initialStatus(49983);
    const memory = { instanceId: 'c10ec10ec10ec10e', generation: 3, lastSeq: 0, status };
    const a = new ProbeClient({ path: `${dirs[0]!.uds}_52000`, ...memory });
    const b = new ProbeClient({ path: `${dirs[1]!.uds}_52000`, ...memory });
    cleanup.push(
      () => a.close(),
      () => b.close(),
    );
    expect(await a.connect()).toBe(0);
    expect(await b.connect()).toBe(0);
    // Each clone goes its own way from here.
    await a.waitAcked(
      a.events([
        { kind: 'phase', name: 'only-in-a' },
        { kind: 'phase', name: 'a-again' },
      ]),
    );
    await b.waitAcked(b.events([{ kind: 'phase', name: 'only-in-b' }]));

    const ea = await allEvents(collector, 'clone-a', 'phase');
    const eb = await allEvents(collector, 'clone-b', 'phase');
    expect(ea.map((e) => e.data.name)).toEqual(['only-in-a', 'a-again']);
    expect(eb.map((e) => e.data.name)).toEqual(['only-in-b']);
    const da = (await collector.api('GET', '/v1/sandboxes/clone-a')).body;
    const db = (await collector.api('GET', '/v1/sandboxes/clone-b')).body;
    expect(da.probe.instanceId).toBe(db.probe.instanceId);
    expect(da.generation).toBe(1);
    expect(db.generation).toBe(1);
    expect(da.phases.map((p: any) => p.name)).not.toContain('only-in-b');

    // The source VM resuming on clone-a's socket (same memory, same session counter) is
    // another timeline: the collector must not claim its seqs are already stored.
    a.close();
    await waitForState(collector, 'clone-a', 'silent');
    const again = new ProbeClient({ path: `${dirs[0]!.uds}_52000`, ...memory, generation: 3, lastSeq: 0 });
    cleanup.push(() => again.close());
    expect(await again.connect()).toBe(0);
    const next = new ProbeClient({ path: `${dirs[0]!.uds}_52000`, ...memory, generation: 4, lastSeq: 2 });
    cleanup.push(() => next.close());
    expect(await next.connect()).toBe(2); // a later session of the same timeline: 1..2 are durable
  });
});
