import http from 'node:http';
import net from 'node:net';
import type { EventBody } from '@vsockdiag/proto';
import { afterEach, describe, expect, it } from 'vitest';
import { HealthChecker } from '../src/health.js';
import { waitFor } from '../../test/support/wait.js';

const closers: Array<() => void> = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

async function serve(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/health`;
}

async function once(url: string, now = () => Date.now()): Promise<Extract<EventBody, { kind: 'health' }>> {
  const events: EventBody[] = [];
  const h = new HealthChecker({ url, emit: (e) => events.push(e), now });
  h.tick();
  return (await waitFor('the health check', () => events[0])) as Extract<EventBody, { kind: 'health' }>;
}

describe('HealthChecker', () => {
  it('204 is healthy, with latency', async () => {
    const url = await serve((_req, res) => res.writeHead(204).end());
    const e = await once(url);
    expect(e).toMatchObject({ kind: 'health', url, ok: true, status: 204 });
    expect(e.latencyMs).toBeGreaterThanOrEqual(0);
    expect(e.error).toBeUndefined();
  });

  it('another status is unhealthy and says what came back', async () => {
    const url = await serve((_req, res) => res.writeHead(503).end('init incomplete'));
    expect(await once(url)).toMatchObject({ ok: false, status: 503, error: 'HTTP 503, expected 204' });
  });

  it('a refused connection is "not listening"', async () => {
    const url = await serve(() => {});
    closers.pop()!();
    await new Promise((r) => setTimeout(r, 50));
    const e = await once(url);
    expect(e.ok).toBe(false);
    expect(e.error).toMatch(/^ECONNREFUSED/);
  });

  it('a listener that never answers times out (listening but not answering)', async () => {
    const server = net.createServer(() => {}); // accepts, never replies
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    closers.push(() => server.close());
    const sockets: net.Socket[] = [];
    server.on('connection', (s) => sockets.push(s));
    closers.push(() => sockets.forEach((s) => s.destroy()));
    const e = await once(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}/health`);
    expect(e.ok).toBe(false);
    expect(e.error).toMatch(/^ETIMEDOUT: timed out after 2000 ms/);
    expect(e.latencyMs).toBeGreaterThanOrEqual(1900);
  }, 10_000);

  it('sends an unchanged outcome only once a minute; checks often while failing, calmly when healthy', async () => {
    let status = 204;
    const url = await serve((_req, res) => res.writeHead(status).end());
    let now = 0;
    const events: EventBody[] = [];
    const h = new HealthChecker({ url, emit: (e) => events.push(e), now: () => now });
    const step = async (ms: number) => {
      now += ms;
      h.tick();
      await new Promise((r) => setTimeout(r, 60));
    };
    await step(0);
    expect(events).toHaveLength(1);
    await step(5000); // healthy: next check only after 10 s
    await step(6000); // checked, unchanged: not sent
    expect(events).toHaveLength(1);
    status = 500;
    await step(10_000);
    expect(events).toHaveLength(2);
    expect(events[1]).toMatchObject({ ok: false, status: 500 });
    await step(61_000); // unchanged for a minute: re-sent
    expect(events).toHaveLength(3);
  });

  it('refuses a non-http URL', () => {
    expect(() => new HealthChecker({ url: 'https://127.0.0.1/health', emit: () => {} })).toThrow(/must be http/);
  });
});
