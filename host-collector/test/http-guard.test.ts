// The attacks of issue 11 on the collector's HTTP face, each performed for real against a
// collector on loopback: token bypass by percent-encoding and absolute-form targets (hole 1),
// DNS rebinding and cross-site requests (hole 7), framing and the stream's token (hole 8).

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { TICKET_TTL_MS, Tickets } from '../src/http/tickets.js';
import { inProcessCollectors } from './support/collector.js';

const TOKEN = 's3cret-token';
const collectors = inProcessCollectors('vd-guard-');
const start = collectors.start;

beforeEach(() => {
  const ui = path.join(collectors.dir, 'ui');
  fs.mkdirSync(path.join(ui, 'assets'));
  fs.writeFileSync(path.join(ui, 'index.html'), '<!doctype html><title>t</title>');
  fs.writeFileSync(path.join(ui, 'assets', 'app.js'), 'console.log(1)');
});

interface Raw {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A request whose target and headers reach the server exactly as written (fetch would
 *  normalise the path, and cannot send an absolute-form target or another Host). */
function raw(port: number, method: string, target: string, headers: Record<string, string> = {}, body?: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path: target, headers: { host: `127.0.0.1:${port}`, ...headers } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Every route the collector serves, with a concrete path. The test below checks that this
 *  list is complete against the router's own, so a new route cannot slip past it. */
const ROUTES: Array<{ method: 'GET' | 'PUT' | 'POST' | 'DELETE'; path: string; access: 'public' | 'token'; body?: string }> = [
  { method: 'GET', path: '/healthz', access: 'public' },
  { method: 'GET', path: '/', access: 'public' },
  { method: 'GET', path: '/sandboxes/evil', access: 'public' },
  { method: 'GET', path: '/assets/app.js', access: 'public' },
  { method: 'GET', path: '/metrics', access: 'token' },
  { method: 'GET', path: '/v1/openapi.json', access: 'public' },
  { method: 'POST', path: '/v1/stream/tickets', access: 'token' },
  { method: 'GET', path: '/v1/stream', access: 'token' },
  { method: 'GET', path: '/v1/sandboxes', access: 'token' },
  { method: 'GET', path: '/v1/phases', access: 'token' },
  { method: 'PUT', path: '/v1/sandboxes/evil', access: 'token', body: '{"udsPath":"UDS"}' },
  { method: 'GET', path: '/v1/sandboxes/evil', access: 'token' },
  { method: 'DELETE', path: '/v1/sandboxes/evil', access: 'token' },
  { method: 'GET', path: '/v1/sandboxes/evil/readiness', access: 'token' },
  { method: 'GET', path: '/v1/sandboxes/evil/events', access: 'token' },
  { method: 'POST', path: '/v1/sandboxes/evil/lifecycle', access: 'token', body: '{"event":"pause"}' },
  { method: 'POST', path: '/v1/sandboxes/evil/dumps', access: 'token', body: '{"mode":"threads"}' },
  { method: 'GET', path: '/v1/sandboxes/evil/dumps', access: 'token' },
  { method: 'GET', path: '/v1/sandboxes/evil/dumps/1', access: 'token' },
  { method: 'GET', path: '/v1/sandboxes/evil/dumps/1/raw', access: 'token' },
  { method: 'GET', path: '/v1/sandboxes/evil/dumps/1/diff', access: 'token' },
];

/** The same path in the spellings the attack used: each letter of a segment encoded in turn
 *  (/%761/sandboxes, /v1/%73andboxes, …), and the absolute form. */
function spellings(p: string, port: number): string[] {
  const out = [p, `http://127.0.0.1:${port}${p}`, `http://localhost:${port}${p}`];
  const segments = p.split('/');
  for (let i = 1; i < segments.length; i++) {
    const seg = segments[i]!;
    if (!/^[a-z]/.test(seg)) continue;
    const enc = `%${seg.charCodeAt(0).toString(16)}${seg.slice(1)}`;
    out.push([...segments.slice(0, i), enc, ...segments.slice(i + 1)].join('/'));
    out.push([...segments.slice(0, i), enc.slice(0, 3).toUpperCase() + enc.slice(3), ...segments.slice(i + 1)].join('/'));
  }
  return [...new Set(out)];
}

describe('the token is decided by the matched route (hole 1)', () => {
  it('lists every route the router has', async () => {
    const { collector } = await start();
    const app = collector.http;
    const printed = app.printRoutes({ commonPrefix: false });
    const methods = [...printed.matchAll(/\(([A-Z, ]+)\)/g)].flatMap((m) => m[1]!.split(', ').filter((x) => x !== 'HEAD'));
    expect(methods.length).toBe(ROUTES.length);
    const pattern = (p: string) =>
      p.startsWith('/assets/') ? '/assets/*' : p.replace(/evil/g, ':id').replace('/dumps/1', '/dumps/:dumpId');
    for (const r of ROUTES) expect(app.hasRoute({ method: r.method, url: pattern(r.path) }), `${r.method} ${r.path}`).toBe(true);
  });

  it('refuses every protected route without the token, however its path is spelled', async () => {
    const { port } = await start({ token: TOKEN });
    const uds = path.join(collectors.dir, 'evil.sock');
    for (const r of ROUTES.filter((x) => x.access === 'token')) {
      for (const target of spellings(r.path, port)) {
        const body = r.body?.replace('UDS', uds);
        const res = await raw(port, r.method, target, body ? { 'content-type': 'application/json' } : {}, body);
        // 401 from the guard, or 400/404 where the router itself cannot match the spelling:
        // never an answer from the route.
        expect([400, 401, 404], `${r.method} ${target} answered ${res.status} ${res.body.slice(0, 200)}`).toContain(res.status);
        if (res.status !== 401) expect(res.body).not.toMatch(/"sandboxes"|"ticket"|vsockdiag_/);
      }
    }
    // The PUT never created a socket, under any spelling.
    expect(fs.existsSync(`${uds}_52000`)).toBe(false);
    // A path that matches no route needs the token too (deny by default).
    expect((await raw(port, 'GET', '/v1/no-such-route')).status).toBe(401);
    expect((await raw(port, 'GET', '/%6detrics')).status).toBe(401);
  });

  it('answers the protected routes with the token, and the public ones without', async () => {
    const { port } = await start({ token: TOKEN });
    const auth = { authorization: `Bearer ${TOKEN}` };
    for (const r of ROUTES) {
      const headers = r.access === 'token' ? auth : {};
      const body = r.body?.replace('UDS', path.join(collectors.dir, 'ok.sock'));
      const res = await raw(port, r.method, r.path, body ? { ...headers, 'content-type': 'application/json' } : headers, body);
      expect(res.status, `${r.method} ${r.path}`).not.toBe(401);
    }
    const healthz = await raw(port, 'GET', '/healthz');
    expect(healthz.status).toBe(200);
  });
});

describe('browsers on other sites cannot drive the API (hole 7)', () => {
  it('refuses a Host that is not loopback when bound to loopback (DNS rebinding)', async () => {
    const { port } = await start();
    for (const host of [
      'attacker.example',
      `attacker.example:${port}`,
      '127.0.0.1.attacker.example',
      'localhost.attacker.example:80',
      '127.0.0.1:80@x',
    ]) {
      const res = await raw(port, 'GET', '/v1/sandboxes', { host });
      expect(res.status, host).toBe(403);
    }
    const put = await raw(
      port,
      'PUT',
      '/v1/sandboxes/evil',
      { host: 'rebind.example', 'content-type': 'application/json' },
      JSON.stringify({ udsPath: path.join(collectors.dir, 'e.sock') }),
    );
    expect(put.status).toBe(403);
    expect(fs.existsSync(path.join(collectors.dir, 'e.sock_52000'))).toBe(false);
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost', `[::1]:${port}`, `127.1.2.3:${port}`]) {
      expect((await raw(port, 'GET', '/v1/sandboxes', { host })).status, host).toBe(200);
    }
  });

  it("refuses state-changing requests from another site's page", async () => {
    const { port } = await start();
    const uds = path.join(collectors.dir, 'x.sock');
    const put = (headers: Record<string, string>) =>
      raw(port, 'PUT', '/v1/sandboxes/x', { 'content-type': 'application/json', ...headers }, JSON.stringify({ udsPath: uds }));
    expect((await put({ origin: 'http://attacker.example' })).status).toBe(403);
    expect((await put({ origin: 'null' })).status).toBe(403);
    expect((await put({ 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    expect(fs.existsSync(`${uds}_52000`)).toBe(false);
    // The dashboard's own origin, and no browser at all (the CLI, curl), are fine.
    expect((await put({ origin: `http://127.0.0.1:${port}` })).status).toBe(201);
    expect((await raw(port, 'DELETE', '/v1/sandboxes/x', { origin: 'http://attacker.example' })).status).toBe(403);
    expect((await raw(port, 'DELETE', '/v1/sandboxes/x')).status).toBe(204);
  });

  it('refuses a cross-site "simple" POST: text/plain and form bodies never reach a route', async () => {
    const { port } = await start();
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const res = await raw(port, 'POST', '/v1/sandboxes/evil/dumps', { 'content-type': type }, '{"mode":"threads","destructive":true}');
      expect(res.status, type).toBe(415);
      expect(JSON.parse(res.body).error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    }
    // A JSON body gets as far as the route (which knows no such sandbox).
    const ok = await raw(port, 'POST', '/v1/sandboxes/evil/dumps', { 'content-type': 'application/json' }, '{"mode":"threads"}');
    expect(ok.status).toBe(404);
  });

  it("refuses a stream socket opened by another site's page", async () => {
    const { url } = await start();
    const open = (headers: Record<string, string>) =>
      new Promise<string>((resolve) => {
        const ws = new WebSocket(`${url.replace('http', 'ws')}/v1/stream`, { headers });
        ws.once('message', (d) => {
          ws.terminate();
          resolve(JSON.parse(d.toString()).type as string);
        });
        ws.once('error', (err) => resolve(err.message));
      });
    expect(await open({ origin: 'http://attacker.example' })).toMatch(/403/);
    expect(await open({ host: 'attacker.example' })).toMatch(/403/);
    expect(await open({ origin: url })).toBe('snapshot');
    expect(await open({})).toBe('snapshot');
  });
});

describe('headers and tickets (hole 8)', () => {
  it('forbids framing and sniffing on the dashboard and the API', async () => {
    const { port } = await start();
    for (const p of ['/', '/sandboxes/x', '/assets/app.js', '/v1/sandboxes', '/healthz']) {
      const res = await raw(port, 'GET', p);
      expect(res.headers['content-security-policy'], p).toMatch(/frame-ancestors 'none'/);
      expect(res.headers['content-security-policy'], p).toMatch(/script-src 'self'/);
      expect(res.headers['x-content-type-options'], p).toBe('nosniff');
      expect(res.headers['x-frame-options'], p).toBe('DENY');
    }
  });

  it('tickets are single-use and expire', () => {
    const t = new Tickets();
    const { ticket } = t.issue(1000);
    expect(t.redeem(ticket, 1001)).toBe(true);
    expect(t.redeem(ticket, 1002)).toBe(false);
    const late = t.issue(5000).ticket;
    expect(t.redeem(late, 5000 + TICKET_TTL_MS)).toBe(false);
    expect(t.redeem('', 0)).toBe(false);
  });
});
