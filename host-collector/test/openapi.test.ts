// The API's contract: docs/openapi.json is what a collector serves at /v1/openapi.json
// (regenerate it with `pnpm openapi`), every route is in it with its schemas, every answer a
// real collector gives (to a real probe's sandbox, and to bad requests) is one the document
// declares, and each kind of refusal has its own code.

import fs from 'node:fs';
import path from 'node:path';
import { onTestFinished, afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { CollectorMessage } from '@vsockdiag/proto';
import { ProbeClient } from '../../test/harness/probe-client.js';
import { waitFor } from '../../test/support/wait.js';
import { API_ERRORS } from '../src/catalogue.js';
import { inProcessCollectors } from './support/collector.js';
import { REAL_WORKER, bundleWorker } from './support/workers.js';
import { OPENAPI_FILE, loadOpenApi } from './support/openapi.js';

const collectors = inProcessCollectors('vd-openapi-');
const probes: ProbeClient[] = [];
afterEach(() => {
  for (const p of probes.splice(0)) p.socket?.destroy();
});

const TRACEBACK = fs.readFileSync(new URL('./fixtures/dumps/fake-envd-go1.19-sigquit-cgroup-hang.txt', import.meta.url));

/** Answers dump commands as a probe would: a Go traceback for goroutines, a threads text otherwise. */
function answerDumps(m: CollectorMessage, c: ProbeClient): void {
  if (m.type !== 'command' || m.op !== 'dump') return;
  const text = m.mode === 'goroutines' ? TRACEBACK : Buffer.from('threads of envd (pid 42)\ntask 42 S futex_wait_queue\n');
  c.send({ type: 'dump.chunk', id: m.id, index: 0, data: text });
  const source = m.mode === 'goroutines' ? 'memory' : 'proc';
  c.send({
    type: 'result',
    id: m.id,
    ok: true,
    dump: { mode: m.mode ?? 'threads', source, complete: true, bytes: text.length, chunks: 1, pid: 42 },
  });
}

/** A request whose answer is checked against the document before the test looks at it. */
function client(base: string, api = loadOpenApi()) {
  return async (method: string, route: string, init: { body?: string; json?: unknown; headers?: Record<string, string> } = {}) => {
    const headers: Record<string, string> = { ...init.headers };
    let body = init.body;
    if (init.json !== undefined) {
      body = JSON.stringify(init.json);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(base + route, { method, headers, ...(body !== undefined ? { body } : {}) });
    const text = await res.text();
    const type = res.headers.get('content-type');
    const parsed = type?.startsWith('application/json') && text ? (JSON.parse(text) as any) : text;
    api.expectValid(method, route, res.status, type, parsed);
    return { status: res.status, json: parsed, headers: res.headers };
  };
}

describe('docs/openapi.json', () => {
  it('is what the collector serves at /v1/openapi.json, without a token (regenerate: pnpm openapi)', async () => {
    const { url } = await collectors.start({ token: 'tok' });
    const res = await fetch(`${url}/v1/openapi.json`);
    expect(res.status).toBe(200);
    const served = await res.text();
    if (process.env.VSOCKDIAG_WRITE_OPENAPI === '1') fs.writeFileSync(OPENAPI_FILE, served);
    const committed = fs.readFileSync(OPENAPI_FILE, 'utf8');
    expect(served, 'docs/openapi.json is stale: run `pnpm openapi` and commit it').toBe(committed);
    const doc = JSON.parse(served);
    expect(doc.openapi).toBe('3.1.0');
    // The error code enum is the catalogue's.
    expect(doc.components.schemas.Error.properties.error.properties.code.enum).toEqual(Object.keys(API_ERRORS));
  });

  it('has every API route of the router, each with an operationId, a summary, its parameters and answers', async () => {
    const { collector } = await collectors.start();
    const api = loadOpenApi();
    // As many routes as the router has, less the dashboard's three pages (not the API).
    const printed = collector.http.printRoutes({ commonPrefix: false });
    const methods = [...printed.matchAll(/\(([A-Z, ]+)\)/g)].flatMap((m) => m[1]!.split(', ').filter((x) => x !== 'HEAD'));
    const ops = Object.entries(api.doc.paths as Record<string, Record<string, any>>).flatMap(([template, byMethod]) =>
      Object.entries(byMethod).map(([method, op]) => ({ template, method: method.toUpperCase(), op })),
    );
    expect(ops.length).toBe(methods.length - 3);
    const ids = new Set<string>();
    for (const { template, method, op } of ops) {
      const url = template.replace(/\{([A-Za-z0-9_]+)\}/g, ':$1');
      expect(collector.http.hasRoute({ method, url }), `${method} ${url}`).toBe(true);
      expect(op.operationId).toMatch(/^[a-z][A-Za-z]+$/);
      expect(ids.has(op.operationId), op.operationId).toBe(false);
      ids.add(op.operationId);
      expect(op.summary?.length).toBeGreaterThan(3);
      const inPath = [...url.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]);
      expect((op.parameters ?? []).filter((p: any) => p.in === 'path').map((p: any) => p.name)).toEqual(inPath);
      expect(Object.keys(op.responses).some((status) => /^[12]\d\d$/.test(status))).toBe(true);
    }
    // Every $ref names a component that exists.
    const refs = [...JSON.stringify(api.doc).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1]!);
    for (const r of refs) expect(api.doc.components.schemas[r], r).toBeDefined();
  });
});

describe("the README's API table", () => {
  it('lists exactly the routes of the document', () => {
    const readme = fs.readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const section = readme.slice(readme.indexOf('\n## API\n'), readme.indexOf('\n## ', readme.indexOf('\n## API\n') + 1));
    const listed = [...section.matchAll(/^\| `(GET|PUT|POST|DELETE) (\/[^`\s[?]*)/gm)].map(
      (m) => `${m[1]} ${m[2]!.replace(/:([A-Za-z]+)/g, '{$1}')}`,
    );
    const doc = loadOpenApi().doc;
    const routes = Object.entries(doc.paths as Record<string, object>).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`),
    );
    expect(listed.sort()).toEqual(routes.sort());
  });
});

describe('real answers match the document', () => {
  // A real worker bundled, three dumps analysed and a diff: generous under a loaded machine.
  it('a sandbox with a probe, its events, dumps, diff, phases, stream and metrics', { timeout: 60_000 }, async () => {
    const worker = await bundleWorker(REAL_WORKER);
    onTestFinished(worker.remove);
    const { url } = await collectors.start({ dumpWorkerUrl: worker.url });
    const api = loadOpenApi();
    const call = client(url, api);
    const udsPath = path.join(collectors.dir, 'vm.sock');

    expect((await call('GET', '/healthz')).status).toBe(200);
    expect((await call('PUT', '/v1/sandboxes/vm', { json: { udsPath } })).status).toBe(201);
    expect((await call('PUT', '/v1/sandboxes/vm', { json: { udsPath } })).status).toBe(200);
    expect((await call('GET', '/v1/sandboxes/vm/readiness')).status).toBe(503);

    // The stream, from before the probe: its messages are the document's too.
    const ws = new WebSocket(`${url.replace('http', 'ws')}/v1/stream`);
    onTestFinished(() => ws.terminate());
    const messages: any[] = [];
    ws.on('message', (d) => messages.push(JSON.parse(d.toString())));
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    ws.send(JSON.stringify({ type: 'subscribe', id: 'vm' }));
    await waitFor('subscribed', () => messages.some((m) => m.type === 'subscribed'));

    const probe = new ProbeClient({
      path: `${udsPath}_52000`,
      heartbeatMs: 1000,
      onMessage: answerDumps,
      status: {
        target: { pid: 42, name: 'envd', startedAt: 1000, source: 'name', alive: true, threads: 9, rssKb: 2048 },
        listener: { port: 49983, bound: true, since: 1500, pid: 42, address: '0.0.0.0', acceptQueue: 0 },
        phases: { reported: false, ready: false },
        sockets: {
          t: 1600,
          tcpInUse: 3,
          timeWait: 1,
          byState: { ESTABLISHED: 2 },
          top: [{ address: '169.254.169.254', port: 80, count: 2 }],
        },
        system: { t: 1600, uptimeMs: 1600, load: [0.1, 0.2, 0.3], memTotalKb: 1024, memAvailableKb: 512, bootId: 'b', wallMs: Date.now() },
        health: { url: 'http://127.0.0.1:49983/health', t: 1600, ok: true, status: 200, latencyMs: 3 },
        probe: { listenerSource: 'sock_diag' },
      },
    });
    probes.push(probe);
    await probe.connect();
    const last = probe.events([
      { kind: 'phase', source: 'notify', name: 'cgroups', status: 'setting up' },
      { kind: 'log.lines', stream: 'stderr', lines: ['hello'] },
      { kind: 'phase', source: 'notify', ready: true },
      { kind: 'kernel', what: 'oom', process: 'envd', pid: 42, message: 'Out of memory: killed envd', kernelMs: 1700 },
    ]);
    await probe.waitAcked(last, 10_000);

    expect((await call('GET', '/v1/sandboxes')).json.sandboxes).toHaveLength(1);
    expect((await call('GET', '/v1/sandboxes?state=ready')).status).toBe(200);
    const detail = (await call('GET', '/v1/sandboxes/vm')).json;
    // Nothing the dashboard reads was dropped by the serialiser: guest-reported fields pass.
    expect(detail.target).toMatchObject({ pid: 42, name: 'envd', threads: 9, rssKb: 2048 });
    expect(detail.sockets.top).toEqual([{ address: '169.254.169.254', port: 80, count: 2 }]);
    expect(detail.system.load).toEqual([0.1, 0.2, 0.3]);
    expect(detail.health).toMatchObject({ url: 'http://127.0.0.1:49983/health', latencyMs: 3 });
    expect(detail.probe).toMatchObject({ instanceId: '0123456789abcdef', listenerSource: 'sock_diag' });
    expect(detail.kernel[0]).toMatchObject({ what: 'oom', message: 'Out of memory: killed envd' });
    expect(detail.phases[0]).toMatchObject({ name: 'cgroups', status: 'setting up', source: 'notify' });
    expect(await call('GET', '/v1/sandboxes/vm/readiness?wait=10')).toMatchObject({ status: 200, json: { ready: true, state: 'ready' } });

    const events = (await call('GET', '/v1/sandboxes/vm/events?limit=1000')).json;
    expect(events.events.map((e: any) => e.kind)).toEqual(expect.arrayContaining(['session.open', 'phase', 'log.lines', 'kernel']));
    expect((await call('GET', '/v1/sandboxes/vm/events?order=desc&kind=target.&limit=5')).status).toBe(200);

    const first = await call('POST', '/v1/sandboxes/vm/dumps', { json: { mode: 'goroutines' } });
    expect(first.status).toBe(201);
    // No body at all is the default dump.
    expect(await call('POST', '/v1/sandboxes/vm/dumps')).toMatchObject({ status: 201, json: { mode: 'threads' } });
    const second = await call('POST', '/v1/sandboxes/vm/dumps', { json: { mode: 'goroutines', destructive: false } });
    expect((await call('GET', '/v1/sandboxes/vm/dumps')).json.dumps).toHaveLength(3);
    const full = (await call('GET', `/v1/sandboxes/vm/dumps/${second.json.id}`)).json;
    expect(full.kind).toBe('goroutines');
    expect(full.goroutineGroups[0].frames.length).toBeGreaterThan(0); // groups pass whole
    const raw = await call('GET', `/v1/sandboxes/vm/dumps/${second.json.id}/raw`);
    expect(raw.json).toBe(TRACEBACK.toString('utf8'));
    const diff = await call('GET', `/v1/sandboxes/vm/dumps/${second.json.id}/diff?against=${first.json.id}`);
    expect(diff.json).toMatchObject({ older: first.json.id, newer: second.json.id });
    expect((await call('GET', `/v1/sandboxes/vm/dumps/${second.json.id}/diff`)).status).toBe(200);
    expect((await call('GET', '/v1/phases')).json.phases[0]).toMatchObject({ name: 'cgroups' });
    expect((await call('POST', '/v1/stream/tickets')).status).toBe(201);
    expect((await call('GET', '/metrics')).status).toBe(200);
    expect((await call('GET', '/v1/openapi.json')).status).toBe(200);

    await waitFor('stream events', () => messages.some((m) => m.type === 'event') && messages.some((m) => m.type === 'sandbox'));
    expect((await call('DELETE', '/v1/sandboxes/vm')).status).toBe(204);
    await waitFor('removed', () => messages.some((m) => m.type === 'removed'));
    for (const m of messages) api.expectComponent('StreamServerMessage', m);
    // Stream events carry the ids the history lists them by.
    const streamed = messages.filter((m) => m.type === 'event').map((m) => m.event);
    const byId = new Map(events.events.map((e: any) => [e.id, e]));
    expect(streamed.filter((e) => byId.has(e.id)).length).toBeGreaterThan(0);
    for (const e of streamed) if (byId.has(e.id)) expect(e).toEqual(byId.get(e.id));
  });
});

describe('refusals have their own codes', () => {
  const expectCode = (r: { status: number; json: any }, status: number, code: string) => {
    expect(r.status).toBe(status);
    expect(r.json.error.code).toBe(code);
    expect(API_ERRORS[code as keyof typeof API_ERRORS].status).toBe(status);
  };

  it('400 BAD_REQUEST for a body, query or parameter outside the schema: [1] takes no dump', async () => {
    const { url } = await collectors.start();
    const call = client(url);
    const udsPath = path.join(collectors.dir, 'vm.sock');
    const put = await call('PUT', '/v1/sandboxes/vm', { json: { udsPath } });
    expect(put.status, JSON.stringify(put.json)).toBe(201);
    for (const json of [[1], { mode: 'everything' }, { destructive: 'yes' }, { mode: 'threads', extra: 1 }, 'threads', null]) {
      expectCode(await call('POST', '/v1/sandboxes/vm/dumps', { json }), 400, 'BAD_REQUEST');
    }
    expect((await call('GET', '/v1/sandboxes/vm/dumps')).json.dumps).toEqual([]);
    // Bodies are not coerced: 7 is no path.
    expectCode(await call('PUT', '/v1/sandboxes/vm2', { json: { udsPath: 7 } }), 400, 'BAD_REQUEST');
    expectCode(await call('PUT', '/v1/sandboxes/vm2', { json: [udsPath] }), 400, 'BAD_REQUEST');
    const bad = await call('GET', '/v1/sandboxes?state=sleeping');
    expectCode(bad, 400, 'BAD_REQUEST');
    expect(bad.json.error.message).toContain('registered');
    expectCode(await call('GET', '/v1/sandboxes/vm/readiness?wait=soon'), 400, 'BAD_REQUEST');
    expectCode(await call('GET', '/v1/sandboxes/vm/dumps/x'), 400, 'BAD_REQUEST');
    expectCode(
      await call('PUT', '/v1/sandboxes/vm2', { body: '{"udsPath":', headers: { 'content-type': 'application/json' } }),
      400,
      'BAD_REQUEST',
    );
  });

  it('404 NOT_FOUND for no such route, sandbox or dump', async () => {
    const { url } = await collectors.start();
    const res = await fetch(`${url}/v1/nothing-here`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as any).error.code).toBe('NOT_FOUND');
    const call = client(url);
    expectCode(await call('GET', '/v1/sandboxes/nobody'), 404, 'NOT_FOUND');
    await call('PUT', '/v1/sandboxes/vm', { json: { udsPath: path.join(collectors.dir, 'vm.sock') } });
    expectCode(await call('GET', '/v1/sandboxes/vm/dumps/99'), 404, 'NOT_FOUND');
  });

  it('405 METHOD_NOT_ALLOWED, with Allow, for a path that has other methods', async () => {
    const { url } = await collectors.start();
    for (const [method, route, allow] of [
      ['POST', '/v1/sandboxes', 'GET, HEAD'],
      ['PATCH', '/v1/sandboxes/vm', 'DELETE, GET, HEAD, PUT'],
      ['DELETE', '/v1/sandboxes/vm/dumps', 'GET, HEAD, POST'],
      ['GET', '/v1/stream/tickets', 'POST'],
    ] as const) {
      const res = await fetch(url + route, { method });
      expect(res.status, `${method} ${route}`).toBe(405);
      expect(res.headers.get('allow')).toBe(allow);
      expect(((await res.json()) as any).error.code).toBe('METHOD_NOT_ALLOWED');
    }
  });

  it('413 PAYLOAD_TOO_LARGE for a body over the limit', async () => {
    const { url } = await collectors.start();
    const r = await client(url)('PUT', '/v1/sandboxes/vm', { json: { udsPath: `/${'x'.repeat(70 * 1024)}` } });
    expectCode(r, 413, 'PAYLOAD_TOO_LARGE');
  });

  it('415 UNSUPPORTED_MEDIA_TYPE for a body that is not JSON', async () => {
    const { url } = await collectors.start();
    const call = client(url);
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      expectCode(
        await call('POST', '/v1/sandboxes/vm/dumps', { body: 'mode=threads', headers: { 'content-type': type } }),
        415,
        'UNSUPPORTED_MEDIA_TYPE',
      );
    }
  });

  it('426 UPGRADE_REQUIRED for the stream without a WebSocket upgrade', async () => {
    const { url } = await collectors.start();
    expectCode(await client(url)('GET', '/v1/stream'), 426, 'UPGRADE_REQUIRED');
  });

  it('401 UNAUTHORIZED in the same shape, as the document says', async () => {
    const { url } = await collectors.start({ token: 'tok' });
    expectCode(await client(url)('GET', '/v1/sandboxes'), 401, 'UNAUTHORIZED');
  });
});
