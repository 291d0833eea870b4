import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
// A fixed pause only to let a long-poll start before what should end it.
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { helloMessage } from '../../test/support/hello.js';
import { waitFor } from '../../test/support/wait.js';
import { ProbeClient } from '../../test/harness/probe-client.js';
import { Collector } from '../src/collector/collector.js';
import { call, expectError, probeClients, readyStatus, type Json } from './support/api.js';
import { inProcessCollectors } from './support/collector.js';

const log = pino({ level: 'silent' });
const VSOCK_PORT = 52000;

const collectors = inProcessCollectors('vd-api-');
const { options } = collectors;
const startCollector = collectors.start;
const probe = probeClients(VSOCK_PORT);

const isSocket = (p: string) => {
  try {
    return fs.statSync(p).isSocket();
  } catch {
    return false;
  }
};

/** Raw GET so the path reaches the server exactly as written (fetch would normalise "..") */
function rawGet(url: string, rawPath: string): Promise<{ status: number; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: rawPath, method: 'GET' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

// ---------------------------------------------------------------------------------

describe('PUT /v1/sandboxes/:id', () => {
  it('registers (201), re-registers (200), and listens on <udsPath>_52000', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'vm1.sock');
    const first = await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    expect(first.status).toBe(201);
    expect(first.json).toMatchObject({ id: 'vm1', state: 'registered', generation: 0, connected: false });
    expect(isSocket(`${udsPath}_${VSOCK_PORT}`)).toBe(true);

    const again = await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ id: 'vm1', state: 'registered' });
    expect(isSocket(`${udsPath}_${VSOCK_PORT}`)).toBe(true);
  });

  it('moves the listener when the same id comes with a new udsPath', async () => {
    const { url } = await startCollector();
    const a = path.join(collectors.dir, 'a.sock');
    const b = path.join(collectors.dir, 'b.sock');
    expect((await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: a })).status).toBe(201);
    expect((await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: b })).status).toBe(200);
    expect(isSocket(`${b}_${VSOCK_PORT}`)).toBe(true);
    expect(fs.existsSync(`${a}_${VSOCK_PORT}`)).toBe(false);
    const d = await call(url, 'GET', '/v1/sandboxes/vm1');
    expect(d.json).toMatchObject({ udsPath: b, socketPath: `${b}_${VSOCK_PORT}` });
  });

  it('rejects a bad id with 400 BAD_ID', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'x.sock');
    expectError(await call(url, 'PUT', '/v1/sandboxes/-leading-dash', { udsPath }), 400, 'BAD_ID');
    expectError(await call(url, 'PUT', `/v1/sandboxes/${'a'.repeat(129)}`, { udsPath }), 400, 'BAD_ID');
    expectError(await call(url, 'PUT', '/v1/sandboxes/has%20space', { udsPath }), 400, 'BAD_ID');
    expect(fs.existsSync(`${udsPath}_${VSOCK_PORT}`)).toBe(false);
    // far too long for the router: still the API's error shape
    expectError(await call(url, 'PUT', `/v1/sandboxes/${'a'.repeat(300)}`, { udsPath }), 414, 'BAD_REQUEST');
  });

  it('accepts ids up to the documented 128 characters on every route', async () => {
    const { url } = await startCollector();
    const id = `x${'a'.repeat(127)}`;
    const udsPath = path.join(collectors.dir, 'long.sock');
    expect((await call(url, 'PUT', `/v1/sandboxes/${id}`, { udsPath })).status).toBe(201);
    expect((await call(url, 'GET', `/v1/sandboxes/${id}`)).json).toMatchObject({ id, state: 'registered' });
    expect((await call(url, 'GET', `/v1/sandboxes/${id}/readiness`)).status).toBe(503);
    expect((await call(url, 'GET', `/v1/sandboxes/${id}/events`)).status).toBe(200);
    expect((await call(url, 'DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
  });

  it('answers a malformed URL in the API error shape', async () => {
    const { url } = await startCollector();
    const r = await rawGet(url, '/v1/sandboxes/%E0%A4%A');
    expectError({ status: r.status, json: JSON.parse(r.body) as Json }, 400, 'BAD_REQUEST');
  });

  it('rejects a missing or malformed body with 400 BAD_REQUEST', async () => {
    const { url } = await startCollector();
    expectError(await call(url, 'PUT', '/v1/sandboxes/vm1'), 400, 'BAD_REQUEST');
    expectError(await call(url, 'PUT', '/v1/sandboxes/vm1', {}), 400, 'BAD_REQUEST');
    expectError(await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: 7 }), 400, 'BAD_REQUEST');
    // invalid JSON
    const res = await fetch(`${url}/v1/sandboxes/vm1`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{' });
    expectError({ status: res.status, json: (await res.json()) as Json }, 400, 'BAD_REQUEST');
    expect((await call(url, 'GET', '/v1/sandboxes')).json).toEqual({ sandboxes: [] });
  });

  it('rejects a relative or overlong udsPath with 400 BAD_PATH', async () => {
    const { url } = await startCollector();
    expectError(await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: 'rel/vm.sock' }), 400, 'BAD_PATH');
    expectError(await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: `/${'x'.repeat(120)}` }), 400, 'BAD_PATH');
  });

  it('rejects the same udsPath under another id with 409 PATH_IN_USE', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'shared.sock');
    expect((await call(url, 'PUT', '/v1/sandboxes/one', { udsPath })).status).toBe(201);
    const r = await call(url, 'PUT', '/v1/sandboxes/two', { udsPath });
    expectError(r, 409, 'PATH_IN_USE');
    expect(r.json!.error.message).toContain('one');
    expectError(await call(url, 'GET', '/v1/sandboxes/two'), 404, 'NOT_FOUND');
    // the first registration is untouched
    expect(isSocket(`${udsPath}_${VSOCK_PORT}`)).toBe(true);
  });

  it('answers 422 LISTEN_FAILED when the directory does not exist, and registers nothing', async () => {
    const { url } = await startCollector();
    const r = await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'no-such-dir', 'vm.sock') });
    expectError(r, 422, 'LISTEN_FAILED');
    expectError(await call(url, 'GET', '/v1/sandboxes/vm1'), 404, 'NOT_FOUND');
    expect((await call(url, 'GET', '/v1/sandboxes')).json).toEqual({ sandboxes: [] });
  });
});

describe('DELETE /v1/sandboxes/:id', () => {
  it('removes the listener socket (204), then 404', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'vm1.sock');
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    expect(isSocket(`${udsPath}_${VSOCK_PORT}`)).toBe(true);

    const del = await call(url, 'DELETE', '/v1/sandboxes/vm1');
    expect(del.status).toBe(204);
    expect(del.text).toBe('');
    expect(fs.existsSync(`${udsPath}_${VSOCK_PORT}`)).toBe(false);

    expectError(await call(url, 'DELETE', '/v1/sandboxes/vm1'), 404, 'NOT_FOUND');
    expectError(await call(url, 'GET', '/v1/sandboxes/vm1'), 404, 'NOT_FOUND');
    // the path is free again for another id
    expect((await call(url, 'PUT', '/v1/sandboxes/vm2', { udsPath })).status).toBe(201);
  });
});

describe('GET /v1/sandboxes and /v1/sandboxes/:id', () => {
  it('lists sandboxes, filters by state, and rejects an unknown state', async () => {
    const { url } = await startCollector();
    await call(url, 'PUT', '/v1/sandboxes/b', { udsPath: path.join(collectors.dir, 'b.sock') });
    await call(url, 'PUT', '/v1/sandboxes/a', { udsPath: path.join(collectors.dir, 'a.sock') });

    const all = await call(url, 'GET', '/v1/sandboxes');
    expect(all.status).toBe(200);
    expect(all.json!.sandboxes.map((s: Json) => s.id).sort()).toEqual(['a', 'b']);
    for (const s of all.json!.sandboxes) {
      expect(s).toMatchObject({ state: 'registered', generation: 0, connected: false, lastPhase: null });
      expect(new Date(s.since).toString()).not.toBe('Invalid Date');
    }

    expect((await call(url, 'GET', '/v1/sandboxes?state=registered')).json!.sandboxes).toHaveLength(2);
    expect((await call(url, 'GET', '/v1/sandboxes?state=ready')).json).toEqual({ sandboxes: [] });
    const bad = await call(url, 'GET', '/v1/sandboxes?state=sleeping');
    expectError(bad, 400, 'BAD_REQUEST');
    expect(bad.json!.error.message).toContain('registered');
  });

  it('shows a sandbox in detail', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'vm1.sock');
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    const d = await call(url, 'GET', '/v1/sandboxes/vm1');
    expect(d.status).toBe(200);
    expect(d.json).toMatchObject({
      id: 'vm1',
      state: 'registered',
      reason: 'waiting for the probe to connect',
      generation: 0,
      udsPath,
      socketPath: `${udsPath}_${VSOCK_PORT}`,
      source: 'api',
      probe: null,
      target: null,
      listener: null,
      phases: [],
      morePhases: false,
    });
  });

  it('answers 404 NOT_FOUND for an unknown sandbox or route', async () => {
    const { url } = await startCollector();
    expectError(await call(url, 'GET', '/v1/sandboxes/nope'), 404, 'NOT_FOUND');
    expectError(await call(url, 'GET', '/v1/sandboxes/nope/readiness'), 404, 'NOT_FOUND');
    expectError(await call(url, 'GET', '/v1/sandboxes/nope/events'), 404, 'NOT_FOUND');
    expectError(await call(url, 'GET', '/v1/nothing-here'), 404, 'NOT_FOUND');
  });
});

describe('GET /v1/sandboxes/:id/readiness', () => {
  it('answers 503 {ready:false,state:"registered"} at once without wait', async () => {
    const { url } = await startCollector();
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') });
    const t0 = Date.now();
    const r = await call(url, 'GET', '/v1/sandboxes/vm1/readiness');
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(r.status).toBe(503);
    expect(r.json).toMatchObject({ ready: false, state: 'registered', reason: 'waiting for the probe to connect' });
  });

  it('long-polls for about ?wait ms when nothing changes', async () => {
    const { url } = await startCollector();
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') });
    const t0 = Date.now();
    const r = await call(url, 'GET', '/v1/sandboxes/vm1/readiness?wait=300');
    const took = Date.now() - t0;
    expect(r.status).toBe(503);
    expect(r.json).toMatchObject({ ready: false, state: 'registered' });
    expect(took).toBeGreaterThanOrEqual(280);
    expect(took).toBeLessThan(3000);
  });

  it('rejects a bad wait with 400', async () => {
    const { url } = await startCollector();
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') });
    expectError(await call(url, 'GET', '/v1/sandboxes/vm1/readiness?wait=abc'), 400, 'BAD_REQUEST');
    expectError(await call(url, 'GET', '/v1/sandboxes/vm1/readiness?wait=-1'), 400, 'BAD_REQUEST');
    expectError(await call(url, 'GET', '/v1/sandboxes/vm1/readiness?wait=1.5'), 400, 'BAD_REQUEST');
    expectError(await call(url, 'GET', '/v1/sandboxes/vm1/readiness?wait=120001'), 400, 'BAD_REQUEST');
  });

  it('returns early with 200 {ready:true} when a probe reports the target ready', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'vm1.sock');
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    const t0 = Date.now();
    const pending = call(url, 'GET', '/v1/sandboxes/vm1/readiness?wait=20000');
    await sleep(100);
    await probe(udsPath, readyStatus).connect();
    const r = await pending;
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ready: true, state: 'ready', generation: 1 });
    expect(r.json!.reason).toContain('listening on :49983');
  });
});

describe('readiness while the sandbox goes away', () => {
  it('ends a long-poll with 404 when its sandbox is unregistered', async () => {
    const { url } = await startCollector();
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') });
    const t0 = Date.now();
    const pending = call(url, 'GET', '/v1/sandboxes/vm1/readiness?wait=20000');
    await sleep(150);
    expect((await call(url, 'DELETE', '/v1/sandboxes/vm1')).status).toBe(204);
    const r = await pending;
    expect(Date.now() - t0).toBeLessThan(10_000);
    expectError(r, 404, 'NOT_FOUND');
  });
});

describe('discovery through the collector', () => {
  it('registers sockets matching --discover and unregisters them when they vanish', async () => {
    fs.mkdirSync(path.join(collectors.dir, 'fc', 'vm7'), { recursive: true });
    const vmSock = path.join(collectors.dir, 'fc', 'vm7', 'vsock.sock');
    const firecracker = net.createServer();
    await new Promise<void>((resolve) => firecracker.listen(vmSock, resolve));
    try {
      const { url } = await startCollector({ discover: `${collectors.dir}/fc/*/vsock.sock` });
      const sandboxes = async (): Promise<Json[]> => (await call(url, 'GET', '/v1/sandboxes')).json!.sandboxes;
      const list = await waitFor('the socket to be discovered', async () => {
        const found = await sandboxes();
        return found.length ? found : null;
      });
      expect(list.map((s) => s.id)).toEqual(['vm7']);
      const d = await call(url, 'GET', '/v1/sandboxes/vm7');
      expect(d.json).toMatchObject({ source: 'discover', udsPath: vmSock, socketPath: `${vmSock}_${VSOCK_PORT}` });
      expect(isSocket(`${vmSock}_${VSOCK_PORT}`)).toBe(true);

      await new Promise((r) => firecracker.close(r)); // the VM is gone: its socket file too
      await waitFor('the sandbox to be unregistered', async () => (await sandboxes()).length === 0);
      expect(fs.existsSync(`${vmSock}_${VSOCK_PORT}`)).toBe(false);
    } finally {
      if (firecracker.listening) await new Promise((r) => firecracker.close(r));
    }
  });
});

describe('a probe session seen through the API', () => {
  it('shows the session in detail and its events in the history, with filters', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'vm1.sock');
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    const p = probe(udsPath, {
      target: { pid: 42, name: 'envd', startedAt: 1000, source: 'name', alive: true },
      listener: { port: 49983, bound: false },
      phases: { reported: false, ready: false },
    });
    expect(await p.connect()).toBe(0);
    p.send({
      type: 'events',
      events: [
        { kind: 'phase', seq: 1, t: 2100, name: 'cgroups', status: 'opening cgroup manager' },
        { kind: 'phase', seq: 2, t: 2200, name: 'mmds' },
        { kind: 'target.sample', seq: 3, t: 2300, pid: 42, state: 'S', threads: 7, rssKb: 1000, fds: 12, cpuMs: 5 },
      ],
    });
    await p.waitAcked(3);
    expect(p.received.filter((m) => m.type === 'ack')).toEqual([{ type: 'ack', seq: 3 }]);

    const d = await call(url, 'GET', '/v1/sandboxes/vm1');
    const said = helloMessage(); // the client's hello, but for its version and clocks
    expect(d.json).toMatchObject({
      state: 'starting',
      generation: 1,
      connected: true,
      lastPhase: 'mmds',
      probe: { instanceId: said.instanceId, version: 'test-client', bootId: said.bootId, generation: 1 },
      target: { pid: 42, name: 'envd', alive: true, threads: 7, rssKb: 1000, startedAtBootMs: 1000 },
      listener: { port: 49983, bound: false, sinceBootMs: null },
      readiness: { reportsPhases: true, ready: false },
    });
    expect(d.json!.phases.map((ph: Json) => ph.name)).toEqual(['cgroups', 'mmds']);

    const all = await call(url, 'GET', '/v1/sandboxes/vm1/events');
    expect(all.status).toBe(200);
    const kinds = all.json!.events.map((e: Json) => e.kind);
    expect(kinds).toEqual(expect.arrayContaining(['session.open', 'state', 'phase', 'target.sample']));
    expect(all.json!.next).toBe(all.json!.events[all.json!.events.length - 1].id);
    expect(all.json!.more).toBe(false);

    const phases = await call(url, 'GET', '/v1/sandboxes/vm1/events?kind=phase');
    expect(phases.json!.events.map((e: Json) => [e.seq, e.data.name])).toEqual([
      [1, 'cgroups'],
      [2, 'mmds'],
    ]);
    const targets = await call(url, 'GET', '/v1/sandboxes/vm1/events?kind=target.');
    expect(targets.json!.events.map((e: Json) => e.kind)).toEqual(['target.sample']);
    const one = await call(url, 'GET', '/v1/sandboxes/vm1/events?limit=1');
    expect(one.json!.events).toHaveLength(1);
    expect(one.json!.more).toBe(true);
    const rest = await call(url, 'GET', `/v1/sandboxes/vm1/events?after=${one.json!.next}`);
    expect(rest.json!.events.length).toBe(all.json!.events.length - 1);
    const none = await call(url, 'GET', `/v1/sandboxes/vm1/events?after=${all.json!.next}`);
    expect(none.json).toEqual({ events: [], next: all.json!.next, more: false });
    expect((await call(url, 'GET', '/v1/sandboxes/vm1/events?generation=1&kind=phase')).json!.events).toHaveLength(2);
    expect((await call(url, 'GET', '/v1/sandboxes/vm1/events?generation=2')).json!.events).toEqual([]);

    // Newest first, paged backwards with before=<next>: the same events, in reverse.
    const ids = all.json!.events.map((e: Json) => e.id);
    const backwards: number[] = [];
    let before = '';
    for (;;) {
      const page = await call(url, 'GET', `/v1/sandboxes/vm1/events?order=desc&limit=2${before}`);
      expect(page.status).toBe(200);
      backwards.push(...page.json!.events.map((e: Json) => e.id));
      if (!page.json!.more) break;
      expect(page.json!.next).toBe(page.json!.events[1].id);
      before = `&before=${page.json!.next}`;
    }
    expect(backwards).toEqual([...ids].reverse());
    const newestPhase = await call(url, 'GET', '/v1/sandboxes/vm1/events?order=desc&kind=phase&limit=1');
    expect(newestPhase.json!.events.map((e: Json) => e.data.name)).toEqual(['mmds']);
    const below = await call(url, 'GET', `/v1/sandboxes/vm1/events?order=desc&kind=phase&before=${newestPhase.json!.next}`);
    expect(below.json!.events.map((e: Json) => e.data.name)).toEqual(['cgroups']);
    // Both bounds at once, oldest first: what lies strictly between two ids.
    const between = await call(url, 'GET', `/v1/sandboxes/vm1/events?after=${ids[0]}&before=${ids[3]}`);
    expect(between.json!.events.map((e: Json) => e.id)).toEqual(ids.slice(1, 3));
    expect((await call(url, 'GET', `/v1/sandboxes/vm1/events?order=desc&before=${ids[0]}`)).json).toEqual({
      events: [],
      next: ids[0],
      more: false,
    });
  });

  it('dates kernel messages by the kernel, so old ones read at start-up raise nothing', async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'vmk.sock');
    await call(url, 'PUT', '/v1/sandboxes/vmk', { udsPath });
    // Guest clock at the hello: 2,000 ms since boot; the target started at 1,800.
    const p = probe(udsPath, {
      target: { pid: 42, name: 'envd', startedAt: 1800, source: 'name', alive: true },
      listener: { port: 49983, bound: false },
      phases: { reported: false, ready: false },
    });
    await p.connect();
    const old = 'Out of memory: Killed process 7 (envd) total-vm:1000kB';
    p.send({
      type: 'events',
      events: [
        // Logged 300 ms after boot, long before this target; read by a probe starting now.
        { kind: 'kernel', seq: 1, t: 2100, what: 'oom', process: 'envd', pid: 7, message: old, kernelMs: 300 },
        // The same record again (a restarted probe reads the whole buffer once more).
        { kind: 'kernel', seq: 2, t: 2150, what: 'oom', process: 'envd', pid: 7, message: old, kernelMs: 300 },
      ],
    });
    await p.waitAcked(2);
    let d = (await call(url, 'GET', '/v1/sandboxes/vmk')).json!;
    expect(d.conditions).toEqual([]);
    expect(d.kernel).toHaveLength(1);
    expect(Date.now() - Date.parse(d.kernel[0].at)).toBeGreaterThan(1500); // ~1.7 s before the hello, not "now"

    p.send({
      type: 'events',
      events: [
        { kind: 'kernel', seq: 3, t: 2300, what: 'segfault', process: 'envd', pid: 42, message: 'envd[42]: segfault at 0', kernelMs: 2290 },
      ],
    });
    await p.waitAcked(3);
    d = (await call(url, 'GET', '/v1/sandboxes/vmk')).json!;
    expect(d.conditions.map((c: Json) => c.name)).toEqual(['segfault']);
    expect(d.kernel).toHaveLength(2);
  });

  it("places guest times by the least delayed stamp: a batch's corrects a hello long in transit", async () => {
    const { url } = await startCollector();
    const udsPath = path.join(collectors.dir, 'vmc.sock');
    await call(url, 'PUT', '/v1/sandboxes/vmc', { udsPath });
    // The hello says 2,000 ms since boot; the batch right after it says 62,000: by the batch,
    // the hello sat a minute in transit, so the hello alone would place guest times a minute late.
    let guest = 2000;
    const client = new ProbeClient({ path: `${udsPath}_${VSOCK_PORT}`, status: readyStatus, sinceBootMs: () => guest });
    try {
      await client.connect();
      guest = 62_000;
      const seq = client.events([{ kind: 'phase', name: 'now' }]);
      await client.waitAcked(seq);
      const [e] = (await call(url, 'GET', '/v1/sandboxes/vmc/events?kind=phase')).json!.events;
      expect(Math.abs(Date.parse(e.at) - Date.now())).toBeLessThan(10_000); // not 60 s ahead
    } finally {
      client.close();
    }
  });

  it('validates after, before, order, limit, kind and generation with 400s', async () => {
    const { url } = await startCollector();
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') });
    for (const q of [
      'after=-1',
      'after=x',
      'after=1.5',
      'limit=0',
      'limit=1001',
      'limit=ten',
      'kind=Phase',
      'kind=phase%25',
      'kind=a_b',
      `kind=${'a'.repeat(65)}`,
      'generation=-1',
      'order=newest',
      'order=DESC',
      'before=0',
      'before=x',
    ]) {
      expectError(await call(url, 'GET', `/v1/sandboxes/vm1/events?${q}`), 400, 'BAD_REQUEST');
    }
    const ok = await call(url, 'GET', '/v1/sandboxes/vm1/events?after=0&limit=1000&kind=target.');
    expect(ok.status).toBe(200);
    expect(ok.json).toEqual({ events: [], next: 0, more: false });
  });
});

describe('authentication', () => {
  it('requires the bearer token on every /v1 route, but not on /healthz', async () => {
    const { url } = await startCollector({ token: 's3cret' });
    const auth = { authorization: 'Bearer s3cret' };
    const udsPath = path.join(collectors.dir, 'vm1.sock');

    expectError(await call(url, 'GET', '/v1/sandboxes'), 401, 'UNAUTHORIZED');
    expectError(await call(url, 'GET', '/v1/sandboxes', undefined, { authorization: 'Bearer wrong!' }), 401, 'UNAUTHORIZED');
    expectError(await call(url, 'GET', '/v1/sandboxes', undefined, { authorization: 's3cret' }), 401, 'UNAUTHORIZED');
    expectError(await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath }), 401, 'UNAUTHORIZED');
    expect(fs.existsSync(`${udsPath}_${VSOCK_PORT}`)).toBe(false);

    expect((await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath }, auth)).status).toBe(201);
    for (const route of ['/v1/sandboxes/vm1', '/v1/sandboxes/vm1/readiness', '/v1/sandboxes/vm1/events', '/v1/no-such-route']) {
      expectError(await call(url, 'GET', route), 401, 'UNAUTHORIZED');
    }
    expectError(await call(url, 'DELETE', '/v1/sandboxes/vm1'), 401, 'UNAUTHORIZED');
    expect((await call(url, 'GET', '/v1/sandboxes', undefined, auth)).json!.sandboxes).toHaveLength(1);
    expect((await call(url, 'GET', '/v1/sandboxes/vm1', undefined, auth)).status).toBe(200);
    expect((await call(url, 'GET', '/v1/sandboxes/vm1/readiness', undefined, auth)).status).toBe(503);
    expect((await call(url, 'DELETE', '/v1/sandboxes/vm1', undefined, auth)).status).toBe(204);

    const health = await call(url, 'GET', '/healthz');
    expect(health.status).toBe(200);
    expect(health.json).toEqual({ ok: true, sandboxes: 0 });
  });

  it('refuses a non-loopback --http without a token', () => {
    expect(() => new Collector(options({ http: '0.0.0.0:0' }), log)).toThrow(/token/);
    expect(() => new Collector(options({ http: '[::]:0' }), log)).toThrow(/token/);
    expect(() => new Collector(options({ http: '10.1.2.3:7070' }), log)).toThrow(/token/);
    // nothing was created on the way
    expect(fs.existsSync(options().dataDir)).toBe(false);
  });

  it('accepts a non-loopback --http with a token, and loopback without', async () => {
    const c = new Collector(options({ http: '0.0.0.0:0', token: 't' }), log);
    await c.stop(); // never started: only releases the store
    const d = new Collector(options({ http: 'localhost:0' }), log);
    await d.stop();
  });
});

describe('restart', () => {
  it('restores registered sandboxes and listens again', async () => {
    const first = await startCollector();
    const a = path.join(collectors.dir, 'a.sock');
    const b = path.join(collectors.dir, 'b.sock');
    await call(first.url, 'PUT', '/v1/sandboxes/a', { udsPath: a });
    await call(first.url, 'PUT', '/v1/sandboxes/b', { udsPath: b });
    // one probe session, so sandbox a has generation 1, session 1
    await probe(a, readyStatus).connect();
    await collectors.stop(first.collector);
    expect(fs.existsSync(`${a}_${VSOCK_PORT}`)).toBe(false);
    expect(fs.existsSync(`${b}_${VSOCK_PORT}`)).toBe(false);

    const second = await startCollector();
    expect(isSocket(`${a}_${VSOCK_PORT}`)).toBe(true);
    expect(isSocket(`${b}_${VSOCK_PORT}`)).toBe(true);
    const list = await call(second.url, 'GET', '/v1/sandboxes');
    expect(list.json!.sandboxes.map((s: Json) => [s.id, s.state, s.generation, s.session])).toEqual([
      ['a', 'registered', 1, 1],
      ['b', 'registered', 0, 0],
    ]);
    // the history survived too
    const ev = await call(second.url, 'GET', '/v1/sandboxes/a/events?kind=session.');
    expect(ev.json!.events.map((e: Json) => e.kind)).toEqual(['session.open', 'session.close']);

    // and the probe can connect again: a collector restart is a new session of the same
    // life of the VM, not a new generation
    await probe(a, readyStatus).connect();
    const r = await call(second.url, 'GET', '/v1/sandboxes/a/readiness');
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ready: true, generation: 1, session: 2 });
    const opened = await call(second.url, 'GET', '/v1/sandboxes/a/events?kind=session.open');
    expect(opened.json!.events.map((e: Json) => [e.generation, e.session, e.data.session])).toEqual([
      [1, 1, 1],
      [1, 2, 2],
    ]);
  });
});

describe('dashboard', () => {
  it('answers 503 with a helpful text while the dashboard is not built', async () => {
    const { url } = await startCollector();
    const r = await call(url, 'GET', '/');
    expect(r.status).toBe(503);
    expect(r.headers.get('content-type')).toContain('text/plain');
    expect(r.text).toContain('dashboard not built');
    expect(r.text).toContain('make build');
    expect(r.text).toContain(options().dashboardDir);
  });

  it('serves index.html for / and /sandboxes/:id, and assets under /assets', async () => {
    fs.writeFileSync(path.join(options().dashboardDir, 'index.html'), '<!doctype html><title>vsockdiag</title>');
    fs.mkdirSync(path.join(options().dashboardDir, 'assets'));
    fs.writeFileSync(path.join(options().dashboardDir, 'assets', 'app.js'), 'console.log(1)');
    const { url } = await startCollector();
    for (const route of ['/', '/sandboxes/vm1']) {
      const r = await call(url, 'GET', route);
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toContain('text/html');
      expect(r.text).toBe('<!doctype html><title>vsockdiag</title>');
    }
    const js = await call(url, 'GET', '/assets/app.js');
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toContain('text/javascript');
    expect(js.text).toBe('console.log(1)');
    expectError(await call(url, 'GET', '/assets/missing.js'), 404, 'NOT_FOUND');
  });

  it('refuses path traversal out of /assets', async () => {
    fs.writeFileSync(path.join(options().dashboardDir, 'secret.txt'), 'SECRET');
    fs.mkdirSync(path.join(options().dashboardDir, 'assets'));
    fs.writeFileSync(path.join(options().dashboardDir, 'assets', 'ok.css'), 'body{}');
    const { url } = await startCollector();
    expect((await rawGet(url, '/assets/ok.css')).status).toBe(200);
    for (const raw of [
      '/assets/../secret.txt',
      '/assets/%2e%2e/secret.txt',
      '/assets/..%2fsecret.txt',
      '/assets/%2e%2e%2fsecret.txt',
      '/assets/../../../../etc/passwd',
    ]) {
      const r = await rawGet(url, raw);
      expect(r.status, raw).not.toBe(200);
      expect(r.body, raw).not.toContain('SECRET');
      expect(r.body, raw).not.toContain('root:');
    }
    // the assets directory itself is not a file
    expect((await rawGet(url, '/assets/')).status).toBe(404);
  });
});
