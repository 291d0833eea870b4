// Reads never record: a GET or a /metrics scrape that lands on a threshold before its timer
// fires shows the state the history has, stores nothing, and the timer records the
// transition after it (Sandbox.read). Time is fake so "right at the threshold" is exact;
// the probe is a real connection to the sandbox's socket.

import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ProbeClient } from '../../test/harness/probe-client.js';
import { waitFor } from '../../test/support/wait.js';
import type { Collector } from '../src/collector/collector.js';
import { inProcessCollectors } from './support/collector.js';

const T0 = Date.UTC(2030, 0, 1);
/** The target started 1000 ms before the hello (guest 1000 vs 2000), so with this stall
 *  window the sandbox turns stuck at T0 + 1000, and the timer looks at T0 + 1001. */
const STALL_MS = 2000;

const collectors = inProcessCollectors('vd-reads-');
let probe: ProbeClient | null = null;

afterEach(() => {
  vi.useRealTimers();
  probe?.close();
  probe = null;
});

const makeCollector = () => collectors.create({ stallAfterMs: STALL_MS, startDeadlineMs: 60_000 });

/** A probe whose target started and never got further; it answers every command with a
 *  failure, so the automatic dumps a stuck state starts end at once. */
async function connectProbe(socketPath: string): Promise<ProbeClient> {
  probe = new ProbeClient({
    path: socketPath,
    sinceBootMs: () => 2000,
    status: {
      target: { pid: 42, name: 'envd', startedAt: 1000, source: 'name', alive: true },
      listener: { port: 49983, bound: false },
      phases: { reported: false, ready: false },
    },
    onMessage: (m, client) => {
      if (m.type === 'command') client.send({ type: 'result', id: m.id, ok: false, error: 'no dumps in this test' });
    },
  });
  await probe.connect();
  return probe;
}

async function get(c: Collector, url: string): Promise<{ status: number; body: string }> {
  const r = await c.http.inject({ method: 'GET', url, headers: { host: 'localhost' } });
  return { status: r.statusCode, body: r.body };
}

const states = (c: Collector, id: string) =>
  c.store.events(id, { kind: 'state', after: 0, limit: 100 }).events.map((e) => (e.data as { state: string }).state);

/** A collector with sandbox `r` starting at T0 (fake time from here on), and its probe. */
async function starting(): Promise<{ c: Collector; probe: ProbeClient }> {
  const c = makeCollector();
  await c.http.ready();
  const { sandbox } = await c.registry.register('r', path.join(collectors.dir, 'v.sock'), 'api');
  vi.useFakeTimers({ now: T0, toFake: ['Date', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
  const probe = await connectProbe(sandbox.socketPath);
  expect(sandbox.state).toBe('starting');
  return { c, probe };
}

describe('reads at a threshold', { timeout: 20_000 }, () => {
  it('a GET or scrape right at the threshold stores nothing and shows what the history has', async () => {
    const { c } = await starting();
    const sb = c.registry.get('r')!;
    vi.advanceTimersByTime(1000); // T0 + 1000: stuck by the clock, the timer not yet run
    expect(Date.now()).toBe(T0 + STALL_MS - 1000);
    const append = vi.spyOn(c.store, 'append');

    const list = JSON.parse((await get(c, '/v1/sandboxes')).body);
    const one = JSON.parse((await get(c, '/v1/sandboxes/r')).body);
    const ready = await get(c, '/v1/sandboxes/r/readiness');
    const metrics = (await get(c, '/metrics')).body;

    expect(append).not.toHaveBeenCalled();
    expect(list.sandboxes[0].state).toBe('starting');
    expect(one.state).toBe('starting');
    expect(ready.status).toBe(503);
    expect(JSON.parse(ready.body).state).toBe('starting');
    expect(metrics).toContain('vsockdiag_sandboxes{state="starting"} 1');
    expect(states(c, 'r')).toEqual(['starting']);
    const [recorded] = c.store.events('r', { kind: 'state', after: 0, limit: 1 }).events;
    expect(one.since).toBe(new Date(recorded!.tHost).toISOString());
    // The reason is written for the moment held just short of the threshold: a starting one.
    expect(one.reason).not.toContain('deadline');

    vi.advanceTimersByTime(1); // the timer: now the history says stuck, and so do reads
    expect(append).toHaveBeenCalled();
    expect(states(c, 'r')).toEqual(['starting', 'stuck']);
    expect(sb.state).toBe('stuck');
    expect(JSON.parse((await get(c, '/v1/sandboxes/r')).body).state).toBe('stuck');
    await waitFor('the automatic dumps to end', () => c.store.events('r', { kind: 'dump', after: 0, limit: 10 }).events.length >= 2);
  });

  it('a heartbeat that corrects the guest clock moves the threshold, and records it then', async () => {
    const { c, probe } = await starting();
    const sb = c.registry.get('r')!;
    vi.advanceTimersByTime(500);
    // Guest 3000 at host T0 + 500: the hello was 500 ms late, so the target started at
    // T0 - 1500 and is stuck already, though the timer was armed for T0 + 1001.
    probe.send({ type: 'heartbeat', sinceBootMs: 3000 });
    await waitFor('the heartbeat to be decided on', () => sb.state === 'stuck');
    expect(states(c, 'r')).toEqual(['starting', 'stuck']);
    const [, stuck] = c.store.events('r', { kind: 'state', after: 0, limit: 10 }).events;
    expect(stuck!.tHost).toBe(T0 + 500);
    expect(JSON.parse((await get(c, '/v1/sandboxes/r')).body).state).toBe('stuck');
    await waitFor('the automatic dumps to end', () => c.store.events('r', { kind: 'dump', after: 0, limit: 10 }).events.length >= 2);
  });
});

describe('a socket the collector cannot listen on', () => {
  it('is the reason every reader sees, from the verdict', async () => {
    const dir = path.join(collectors.dir, 'vm');
    fs.mkdirSync(dir);
    const first = makeCollector();
    await first.registry.register('gone', path.join(dir, 'v.sock'), 'api');
    await collectors.stop(first);
    fs.rmSync(dir, { recursive: true });

    const c = makeCollector();
    await c.registry.restore();
    const one = JSON.parse((await get(c, '/v1/sandboxes/gone')).body);
    expect(one.state).toBe('registered');
    expect(one.reason).toMatch(new RegExp(`^cannot listen on ${dir}/v\\.sock_52000: `));
    expect(JSON.parse((await get(c, '/v1/sandboxes/gone/readiness')).body).reason).toBe(one.reason);
  });
});
