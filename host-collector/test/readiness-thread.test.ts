// The readiness thread (--readiness-http): the readiness route on a port of its own, answered
// from the thread's mirror of the fleet. Each test runs a collector from source with the
// thread bundled from source (support/workers.ts) and a probe speaking the real protocol.
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
// A fixed pause only to let a long-poll start before what should end it.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Hello } from '@vsockdiag/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../test/support/wait.js';
import { Collector } from '../src/collector/collector.js';
import { READINESS_NICE } from '../src/readiness/priority.js';
import { call, expectError, probeClients, readyStatus, type Json } from './support/api.js';
import { inProcessCollectors } from './support/collector.js';
import { EXITING_READINESS_WORKER, READINESS_WORKER, bundleWorker } from './support/workers.js';

const VSOCK_PORT = 52000;
const TOKEN = 'a-token-for-the-readiness-tests';
const collectors = inProcessCollectors('vd-readiness-');
let worker: { url: URL; remove: () => void };
let exiting: { url: URL; remove: () => void };

beforeAll(async () => {
  worker = await bundleWorker(READINESS_WORKER);
  exiting = await bundleWorker(EXITING_READINESS_WORKER);
}, 60_000);
afterAll(() => {
  worker?.remove();
  exiting?.remove();
});
const probe = probeClients(VSOCK_PORT);

async function start(over: Parameters<typeof collectors.start>[0] = {}) {
  const started = await collectors.start({ readinessHttp: '127.0.0.1:0', readinessWorkerUrl: worker.url, ...over });
  return { ...started, readiness: started.collector.readinessUrl! };
}

const bootingStatus: Hello['status'] = { target: null, listener: { port: 49983, bound: false }, phases: { reported: false, ready: false } };

/** A GET with a Host header of our choosing (fetch cannot send another Host). */
function getWithHost(url: string, route: string, host: string): Promise<{ status: number; json: Json | null }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.get({ host: u.hostname, port: u.port, path: route, headers: { host } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as Json }));
    });
    req.on('error', reject);
  });
}

/** The same reason read at another moment: its durations may read differently. */
const withoutDurations = (reason: string) => reason.replace(/\b\d+(?:\.\d+)?(?:ms|s)\b|\b\d+[mhd]\d+[smh]\b/g, 'D');

/** vsockdiag_readiness_thread_up in the main API's /metrics; undefined when it has none. */
async function threadUp(url: string): Promise<string | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return /^vsockdiag_readiness_thread_up (\S+)$/m.exec(text)?.[1];
}

describe('the readiness thread', () => {
  it('answers on its own port what the main API answers, as the sandbox moves through its states', async () => {
    const { url, readiness } = await start();
    expect(new URL(readiness).port).not.toBe(new URL(url).port);
    const udsPath = path.join(collectors.dir, 'vm1.sock');
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    const same = async (state: string, status: number) => {
      const main = await waitFor(`the main API to say ${state}`, async () => {
        const r = await call(url, 'GET', '/v1/sandboxes/vm1/readiness');
        return r.json?.state === state ? r : null;
      });
      const thread = await waitFor(`the readiness thread to say ${state}`, async () => {
        const r = await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness');
        return r.json?.state === state ? r : null;
      });
      expect(thread.status).toBe(status);
      expect(main.status).toBe(status);
      expect(Object.keys(thread.json!).sort()).toEqual(['generation', 'ready', 'reason', 'session', 'state']);
      expect({ ...thread.json, reason: withoutDurations(thread.json!.reason) }).toEqual({
        ...main.json,
        reason: withoutDurations(main.json!.reason),
      });
      expect(thread.headers.get('x-frame-options')).toBe('DENY');
      return thread.json!;
    };
    expect(await same('registered', 503)).toMatchObject({
      ready: false,
      reason: 'waiting for the probe to connect',
      generation: 0,
      session: 0,
    });
    const client = probe(udsPath, bootingStatus);
    await client.connect();
    expect((await same('booting', 503)).reason).toMatch(/^probe connected .* ago, envd not seen yet$/);
    client.events([
      { kind: 'target.found', pid: 42, name: 'envd', startedAt: 1000, source: 'name' },
      { kind: 'listener.bound', port: 49983, address: '0.0.0.0', inode: 7, pid: 42 },
    ]);
    const ready = await same('ready', 200);
    expect(ready).toMatchObject({ ready: true, generation: 1, session: 1 });
    expect(ready.reason).toContain('listening on :49983');
    client.close();
    expect((await same('silent', 503)).reason).toMatch(/^probe silent since /);
  });

  it('renders a reason’s durations at each answer, not when the main thread posted it', async () => {
    const { url, readiness } = await start();
    const udsPath = path.join(collectors.dir, 'vm1.sock');
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath });
    await probe(udsPath, bootingStatus).connect();
    const ago = async () => {
      const r = await waitFor('booting', async () => {
        const a = await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness');
        return a.json?.state === 'booting' ? a.json : null;
      });
      return /^probe connected (.*) ago/.exec(r.reason)![1]!;
    };
    const first = await ago();
    await sleep(1200); // nothing changes meanwhile: the main thread posts nothing
    const later = await ago();
    expect(later).not.toBe(first);
    expect(later).toMatch(/^\d+\.\ds$/);
  });

  it('long-polls: answers as soon as the sandbox is ready, and 404 when it is unregistered meanwhile', async () => {
    const { url, readiness } = await start();
    const a = path.join(collectors.dir, 'a.sock');
    const b = path.join(collectors.dir, 'b.sock');
    await call(url, 'PUT', '/v1/sandboxes/a', { udsPath: a });
    await call(url, 'PUT', '/v1/sandboxes/b', { udsPath: b });
    await waitFor('the thread to know both', async () => ((await call(readiness, 'GET', '/healthz')).json?.sandboxes === 2 ? true : null));

    const t0 = Date.now();
    const pending = call(readiness, 'GET', '/v1/sandboxes/a/readiness?wait=60000');
    await sleep(100);
    await probe(a, readyStatus).connect();
    const r = await pending;
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ ready: true, state: 'ready', generation: 1 });

    const gone = call(readiness, 'GET', '/v1/sandboxes/b/readiness?wait=60000');
    await sleep(100);
    expect((await call(url, 'DELETE', '/v1/sandboxes/b')).status).toBe(204);
    expectError(await gone, 404, 'NOT_FOUND');

    const t1 = Date.now();
    await call(url, 'PUT', '/v1/sandboxes/b', { udsPath: b });
    await waitFor('b again', async () => ((await call(readiness, 'GET', '/v1/sandboxes/b/readiness')).status === 503 ? true : null));
    const quiet = await call(readiness, 'GET', '/v1/sandboxes/b/readiness?wait=300');
    expect(Date.now() - t1).toBeGreaterThanOrEqual(280);
    expect(quiet.json).toMatchObject({ ready: false, state: 'registered' });
  });

  it('knows nothing of a registration that could not listen', async () => {
    const { url, readiness } = await start();
    const bad = await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'no-such-dir', 'vm.sock') });
    expectError(bad, 422, 'LISTEN_FAILED');
    // The thread applies updates in order: once it knows a later sandbox, it has had every
    // update about the failed one.
    await call(url, 'PUT', '/v1/sandboxes/vm2', { udsPath: path.join(collectors.dir, 'vm2.sock') });
    await waitFor('the readiness thread to know vm2', async () => {
      const r = await call(readiness, 'GET', '/v1/sandboxes/vm2/readiness');
      return r.json?.state === 'registered' ? r : null;
    });
    expectError(await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness'), 404, 'NOT_FOUND');
  });

  it('serves only readiness and its health, with the API’s errors', async () => {
    const { url, readiness } = await start();
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') });
    expectError(await call(readiness, 'GET', '/v1/sandboxes/nope/readiness'), 404, 'NOT_FOUND');
    expectError(await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness?wait=abc'), 400, 'BAD_REQUEST');
    expectError(await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness?wait=120001'), 400, 'BAD_REQUEST');
    expectError(await call(readiness, 'GET', '/v1/sandboxes'), 404, 'NOT_FOUND');
    expectError(await call(readiness, 'GET', '/v1/sandboxes/vm1'), 404, 'NOT_FOUND');
    expectError(await call(readiness, 'POST', '/v1/sandboxes/vm1/readiness', {}), 405, 'METHOD_NOT_ALLOWED');
    expectError(await getWithHost(readiness, '/v1/sandboxes/vm1/readiness', 'rebind.example'), 403, 'FORBIDDEN');
    expect((await call(readiness, 'GET', '/healthz')).json).toEqual({ ok: true, sandboxes: 1 });
  });

  it('asks for the API’s token, except on /healthz', async () => {
    const { url, readiness } = await start({ token: TOKEN });
    const auth = { authorization: `Bearer ${TOKEN}` };
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') }, auth);
    expectError(await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness'), 401, 'UNAUTHORIZED');
    expectError(
      await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness', undefined, { authorization: 'Bearer wrong' }),
      401,
      'UNAUTHORIZED',
    );
    expectError(await call(readiness, 'GET', '/v1/sandboxes/nope/readiness'), 401, 'UNAUTHORIZED');
    const r = await waitFor('vm1 on the thread', async () => {
      const a = await call(readiness, 'GET', '/v1/sandboxes/vm1/readiness', undefined, auth);
      return a.status === 503 ? a : null;
    });
    expect(r.json).toMatchObject({ state: 'registered' });
    expect((await call(readiness, 'GET', '/healthz')).status).toBe(200);
  });

  it('refuses a non-loopback address without a token, and says when it cannot listen', async () => {
    expect(() => collectors.create({ readinessHttp: '0.0.0.0:0', readinessWorkerUrl: worker.url })).toThrow(
      'refusing to serve readiness on non-loopback 0.0.0.0 without --token',
    );
    expect(() => collectors.create({ readinessHttp: 'nonsense', readinessWorkerUrl: worker.url })).toThrow(/--readiness-http/);
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const port = (taken.address() as net.AddressInfo).port;
      const c = collectors.create({ readinessHttp: `127.0.0.1:${port}`, readinessWorkerUrl: worker.url });
      await expect(c.start()).rejects.toThrow(`the readiness thread cannot listen on 127.0.0.1:${port}: `);
    } finally {
      taken.close();
    }
  });

  it('starts a lost thread again on the same port, with the whole fleet', async () => {
    const { url, readiness } = await start({ readinessWorkerUrl: exiting.url });
    await call(url, 'PUT', '/v1/sandboxes/vm1', { udsPath: path.join(collectors.dir, 'vm1.sock') });
    await call(url, 'PUT', '/v1/sandboxes/exit-now', { udsPath: path.join(collectors.dir, 'x.sock') });
    await waitFor('both on the thread', async () => ((await call(readiness, 'GET', '/healthz')).json?.sandboxes === 2 ? true : null));
    expect(await threadUp(url)).toBe('1');
    expect((await call(url, 'DELETE', '/v1/sandboxes/exit-now')).status).toBe(204);
    await waitFor('the thread to go', () =>
      call(readiness, 'GET', '/healthz').then(
        () => null,
        () => true,
      ),
    );
    // Down until it is started again a second later (the test and the collector share a loop).
    await waitFor('the gauge to say down', async () => (await threadUp(url)) === '0');
    const back = await waitFor(
      'the thread to come back',
      () =>
        call(readiness, 'GET', '/v1/sandboxes/vm1/readiness').then(
          (r) => r,
          () => null,
        ),
      { timeoutMs: 30_000 },
    );
    expect(back.json).toMatchObject({ ready: false, state: 'registered' });
    expect((await call(readiness, 'GET', '/healthz')).json).toEqual({ ok: true, sandboxes: 1 });
    expect(await threadUp(url)).toBe('1');
  });
});

describe("the readiness thread's priority", () => {
  /** This process's threads by nice value (/proc/self/task/<tid>/stat, field 19). */
  function niceOfThreads(): Map<number, number> {
    const out = new Map<number, number>();
    for (const tid of fs.readdirSync('/proc/self/task')) {
      try {
        const stat = fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
        out.set(Number(tid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]));
      } catch {
        // A thread that ended meanwhile.
      }
    }
    return out;
  }
  const atReadinessNice = () => [...niceOfThreads().values()].filter((n) => n === READINESS_NICE).length;

  it(`runs the thread alone at nice ${READINESS_NICE} where the OS allows it, the rest of the collector as it was`, async () => {
    const before = atReadinessNice();
    const mainNice = niceOfThreads().get(process.pid);
    const { collector } = await start();
    // Root (as CI and the bench run) may lower a nice value; anyone else keeps 0 and is told why.
    const allowed = process.getuid?.() === 0;
    await waitFor('the thread to take its priority', () => atReadinessNice() === before + (allowed ? 1 : 0), { timeoutMs: 10_000 });
    expect(niceOfThreads().get(process.pid)).toBe(mainNice);
    await collector.stop();
    await waitFor('the thread to end', () => atReadinessNice() === before, { timeoutMs: 10_000 });
  });
});

describe('without --readiness-http', () => {
  it('starts no thread: the main API alone serves readiness', async () => {
    const { collector, url } = await collectors.start();
    expect(collector).toBeInstanceOf(Collector);
    expect(collector.readinessUrl).toBeNull();
    expect(await threadUp(url)).toBeUndefined();
  });
});
