// Reads never record: a GET or a /metrics scrape that lands on a threshold before its timer
// fires shows the state the history has, stores nothing, and the timer records the
// transition after it (Sandbox.read). Time is fake so "right at the threshold" is exact;
// the probe is a real connection to the sandbox's socket.

import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  FrameDecoder,
  PROTOCOL_VERSION,
  decodeCollectorMessage,
  encodeMessage,
  type CollectorMessage,
  type Hello,
  type ProbeMessage,
} from '@vsockdiag/proto';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Collector } from '../src/collector/collector.js';

const log = pino({ level: 'silent' });
const T0 = Date.UTC(2030, 0, 1);
/** The target started 1000 ms before the hello (guest 1000 vs 2000), so with this stall
 *  window the sandbox turns stuck at T0 + 1000, and the timer looks at T0 + 1001. */
const STALL_MS = 2000;

let tmp: string;
let collector: Collector | null = null;
let socket: net.Socket | null = null;

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-reads-'));
});

afterEach(async () => {
  vi.useRealTimers();
  socket?.destroy();
  socket = null;
  await collector?.stop();
  collector = null;
  fs.rmSync(tmp, { recursive: true, force: true });
});

function makeCollector(): Collector {
  return new Collector(
    {
      http: '127.0.0.1:0',
      dataDir: path.join(tmp, 'data'),
      vsockPort: 52000,
      probePort: 52001,
      stallAfterMs: STALL_MS,
      startDeadlineMs: 60_000,
      dashboardDir: tmp,
    },
    log,
  );
}

/** Waits on real I/O while the timers are fake (so no timer-based helper will do): turns of
 *  the event loop, bounded in real time. */
async function until<T>(what: string, check: () => T | null | undefined | false): Promise<T> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const v = check();
    if (v) return v;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** A probe whose target started and never got further; it answers every command with a
 *  failure, so the automatic dumps a stuck state starts end at once. */
async function connectProbe(socketPath: string): Promise<(m: ProbeMessage) => void> {
  const s = net.connect(socketPath);
  socket = s;
  s.on('error', () => {});
  const send = (m: ProbeMessage) => void s.write(encodeMessage(m));
  let welcomed = false;
  const decoder = new FrameDecoder((b) => {
    const m: CollectorMessage = decodeCollectorMessage(b);
    if (m.type === 'welcome') welcomed = true;
    if (m.type === 'command') send({ type: 'result', id: m.id, ok: false, error: 'no dumps in this test' });
  });
  s.on('data', (d: Buffer) => decoder.push(d));
  const hello: Hello = {
    type: 'hello',
    protocol: PROTOCOL_VERSION,
    probeVersion: '0.1.0',
    instanceId: '0123456789abcdef',
    generation: 1,
    bootId: 'boot-0001',
    clocks: { wallMs: Date.now(), sinceBootMs: 2000 },
    lastSeq: 0,
    config: { target: 'envd', expectPort: 49983 },
    status: {
      target: { pid: 42, name: 'envd', startedAt: 1000, source: 'name', alive: true },
      listener: { port: 49983, bound: false },
      phases: { reported: false, ready: false },
    },
  };
  s.once('connect', () => send(hello));
  await until('the welcome', () => welcomed);
  return send;
}

async function get(c: Collector, url: string): Promise<{ status: number; body: string }> {
  const r = await c.http.inject({ method: 'GET', url, headers: { host: 'localhost' } });
  return { status: r.statusCode, body: r.body };
}

const states = (c: Collector, id: string) =>
  c.store.events(id, { kind: 'state', after: 0, limit: 100 }).events.map((e) => (e.data as { state: string }).state);

/** A collector with sandbox `r` starting at T0 (fake time from here on), and its probe. */
async function starting(): Promise<{ c: Collector; send: (m: ProbeMessage) => void }> {
  const c = (collector = makeCollector());
  await c.http.ready();
  const { sandbox } = await c.registry.register('r', path.join(tmp, 'v.sock'), 'api');
  vi.useFakeTimers({ now: T0, toFake: ['Date', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
  const send = await connectProbe(sandbox.socketPath);
  expect(sandbox.state).toBe('starting');
  return { c, send };
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
    await until('the automatic dumps to end', () => c.store.events('r', { kind: 'dump', after: 0, limit: 10 }).events.length >= 2);
  });

  it('a heartbeat that corrects the guest clock moves the threshold, and records it then', async () => {
    const { c, send } = await starting();
    const sb = c.registry.get('r')!;
    vi.advanceTimersByTime(500);
    // Guest 3000 at host T0 + 500: the hello was 500 ms late, so the target started at
    // T0 - 1500 and is stuck already, though the timer was armed for T0 + 1001.
    send({ type: 'heartbeat', sinceBootMs: 3000 });
    await until('the heartbeat to be decided on', () => sb.state === 'stuck');
    expect(states(c, 'r')).toEqual(['starting', 'stuck']);
    const [, stuck] = c.store.events('r', { kind: 'state', after: 0, limit: 10 }).events;
    expect(stuck!.tHost).toBe(T0 + 500);
    expect(JSON.parse((await get(c, '/v1/sandboxes/r')).body).state).toBe('stuck');
    await until('the automatic dumps to end', () => c.store.events('r', { kind: 'dump', after: 0, limit: 10 }).events.length >= 2);
  });
});

describe('a socket the collector cannot listen on', () => {
  it('is the reason every reader sees, from the verdict', async () => {
    const dir = path.join(tmp, 'vm');
    fs.mkdirSync(dir);
    const first = makeCollector();
    await first.registry.register('gone', path.join(dir, 'v.sock'), 'api');
    await first.stop();
    fs.rmSync(dir, { recursive: true });

    const c = (collector = makeCollector());
    await c.registry.restore();
    const one = JSON.parse((await get(c, '/v1/sandboxes/gone')).body);
    expect(one.state).toBe('registered');
    expect(one.reason).toMatch(new RegExp(`^cannot listen on ${dir}/v\\.sock_52000: `));
    expect(JSON.parse((await get(c, '/v1/sandboxes/gone/readiness')).body).reason).toBe(one.reason);
  });
});
