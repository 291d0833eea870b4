import http from 'node:http';
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LeanHttpPool, type LeanResult } from './lean-http.js';

const servers: http.Server[] = [];
const pools: LeanHttpPool[] = [];

afterEach(async () => {
  for (const p of pools.splice(0)) p.destroy();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

/** A loopback server; counts the connections it accepted. */
async function serve(handler: http.RequestListener) {
  const server = http.createServer(handler);
  servers.push(server);
  let connections = 0;
  server.on('connection', () => connections++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  const pool = new LeanHttpPool('127.0.0.1', port, 2);
  pools.push(pool);
  return { pool, connections: () => connections };
}

const get = (pool: LeanHttpPool, path: string) => new Promise<LeanResult>((r) => pool.get(path, r));

describe('LeanHttpPool', () => {
  it('gives each reply its status, the body read whole, on one kept-alive connection', async () => {
    const { pool, connections } = await serve((req, res) => {
      const body = JSON.stringify({ path: req.url, pad: 'x'.repeat(100_000) });
      res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
    expect(await get(pool, '/a')).toBe(200);
    expect(await get(pool, '/missing')).toBe(404);
    expect(await get(pool, '/b')).toBe(200);
    expect(connections()).toBe(1);
  });

  it('queues past maxSockets and answers every request', async () => {
    const { pool, connections } = await serve((_req, res) => {
      setTimeout(() => res.end('ok'), 5);
    });
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => get(pool, `/${i}`)));
    expect(results).toEqual(Array(10).fill(200));
    expect(connections()).toBe(2);
  });

  it("fails a reply it cannot delimit (no Content-Length) as 'error', then opens a fresh connection", async () => {
    const { pool, connections } = await serve((req, res) => {
      if (req.url === '/chunked') {
        res.write('part');
        res.end();
      } else res.end('ok');
    });
    expect(await get(pool, '/chunked')).toBe('error');
    expect(await get(pool, '/fine')).toBe(200);
    expect(connections()).toBe(2);
  });

  it("fails a request whose connection closes before the reply as 'error'", async () => {
    const { pool } = await serve((req, res) => {
      if (req.url === '/drop') req.socket.destroy();
      else res.end('ok');
    });
    expect(await get(pool, '/drop')).toBe('error');
    expect(await get(pool, '/fine')).toBe(200);
  });

  it('abandon() drops requests in flight and queued without calling them back', async () => {
    const { pool } = await serve(() => {}); // never answers
    const called: LeanResult[] = [];
    for (let i = 0; i < 4; i++) pool.get('/', (r) => called.push(r));
    await new Promise((r) => setTimeout(r, 50));
    pool.abandon();
    await new Promise((r) => setTimeout(r, 50));
    expect(called).toEqual([]);
  });
});
