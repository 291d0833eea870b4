// --webhook against local receivers: a signed JSON notice on each transition into stuck,
// exited or silent (and none for the others); a stuck notice carries the automatic dumps;
// 500s are retried with backoff and counted; a receiver that never answers holds up neither
// ingest nor the other receivers.

import crypto from 'node:crypto';
import http from 'node:http';
import type net from 'node:net';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../test/support/wait.js';
import { SIGNATURE_HEADER, type WebhookPayload } from '../src/export/webhooks.js';
import { buildFleet, fakeProbes } from './support/fleet.js';
import { inProcessCollectors } from './support/collector.js';
import { serversClosedAfterEach } from './support/servers.js';

const collectors = inProcessCollectors('vd-webhooks-');
const probe = fakeProbes();
const servers = serversClosedAfterEach();

interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A receiver answering each request with `status(n)` (n from 1); `hang` never answers. */
async function receiver(status: (n: number) => number | 'hang' = () => 204): Promise<{ url: string; got: Received[] }> {
  const got: Received[] = [];
  const s = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      const st = status(got.length);
      if (st !== 'hang') res.writeHead(st).end();
    });
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(s.address() as net.AddressInfo).port}/hook`, got };
}

const metric = async (url: string, line: string) => {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(new RegExp(`^${line.replace(/[{}()[\]]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
};

describe('webhooks', { timeout: 60_000 }, () => {
  it('posts signed notices on entering stuck, exited and silent, with dumps and links', async () => {
    const r = await receiver();
    const secret = 'hook-key-0123';
    const { url, collector } = await collectors.start({ webhooks: [r.url], webhookSecret: secret, publicUrl: 'https://vd.example:7070/' });
    await buildFleet(collector, collectors.dir, probe, { dumps: true });
    await waitFor('three notices', () => r.got.length >= 3);
    await collector.registry.unregister('slow'); // no notice for an unregister or a non-trouble state
    const notices = r.got.map((g) => {
      const expected = `sha256=${crypto.createHmac('sha256', secret).update(g.body).digest('hex')}`;
      const sig = String(g.headers[SIGNATURE_HEADER]);
      expect(crypto.timingSafeEqual(Buffer.from(sig), Buffer.from(expected))).toBe(true);
      expect(g.headers['content-type']).toBe('application/json');
      expect(g.headers['x-vsockdiag-delivery']).toMatch(/^[0-9a-f-]{36}$/);
      return JSON.parse(g.body) as WebhookPayload;
    });
    expect(notices.map((n) => `${n.id}:${n.state}`).sort()).toEqual(['crashed:exited', 'hung:stuck', 'quiet:silent']);
    const stuck = notices.find((n) => n.id === 'hung')!;
    expect(stuck).toMatchObject({ event: 'state', previous: 'registered', generation: 1 });
    expect(stuck.reason).toMatch(/start deadline/);
    expect(Array.isArray(stuck.conditions)).toBe(true);
    // It waited for the automatic dumps: the stored goroutine dump is named.
    expect(stuck.dumpIds.length).toBeGreaterThan(0);
    const listed = await (await fetch(`${url}/v1/sandboxes/hung/dumps`)).json();
    expect(JSON.stringify(listed)).toContain(`"id":${stuck.dumpIds[0]}`);
    expect(stuck.links).toEqual({
      dashboard: 'https://vd.example:7070/sandboxes/hung',
      api: 'https://vd.example:7070/v1/sandboxes/hung',
      dumps: 'https://vd.example:7070/v1/sandboxes/hung/dumps',
    });
    expect(notices.find((n) => n.id === 'crashed')!.reason).toMatch(/exited with status 1/);
    expect(await metric(url, 'vsockdiag_webhook_deliveries_total{outcome="delivered"}')).toBe(3);
  });

  it('retries after 500s with backoff, the same delivery id each time, and counts it', async () => {
    const r = await receiver((n) => (n <= 2 ? 500 : 200));
    const { url, collector } = await collectors.start({ webhooks: [r.url], exportTuning: { webhookBackoffMs: 20 } });
    const sb = (await collector.registry.register('x', `${collectors.dir}/x.sock`, 'api')).sandbox;
    const p = await probe(sb.socketPath, {
      target: { pid: 42, name: 'envd', source: 'name', startedAt: 1000, alive: false, exitCode: 2 },
      listener: { port: 49983, bound: false },
      phases: { reported: false, ready: false },
    });
    await waitFor('a delivery', async () => (await metric(url, 'vsockdiag_webhook_deliveries_total{outcome="delivered"}')) === 1);
    p.close();
    expect(r.got.length).toBe(3);
    expect(new Set(r.got.map((g) => g.headers['x-vsockdiag-delivery'])).size).toBe(1);
    expect(r.got[0]!.headers[SIGNATURE_HEADER]).toBeUndefined(); // no secret, no signature
    expect(await metric(url, 'vsockdiag_webhook_retries_total')).toBe(2);
    expect(await metric(url, 'vsockdiag_webhook_deliveries_total{outcome="failed"}')).toBe(0);
  });

  it('a receiver that never answers holds up neither ingest nor another receiver', async () => {
    const dead = await receiver(() => 'hang');
    const live = await receiver();
    const { url, collector } = await collectors.start({ webhooks: [dead.url, live.url] });
    const started = Date.now();
    await buildFleet(collector, collectors.dir, probe);
    await waitFor('the live receiver to get all three', () => live.got.length >= 3);
    // The hung receiver got its first notice and holds it; ingest went on meanwhile.
    expect(dead.got.length).toBe(1);
    expect(Date.now() - started).toBeLessThan(45_000);
    const api = await fetch(`${url}/v1/sandboxes/healthy`);
    expect(((await api.json()) as { state: string }).state).toBe('ready');
    // Its three notices wait for it (the first in flight), bounded by its own queue.
    expect(await metric(url, 'vsockdiag_webhook_queue_length')).toBe(3);
  });
});
