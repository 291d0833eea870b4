// The guest is untrusted. Garbage, absurd length prefixes, out-of-order events and floods
// close that one session with a logged error code; the collector and every other sandbox
// carry on. A sandbox's budget, its limit on connections that have not said hello, and the
// reconnect penalty after a protocol error (2 s, doubling up to 60 s) hold across reconnects:
// dialling again buys nothing. Each attack gets a sandbox of its own, so one attack's penalty
// does not hide the next.

import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DUMP_CHUNK_BYTES, MAX_HELLO_FRAME_BYTES, MAX_NESTING_DEPTH, encodeMessage, frame } from '@vsockdiag/proto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_BUDGET } from '../../host-collector/src/collector/budget.js';
import { MAX_PENDING } from '../../host-collector/src/collector/intake.js';
import { GUEST_LOG_BURST, GUEST_LOG_PER_SEC } from '../../host-collector/src/collector/logger.js';
import { HELLO_TIMEOUT_MS } from '../../host-collector/src/collector/session.js';
import { allEvents, startCollector, type CollectorProcess } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';
import { helloMessage } from '../support/hello.js';
import { waitFor } from '../support/wait.js';

let collector: CollectorProcess;
let root: string;
let good: ProbeClient;
const cleanup: Array<() => void> = [];

beforeAll(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
  collector = await startCollector();
  good = new ProbeClient({ path: await sandbox('good'), heartbeatMs: 1000 });
  await good.connect();
});
afterEach(() => {
  for (const fn of cleanup.splice(0)) fn();
});
afterAll(async () => {
  good?.close();
  await collector?.stop();
  fs.rmSync(root, { recursive: true, force: true });
});

/** Registers a sandbox; returns the socket its probe connects to. */
async function sandbox(id: string): Promise<string> {
  fs.mkdirSync(path.join(root, id));
  const r = await collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: path.join(root, id, 'v.sock') });
  expect(r.status).toBe(201);
  return path.join(root, id, 'v.sock_52000');
}

const detail = async (id: string) => (await collector.api('GET', `/v1/sandboxes/${id}`)).body;

/** A raw connection, closed by the test's cleanup at the latest. */
async function open(sock: string): Promise<net.Socket> {
  const s = net.connect({ path: sock });
  cleanup.push(() => s.destroy());
  s.on('error', () => {}); // the collector may reset us mid-write
  s.resume(); // drain what the collector says (a welcome), so its close is seen
  await new Promise((r) => {
    s.once('connect', r);
    s.once('close', r);
  });
  return s;
}

const closed = (s: net.Socket, ms = 8000) =>
  new Promise<void>((resolve, reject) => {
    if (s.destroyed) return resolve();
    const t = setTimeout(() => reject(new Error('collector did not close the hostile connection')), ms);
    s.once('close', () => {
      clearTimeout(t);
      resolve();
    });
  });

/** Opens a raw connection, writes `chunks`, resolves when the collector closes it. */
async function evil(sock: string, ...chunks: Buffer[]): Promise<void> {
  const s = await open(sock);
  for (const c of chunks) s.write(c);
  await closed(s);
}

/** Waits until the collector logged `code` for sandbox `id`. */
const logged = (id: string, code: string, times = 1) =>
  waitFor(`${code} logged for ${id}`, () => {
    const lines = collector.logs().split('\n');
    return lines.filter((l) => l.includes(`"sandbox":"${id}"`) && l.includes(`"code":"${code}"`)).length >= times;
  });

async function goodStillWorks(): Promise<void> {
  await good.waitAcked(good.events([{ kind: 'phase', name: `alive-${good.seq + 1}` }]));
  expect((await collector.api('GET', '/healthz')).body.ok).toBe(true);
}

/** A hello as bytes; `over` may make it one no schema accepts. */
const hello = (over: Record<string, unknown> = {}) =>
  encodeMessage({ ...helloMessage({ clocks: { wallMs: 0, sinceBootMs: 0 } }), ...over } as never);

describe('a hostile guest', () => {
  it('garbage bytes close the session with ERR_MSGPACK', async () => {
    await evil(await sandbox('garbage'), frame(Buffer.from([0xc1, 0xc1, 0xc1])));
    await logged('garbage', 'ERR_MSGPACK');
    await goodStillWorks();
  });

  it('an oversized length prefix closes the session with ERR_FRAME_TOO_LARGE before any body is read', async () => {
    await evil(await sandbox('huge-prefix'), Buffer.from([0x7f, 0xff, 0xff, 0xff]));
    await logged('huge-prefix', 'ERR_FRAME_TOO_LARGE');
    await goodStillWorks();
  });

  it('before hello, a frame over MAX_HELLO_FRAME_BYTES is refused on its length prefix', async () => {
    const header = Buffer.alloc(4);
    header.writeUInt32BE(1024 * 1024); // under MAX_FRAME_BYTES, far over what a hello needs
    await evil(await sandbox('big-first-frame'), header, Buffer.alloc(512 * 1024));
    await logged('big-first-frame', 'ERR_FRAME_TOO_LARGE');
    expect(collector.logs()).toContain(`exceeds ${MAX_HELLO_FRAME_BYTES}`);
  });

  it('an unknown message type closes the session with ERR_UNKNOWN_TYPE', async () => {
    await evil(
      await sandbox('unknown-type'),
      hello(),
      frame(Buffer.from([0x81, 0xa4, ...Buffer.from('type'), 0xa3, ...Buffer.from('pwn')])),
    );
    await logged('unknown-type', 'ERR_UNKNOWN_TYPE');
  });

  it('events before hello, and non-consecutive seqs, close the session with ERR_UNEXPECTED', async () => {
    await evil(await sandbox('early-events'), encodeMessage({ type: 'events', events: [] }));
    await evil(await sandbox('seq-skip'), hello(), encodeMessage({ type: 'events', events: [{ kind: 'phase', seq: 7, t: 1, name: 'x' }] }));
    await logged('early-events', 'ERR_UNEXPECTED');
    await logged('seq-skip', 'ERR_UNEXPECTED');
    expect((await allEvents(collector, 'seq-skip', 'phase')).map((e) => e.data.name)).not.toContain('x');
    await goodStillWorks();
  });

  it('a schema violation closes the session with ERR_SCHEMA; a wrong protocol version with ERR_VERSION', async () => {
    await evil(await sandbox('schema'), hello({ generation: -5 }));
    await evil(await sandbox('version'), hello({ protocol: 99 }));
    await logged('schema', 'ERR_SCHEMA');
    await logged('version', 'ERR_VERSION');
  });

  it('a deeply nested frame is refused before it is decoded', async () => {
    const sock = await sandbox('deep');
    const deep = Buffer.alloc(1024 * 1024, 0x91); // a million one-element arrays, one inside the other
    deep[deep.length - 1] = 0xc0;
    await evil(sock, hello(), frame(deep));
    await logged('deep', 'ERR_MSGPACK');
    expect(collector.logs()).toContain(`nested deeper than ${MAX_NESTING_DEPTH}`);
    await goodStillWorks();
  });

  it('a frame flood is throttled, then cut off with ERR_RATE_LIMIT and a reconnect penalty; others are unaffected', async () => {
    const sock = await sandbox('flood');
    const s = await open(sock);
    s.write(hello());
    // Heartbeats as fast as the socket takes them, until the collector cuts us off.
    const beats = Buffer.concat(new Array(3000).fill(encodeMessage({ type: 'heartbeat', sinceBootMs: 1 })));
    const pump = () => {
      while (!s.destroyed && s.write(beats));
      if (!s.destroyed) s.once('drain', pump);
    };
    pump();
    // Throttled first: the socket stays open while the collector reads at its own pace.
    const throttled = await waitFor('the flood to be throttled', async () =>
      (await detail('flood')).limits.throttled.frames > 0 ? true : null,
    );
    expect(throttled).toBe(true);
    expect(s.destroyed).toBe(false);
    await goodStillWorks();
    // It goes on: cut off once throttled for longer than the budget's cut-off (10 s).
    await closed(s, 60_000);
    await logged('flood', 'ERR_RATE_LIMIT');
    // Reconnecting at once is refused during the penalty.
    await evil(sock, hello());
    const d = await detail('flood');
    expect(d.limits).toMatchObject({ cutoffs: 1, offences: { ERR_RATE_LIMIT: 1 } });
    expect(d.limits.refused.penalty).toBeGreaterThanOrEqual(1);
    expect(d.limits.throttledMs).toBeGreaterThan(5000);
    expect(d.counters.protocolErrors).toBeGreaterThanOrEqual(1);
    const metrics = await (await fetch(`${collector.url}/metrics`)).text();
    // Fleet-wide counters by reason (per sandbox only with --metrics-per-sandbox): only the
    // flood's, since the honest sandbox had nothing throttled or refused.
    expect(metrics).toMatch(/^vsockdiag_guest_throttled_total\{reason="frames"\} [1-9]/m);
    expect(metrics).toMatch(/^vsockdiag_guest_cutoffs_total\{reason="ERR_RATE_LIMIT"\} 1$/m);
    expect(metrics).toMatch(/^vsockdiag_guest_refused_total\{reason="penalty"\} [1-9]/m);
    expect((await detail('good')).limits).toMatchObject({ cutoffs: 0, throttled: { bytes: 0, frames: 0, events: 0 } });
    await goodStillWorks();
  }, 90_000);

  it('reconnecting does not reset the budget: a second connection starts in the red, is throttled and cut off', async () => {
    const sock = await sandbox('reconnect');
    // Well-formed frames the collector reads and drops (no request is waiting for them).
    const chunk = encodeMessage({ type: 'dump.chunk', id: 1, index: 0, data: new Uint8Array(DUMP_CHUNK_BYTES) });
    // 7 MiB: within the 8 MiB burst, so the first connection goes through unthrottled.
    const first = await open(sock);
    first.write(hello());
    first.end(Buffer.concat(new Array(28).fill(chunk)));
    await closed(first, 30_000);
    expect((await detail('reconnect')).counters.protocolErrors).toBe(0);
    // 10 MiB more on a new connection: 9 over the bucket, 18 s at 512 KiB/s: cut off at 10 s.
    const second = await open(sock);
    second.write(hello());
    second.end(Buffer.concat(new Array(40).fill(chunk)));
    await closed(second, 60_000);
    await evil(sock, hello()); // in the penalty
    await logged('reconnect', 'ERR_RATE_LIMIT');
    const d = await detail('reconnect');
    expect(d.limits.throttled.bytes).toBeGreaterThanOrEqual(1);
    expect(d.limits.refused.penalty).toBeGreaterThanOrEqual(1);
    await goodStillWorks();
  }, 90_000);

  it('while one guest floods, another connects and is welcomed promptly, and /healthz answers', async () => {
    const sock = await sandbox('flooder');
    const calm = await sandbox('calm');
    const s = await open(sock);
    s.write(hello());
    const lines = new Array(200).fill('x'.repeat(2000));
    const batch = (seq: number) => encodeMessage({ type: 'events', events: [{ kind: 'log.lines', seq, t: 1, stream: 'stdout', lines }] });
    let seq = 0;
    const pump = () => {
      while (!s.destroyed && s.write(batch(++seq)));
      if (!s.destroyed) s.once('drain', pump);
    };
    pump();
    await waitFor('the flooder to be throttled', async () => ((await detail('flooder')).limits.throttled.bytes > 0 ? true : null));
    const timings: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      const p = new ProbeClient({ path: calm, instanceId: `calm-probe-${i}`, generation: i + 1 });
      cleanup.push(() => p.close());
      await p.connect();
      const h = await collector.api('GET', '/healthz');
      expect(h.body.ok).toBe(true);
      timings.push(performance.now() - t0);
      p.close();
      await p.closed;
    }
    // Generous: a welcome and a /healthz take milliseconds; a collector stalled by the flood
    // would take the flood's seconds.
    expect(Math.max(...timings)).toBeLessThan(2000);
    s.destroy();
  }, 60_000);

  it('connections that never say hello are capped per sandbox, each holds under 64 KiB, and all are gone after the hello deadline', async () => {
    const sock = await sandbox('slowloris');
    // Each sends the length prefix of the largest frame allowed before hello, and half of it.
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_HELLO_FRAME_BYTES);
    const half = Buffer.concat([header, Buffer.alloc(MAX_HELLO_FRAME_BYTES / 2)]);
    const sockets = await Promise.all(Array.from({ length: 300 }, () => open(sock)));
    for (const s of sockets) s.write(half);
    await Promise.all(sockets.map((s) => closed(s, 30_000)));
    const d = await detail('slowloris');
    // Every connection was either refused at once or held (at most MAX_PENDING at a time)
    // until the hello deadline closed it with a protocol error.
    expect(d.counters.refused + d.counters.protocolErrors).toBe(300);
    expect(d.counters.refused).toBeGreaterThanOrEqual(300 - 2 * MAX_PENDING);
    await logged('slowloris', 'ERR_UNEXPECTED', d.counters.protocolErrors);
    expect(collector.logs()).toMatch(new RegExp(`"sandbox":"slowloris".*no hello within ${HELLO_TIMEOUT_MS} ms`));
    expect(d.counters.sessions).toBe(0);
    await goodStillWorks();
  });

  it('any protocol error starts a reconnect penalty, a clean close does not, and an honest probe gets back in after it', async () => {
    const sock = await sandbox('penalty');
    const honest = () => {
      const p = new ProbeClient({ path: sock, heartbeatMs: 1000 });
      cleanup.push(() => p.close());
      return p;
    };
    // Clean closes and immediate reconnects: no penalty.
    for (let i = 0; i < 3; i++) {
      const p = honest();
      await p.connect();
      p.close();
      await p.closed;
    }
    expect((await detail('penalty')).counters).toMatchObject({ sessions: 3, refused: 0 });

    // A schema error (not a rate limit): the next connection is refused at once.
    await evil(sock, hello({ generation: -5 }));
    await evil(sock, hello());
    await logged('penalty', 'ERR_SCHEMA');
    expect((await detail('penalty')).counters.refused).toBeGreaterThanOrEqual(1);

    // An honest probe retrying with a backoff like the real one's is back after the penalty.
    let delay = 20;
    await waitFor('the honest probe to be welcomed again', async () => {
      try {
        await honest().connect();
        return true;
      } catch {
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(2000, delay * 2);
        return false;
      }
    });
    expect((await detail('penalty')).counters.sessions).toBe(4);
  });

  it('dialling in a loop: 100 sessions at once, then at most 10 a second, the rest refused at accept', async () => {
    const sock = await sandbox('dialler');
    const { burstFrames, framesPerConnection, framesPerSec } = DEFAULT_BUDGET;
    const t0 = performance.now();
    let sessions = 0;
    for (;;) {
      const p = new ProbeClient({ path: sock });
      cleanup.push(() => p.close());
      const taken = await p.connect().then(
        () => true,
        () => false,
      );
      p.close();
      await p.closed;
      if (!taken) break;
      if (++sessions > 1000) throw new Error('1,000 sessions and none refused');
    }
    // Each connection paid framesPerConnection, and the hello a frame more; the bucket refilled
    // while this loop ran, however slowly a busy machine let it run.
    const refilled = ((performance.now() - t0) * framesPerSec) / 1000;
    expect(sessions).toBeGreaterThanOrEqual(Math.floor(burstFrames / (framesPerConnection + 1)));
    expect(sessions).toBeLessThanOrEqual(Math.ceil((burstFrames + refilled) / framesPerConnection));
    const d = await detail('dialler');
    expect(d.counters.sessions).toBe(sessions);
    expect(d.limits.refused.frames).toBeGreaterThanOrEqual(1);
    await goodStillWorks();
  }, 60_000);

  it('reconnecting in a loop: what it makes the collector log is cut to its budget and counted', async () => {
    const sock = await sandbox('loop');
    const budgetDrops = async () => {
      const text = (await (await fetch(`${collector.url}/metrics`)).text()) as string;
      const n = /^vsockdiag_log_records_dropped_total\{reason="sandbox_budget"\} (\d+)$/m.exec(text)?.[1];
      if (n === undefined) throw new Error('/metrics has no vsockdiag_log_records_dropped_total{reason="sandbox_budget"}');
      return Number(n);
    };
    const before = await budgetDrops();
    // Each clean connection is several records (connected, state changes, disconnected): go on
    // until the budget has cut some, however slowly a busy machine lets this loop run.
    let connections = 0;
    const t0 = performance.now();
    while ((await budgetDrops()) === before) {
      const p = new ProbeClient({ path: sock, heartbeatMs: 1000 });
      cleanup.push(() => p.close());
      await p.connect();
      p.close();
      await p.closed;
      if (++connections > 2000) throw new Error('2,000 connections and no record cut');
    }
    // A token comes back every 100 ms; the next record written counts what was cut.
    await new Promise((r) => setTimeout(r, 300));
    const last = new ProbeClient({ path: sock, heartbeatMs: 1000 });
    cleanup.push(() => last.close());
    await last.connect();
    const records = () =>
      collector
        .logs()
        .split('\n')
        .filter((l) => l.includes('"sandbox":"loop"'))
        .map((l) => JSON.parse(l) as { suppressed?: number });
    await waitFor('a record that says how many were cut', () => records().some((r) => (r.suppressed ?? 0) > 0));
    // Written: the burst, what the budget refilled meanwhile, and nothing more.
    const refilled = Math.ceil(((performance.now() - t0) * GUEST_LOG_PER_SEC) / 1000);
    expect(records().length).toBeGreaterThanOrEqual(GUEST_LOG_BURST);
    expect(records().length).toBeLessThanOrEqual(GUEST_LOG_BURST + refilled);
    // Every connection still counted, and the collector still serves the others.
    expect((await detail('loop')).counters.sessions).toBe(connections + 1);
    await goodStillWorks();
  }, 120_000);
});
