import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { ProbeClient } from '../../test/harness/probe-client.js';
import { waitFor } from '../../test/support/wait.js';
import type { CollectorOptions } from '../src/collector/collector.js';
import { inProcessCollectors } from './support/collector.js';

const collectors = inProcessCollectors('vd-ws-');
const start = async (over: Partial<CollectorOptions> = {}) => (await collectors.start(over)).url;
const closers: Array<() => void> = [];

// Registered after the collectors' hooks, so it runs first: clients go before the server.
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

/** A WebSocket client collecting every message. */
async function client(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ ws: WebSocket; messages: any[]; next: (pred: (m: any) => boolean) => Promise<any> }> {
  const ws = new WebSocket(url.replace('http', 'ws'), { headers });
  closers.push(() => ws.terminate());
  const messages: any[] = [];
  ws.on('message', (d) => {
    messages.push(JSON.parse(d.toString()));
  });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const next = (pred: (m: any) => boolean) => waitFor(`a message matching ${pred}`, () => messages.find(pred));
  return { ws, messages, next };
}

/** A probe on the sandbox's socket that has said hello (its clock at 1,000 ms since boot). */
async function probe(socketPath: string): Promise<ProbeClient> {
  const p = new ProbeClient({ path: socketPath, sinceBootMs: () => 1000 });
  closers.push(() => p.close());
  await p.connect();
  return p;
}

describe('/v1/stream', () => {
  it('sends a snapshot, summary changes, removals, and the events of subscribed sandboxes', async () => {
    const url = await start();
    const dir = path.join(collectors.dir, 'a');
    fs.mkdirSync(dir);
    await fetch(`${url}/v1/sandboxes/a`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ udsPath: path.join(dir, 'v.sock') }),
    });
    const c = await client(`${url}/v1/stream`);
    const snap = await c.next((m) => m.type === 'snapshot');
    expect(snap.sandboxes.map((s: any) => s.id)).toEqual(['a']);
    c.ws.send(JSON.stringify({ type: 'subscribe', id: 'a' }));
    await c.next((m) => m.type === 'subscribed' && m.id === 'a');
    const p = await probe(path.join(dir, 'v.sock_52000'));
    const changed = await c.next((m) => m.type === 'sandbox' && m.sandbox.state === 'booting');
    expect(changed.sandbox).toMatchObject({ id: 'a', connected: true });
    p.send({ type: 'events', events: [{ kind: 'phase', seq: 1, t: 1100, name: '<img src=x onerror=alert(1)>' }] });
    const ev = await c.next((m) => m.type === 'event' && m.event.kind === 'phase');
    expect(ev).toMatchObject({ id: 'a', event: { seq: 1, data: { name: '<img src=x onerror=alert(1)>' } } });
    await fetch(`${url}/v1/sandboxes/a`, { method: 'DELETE' });
    await c.next((m) => m.type === 'removed' && m.id === 'a');
  });

  it('does not send events of sandboxes the client did not subscribe to', async () => {
    const url = await start();
    const dir = path.join(collectors.dir, 'b');
    fs.mkdirSync(dir);
    await fetch(`${url}/v1/sandboxes/b`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ udsPath: path.join(dir, 'v.sock') }),
    });
    const c = await client(`${url}/v1/stream`);
    await probe(path.join(dir, 'v.sock_52000'));
    await c.next((m) => m.type === 'sandbox');
    expect(c.messages.some((m) => m.type === 'event')).toBe(false);
  });

  it('needs the bearer token or a single-use ticket when the collector has a token', async () => {
    const url = await start({ token: 's3cret' });
    await expect(client(`${url}/v1/stream`)).rejects.toThrow(/401/);
    // The token never travels in the URL any more.
    await expect(client(`${url}/v1/stream?token=s3cret`)).rejects.toThrow(/401/);
    const byHeader = await client(`${url}/v1/stream`, { authorization: 'Bearer s3cret' });
    await byHeader.next((m) => m.type === 'snapshot');

    expect((await fetch(`${url}/v1/stream/tickets`, { method: 'POST' })).status).toBe(401);
    const res = await fetch(`${url}/v1/stream/tickets`, { method: 'POST', headers: { authorization: 'Bearer s3cret' } });
    expect(res.status).toBe(201);
    const { ticket, expiresInMs } = (await res.json()) as { ticket: string; expiresInMs: number };
    expect(expiresInMs).toBeGreaterThan(0);
    const byTicket = await client(`${url}/v1/stream?ticket=${ticket}`);
    await byTicket.next((m) => m.type === 'snapshot');
    // Single use: the same ticket again is refused, and so is one nobody issued.
    await expect(client(`${url}/v1/stream?ticket=${ticket}`)).rejects.toThrow(/401/);
    await expect(client(`${url}/v1/stream?ticket=forged`)).rejects.toThrow(/401/);
  });

  it('closes a client that sends garbage', async () => {
    const url = await start();
    const c = await client(`${url}/v1/stream`);
    const closed = new Promise<number>((r) => c.ws.once('close', (code) => r(code)));
    c.ws.send('{not json');
    expect(await closed).toBe(1007);
  });
});

describe('/v1/phases', () => {
  it('aggregates phase durations across sandboxes', async () => {
    const url = await start();
    for (const [id, gaps] of [
      ['p1', [10, 200]],
      ['p2', [30, 400]],
    ] as const) {
      const dir = path.join(collectors.dir, id);
      fs.mkdirSync(dir);
      await fetch(`${url}/v1/sandboxes/${id}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ udsPath: path.join(dir, 'v.sock') }),
      });
      const p = await probe(path.join(dir, 'v.sock_52000'));
      const t0 = 2000;
      p.send({
        type: 'events',
        events: [
          { kind: 'phase', seq: 1, t: t0, name: 'router' },
          { kind: 'phase', seq: 2, t: t0 + gaps[0], name: 'cgroup-manager' },
          { kind: 'phase', seq: 3, t: t0 + gaps[0] + gaps[1], ready: true },
        ],
      });
      await p.waitAcked(3); // stored
    }
    const body = (await (await fetch(`${url}/v1/phases`)).json()) as any;
    const cg = body.phases.find((p: any) => p.name === 'cgroup-manager');
    expect(cg).toMatchObject({ count: 2, maxMs: 400 });
    expect(cg.samplesMs.sort()).toEqual([200, 400]);
    expect(body.phases.find((p: any) => p.name === 'router').samplesMs.sort((a: number, b: number) => a - b)).toEqual([10, 30]);
  });
});
