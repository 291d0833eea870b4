// Sessions and generations against a live collector: a reconnect, a probe restart in the
// same boot and a collector restart are new sessions of the same generation; each piece of
// evidence of a new life opens one; events are filed under the life they were made in, also
// when they arrive resent on the next life's session; the orchestrator's lifecycle hints.

import path from 'node:path';
import type { CollectorMessage, EventBody, ProbeEvent } from '@vsockdiag/proto';
import { afterEach, describe, expect, it } from 'vitest';
import { ProbeClient, type ProbeClientOptions } from '../../test/harness/probe-client.js';
import { waitFor } from '../../test/support/wait.js';
import { inProcessCollectors, type StartedCollector } from './support/collector.js';

// Each test runs a collector and probes (several connections, a restart): 30 s each, for a
// machine shared with other suites.
const collectors = inProcessCollectors('vd-gen-');
const probes: ProbeClient[] = [];
afterEach(() => {
  for (const p of probes.splice(0)) p.close();
});

type Json = Record<string, any>;
const BOOT = 'b0d5e1d0-0000-4000-8000-000000000001';

async function api(c: StartedCollector, method: string, route: string, body?: unknown): Promise<{ status: number; json: Json }> {
  const res = await fetch(c.url + route, {
    method,
    ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Json) : {} };
}

async function start(): Promise<{ c: StartedCollector; socket: string; uds: string }> {
  const c = await collectors.start();
  const uds = path.join(collectors.dir, 'v.sock');
  expect((await api(c, 'PUT', '/v1/sandboxes/vm', { udsPath: uds })).status).toBe(201);
  return { c, socket: `${uds}_52000`, uds };
}

/** A probe; its guest clocks run with the host's unless told otherwise. */
function probe(socket: string, over: Partial<ProbeClientOptions> = {}): ProbeClient {
  const p = new ProbeClient({
    path: socket,
    instanceId: 'aaaaaaaaaaaaaaaa',
    bootId: BOOT,
    sinceBootMs: () => 100_000 + performance.now(),
    ...over,
  });
  probes.push(p);
  return p;
}

const phases = (...names: string[]): EventBody[] => names.map((name) => ({ kind: 'phase', name }));

async function events(c: StartedCollector, query = ''): Promise<Json[]> {
  return (await api(c, 'GET', `/v1/sandboxes/vm/events?limit=1000${query}`)).json.events;
}

/** [name, generation, session] of every phase event. */
async function phaseRows(c: StartedCollector): Promise<Array<[string, number, number]>> {
  return (await events(c, '&kind=phase')).map((e) => [e.data.name, e.generation, e.session]);
}

const detail = async (c: StartedCollector) => (await api(c, 'GET', '/v1/sandboxes/vm')).json;

async function closed(c: StartedCollector, p: ProbeClient): Promise<void> {
  p.close();
  await p.closed;
  await waitFor('the session closed', async () => !(await detail(c)).connected);
}

describe('new sessions of the same generation', { timeout: 30_000 }, () => {
  it('a dropped link, then a probe restarted in the same boot', async () => {
    const { c, socket } = await start();
    const a = probe(socket);
    await a.connect();
    await a.waitAcked(a.events(phases('one', 'two')));
    await closed(c, a);

    const again = probe(socket, { generation: 2, lastSeq: 2 });
    expect(await again.connect()).toBe(2);
    await again.waitAcked(again.events(phases('three')));
    await closed(c, again);

    // Another probe process, same boot: it numbers from 1 again.
    const restarted = probe(socket, { instanceId: 'bbbbbbbbbbbbbbbb' });
    expect(await restarted.connect()).toBe(0);
    await restarted.waitAcked(restarted.events(phases('four')));

    const d = await detail(c);
    expect([d.generation, d.session]).toEqual([1, 3]);
    expect(d.generationInfo).toMatchObject({ generation: 1, cause: 'first' });
    expect(await phaseRows(c)).toEqual([
      ['one', 1, 1],
      ['two', 1, 1],
      ['three', 1, 2],
      ['four', 1, 3],
    ]);
    expect((await events(c, '&kind=generation')).length).toBe(1);
  });

  it('a collector restart', async () => {
    const { c, socket } = await start();
    const a = probe(socket, { heartbeatMs: 200 });
    await a.connect();
    await a.waitAcked(a.events(phases('before')));
    await collectors.stop(c.collector);
    a.close();
    const c2 = await collectors.start();
    const b = probe(socket, { generation: 2, lastSeq: 1 });
    expect(await b.connect()).toBe(1);
    await b.waitAcked(b.events(phases('after')));
    expect(await phaseRows(c2)).toEqual([
      ['before', 1, 1],
      ['after', 1, 2],
    ]);
    const list = (await api(c2, 'GET', '/v1/sandboxes')).json.sandboxes;
    expect(list.map((s: Json) => [s.id, s.generation, s.session])).toEqual([['vm', 1, 2]]);
  });
});

describe('evidence of a new life', { timeout: 30_000 }, () => {
  it('a new boot id', async () => {
    const { c, socket } = await start();
    await probe(socket).connect();
    await closed(c, probes[0]!);
    await probe(socket, { instanceId: 'cccccccccccccccc', bootId: 'another-boot' }).connect();
    const d = await detail(c);
    expect([d.generation, d.session]).toEqual([2, 2]);
    expect(d.generationInfo).toMatchObject({ cause: 'boot' });
  });

  it('a restore seen in the clocks: events made before it, resent after, stay in the life they were made in', async () => {
    const { c, socket } = await start();
    const a = probe(socket);
    await a.connect();
    await a.waitAcked(a.events(phases('p1', 'p2', 'p3')));
    const tBefore = 100_000 + performance.now();
    await closed(c, a);
    // The snapshot was taken with events 4 and 5 made but not sent; the restored guest's wall
    // clock runs an hour behind (from the snapshot moment), and its link was lost at seq 5.
    const b = probe(socket, { generation: 2, lastSeq: 5, lostAtSeq: 5, wallMs: () => Date.now() - 3_600_000 });
    expect(await b.connect()).toBe(3);
    const made = (seq: number, name: string, t: number): ProbeEvent => ({ kind: 'phase', name, seq, t });
    b.send({ type: 'events', events: [made(4, 'p4', tBefore), made(5, 'p5', tBefore), made(6, 'p6', tBefore + 10)] });
    b.seq = 6;
    await b.waitAcked(6);
    expect(await phaseRows(c)).toEqual([
      ['p1', 1, 1],
      ['p2', 1, 1],
      ['p3', 1, 1],
      ['p4', 1, 2],
      ['p5', 1, 2],
      ['p6', 2, 2],
    ]);
    const d = await detail(c);
    expect(d.generationInfo).toMatchObject({ generation: 2, cause: 'clock', fromSeq: 6 });
  });

  it("the guest's time since boot going back", async () => {
    const { c, socket } = await start();
    await probe(socket).connect();
    await closed(c, probes[0]!);
    await probe(socket, { generation: 2, sinceBootMs: () => 1000 + performance.now() }).connect();
    expect((await detail(c)).generationInfo).toMatchObject({ generation: 2, cause: 'monotonic' });
  });

  it('a NEW_VMGENID event opens a generation where it stands; after a restore the hello found, it only moves the cut', async () => {
    const { c, socket } = await start();
    const a = probe(socket);
    await a.connect();
    await a.waitAcked(a.events([...phases('g1'), { kind: 'vm.genid', devpath: '/devices/virtual/misc/vmgenid' }, ...phases('g2')]));
    expect(await phaseRows(c)).toEqual([
      ['g1', 1, 1],
      ['g2', 2, 1],
    ]);
    expect((await events(c, '&kind=vm.genid'))[0]).toMatchObject({ generation: 2, seq: 2 });
    await closed(c, a);

    // The next restore: the hello's clocks show it (cut after seq 5, where the link was
    // lost), and the kernel's uevent, read before the reset, sits at seq 4: it is the same
    // restore, and the life began at 4.
    const b = probe(socket, { generation: 2, lastSeq: 5, lostAtSeq: 5, wallMs: () => Date.now() - 600_000 });
    expect(await b.connect()).toBe(3);
    const t = 100_000 + performance.now();
    b.send({
      type: 'events',
      events: [
        { kind: 'vm.genid', seq: 4, t },
        { kind: 'phase', name: 'g3', seq: 5, t },
        { kind: 'phase', name: 'g3-later', seq: 6, t },
        { kind: 'vm.genid', seq: 7, t },
      ] as ProbeEvent[],
    });
    b.seq = 7;
    await b.waitAcked(7);
    const d = await detail(c);
    expect(d.generation).toBe(4); // the second vm.genid in the same session is a restore of its own
    expect((await phaseRows(c)).slice(2)).toEqual([
      ['g3', 3, 2],
      ['g3-later', 3, 2],
    ]);
    expect((await events(c, '&kind=generation')).map((e) => [e.data.generation, e.data.cause])).toEqual([
      [1, 'first'],
      [2, 'vmgenid'],
      [3, 'clock'],
      [4, 'vmgenid'],
    ]);
  });

  it('a moved uds_path', async () => {
    const { c, socket, uds } = await start();
    await probe(socket).connect();
    await closed(c, probes[0]!);
    const moved = `${uds}.moved`;
    expect((await api(c, 'PUT', '/v1/sandboxes/vm', { udsPath: moved })).status).toBe(200);
    await probe(`${moved}_52000`, { generation: 2 }).connect();
    expect((await detail(c)).generationInfo).toMatchObject({ generation: 2, cause: 'uds-moved' });
  });
});

describe('lifecycle hints', { timeout: 30_000 }, () => {
  it('pause shows paused (not silent) and survives a collector restart; the next connection is a new generation', async () => {
    const { c, socket } = await start();
    const a = probe(socket);
    await a.connect();
    const paused = await api(c, 'POST', '/v1/sandboxes/vm/lifecycle', { event: 'pause' });
    expect(paused.status).toBe(200);
    expect(paused.json).toMatchObject({ id: 'vm', event: 'pause', state: 'paused', generation: 1, session: 1, expectNewGeneration: true });
    expect(paused.json.pausedSince).toEqual(expect.any(String));
    await closed(c, a);
    expect((await detail(c)).state).toBe('paused');

    await collectors.stop(c.collector);
    const c2 = await collectors.start();
    expect((await detail(c2)).state).toBe('paused');
    await probe(socket, { generation: 2 }).connect();
    const d = await detail(c2);
    expect([d.state, d.generation, d.session, d.pausedSince]).toEqual(['booting', 2, 2, null]);
    expect(d.generationInfo).toMatchObject({ cause: 'lifecycle' });
    expect((await events(c2, '&kind=lifecycle')).map((e) => [e.data.event, e.generation])).toEqual([['pause', 1]]);
  });

  it('resume ends paused; a VM seen to carry on after a pause or a snapshot keeps its generation', async () => {
    const { c, socket } = await start();
    const a = probe(socket);
    await a.connect();
    await api(c, 'POST', '/v1/sandboxes/vm/lifecycle', { event: 'pause' });
    const resumed = await api(c, 'POST', '/v1/sandboxes/vm/lifecycle', { event: 'resume' });
    expect(resumed.json).toMatchObject({ state: 'booting', pausedSince: null, expectNewGeneration: true });
    // The same session talks again: the VM was paused and resumed, not restored.
    a.heartbeat();
    await waitFor('the expectation dropped after the resume', async () => (await detail(c)).expectNewGeneration === false);
    expect((await api(c, 'POST', '/v1/sandboxes/vm/lifecycle', { event: 'snapshot' })).json.expectNewGeneration).toBe(true);
    a.heartbeat();
    await waitFor('the expectation dropped after the snapshot', async () => (await detail(c)).expectNewGeneration === false);
    await closed(c, a);
    await probe(socket, { generation: 2 }).connect();
    const d = await detail(c);
    expect([d.generation, d.session]).toEqual([1, 2]);
  });

  it('refuses a body that is not one of the events, and an unknown sandbox', async () => {
    const { c } = await start();
    for (const body of [{ event: 'reboot' }, {}, [1], { event: 3 }]) {
      const r = await api(c, 'POST', '/v1/sandboxes/vm/lifecycle', body);
      expect(r.status).toBe(400);
      expect(r.json.error.code).toBe('BAD_REQUEST');
    }
    const r = await api(c, 'POST', '/v1/sandboxes/nope/lifecycle', { event: 'pause' });
    expect([r.status, r.json.error.code]).toEqual([404, 'NOT_FOUND']);
  });
});

describe('DELETE ?capture=1', { timeout: 30_000 }, () => {
  /** Goroutines: the probe cannot (not a Go target); threads: a small dump. */
  function answer(m: CollectorMessage, p: ProbeClient): void {
    if (m.type !== 'command' || m.op !== 'dump') return;
    if (m.mode === 'goroutines') return void p.send({ type: 'result', id: m.id, ok: false, error: 'the target is not a Go program' });
    const text = Buffer.from('threads of envd (pid 42)\ntask 42 S futex_wait_queue\n');
    p.send({ type: 'dump.chunk', id: m.id, index: 0, data: text });
    p.send({
      type: 'result',
      id: m.id,
      ok: true,
      dump: { mode: 'threads', source: 'proc', complete: true, bytes: text.length, chunks: 1, pid: 42 },
    });
  }

  it('answers with a final dump taken before the listener closed (threads when not Go)', async () => {
    const { c, socket } = await start();
    await probe(socket, { onMessage: answer }).connect();
    const r = await api(c, 'DELETE', '/v1/sandboxes/vm?capture=1');
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ id: 'vm', captureError: null, dump: { mode: 'threads', trigger: 'final', generation: 1 } });
    expect(r.json.dump.text).toContain('futex_wait_queue');
    expect((await api(c, 'GET', '/v1/sandboxes/vm')).status).toBe(404);
  });

  it('without a probe: unregistered all the same, with the reason there is no dump', async () => {
    const { c } = await start();
    const r = await api(c, 'DELETE', '/v1/sandboxes/vm?capture=1');
    expect(r.status).toBe(200);
    expect(r.json.dump).toBeNull();
    expect(r.json.captureError).toEqual(expect.any(String));
    expect((await api(c, 'DELETE', '/v1/sandboxes/vm?capture=yes')).status).toBe(400);
  });

  it('a paused VM is not asked (it could not answer): unregistered at once, saying why', async () => {
    const { c, socket } = await start();
    await probe(socket, { onMessage: answer }).connect();
    await api(c, 'POST', '/v1/sandboxes/vm/lifecycle', { event: 'pause' });
    const r = await api(c, 'DELETE', '/v1/sandboxes/vm?capture=1');
    expect([r.status, r.json.dump]).toEqual([200, null]);
    expect(r.json.captureError).toMatch(/paused/);
  });
});
