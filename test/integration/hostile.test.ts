// The guest is untrusted. Garbage, absurd length prefixes, out-of-order events and floods
// close that one session with a logged error code; the collector and every other sandbox
// carry on.

import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { encodeMessage, frame } from '@vsockdiag/proto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { allEvents, startCollector, waitFor, type CollectorProcess } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';

let collector: CollectorProcess;
let root: string;
let good: ProbeClient;
const cleanup: Array<() => void> = [];

beforeAll(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
  collector = await startCollector();
  for (const id of ['good', 'evil']) {
    fs.mkdirSync(path.join(root, id));
    await collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: path.join(root, id, 'v.sock') });
  }
  good = new ProbeClient({ path: path.join(root, 'good', 'v.sock_52000'), heartbeatMs: 1000 });
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

/** Opens a raw connection to the evil sandbox, writes `bytes`, resolves when the collector closes it. */
async function evil(...chunks: Buffer[]): Promise<void> {
  const s = net.connect({ path: path.join(root, 'evil', 'v.sock_52000') });
  cleanup.push(() => s.destroy());
  s.on('error', () => {});
  s.resume(); // drain what the collector says (a welcome), so its close is seen
  await new Promise((r) => s.once('connect', r));
  for (const c of chunks) s.write(c);
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('collector did not close the hostile connection')), 8000);
    s.once('close', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

async function goodStillWorks(): Promise<void> {
  await good.waitAcked(good.events([{ kind: 'phase', name: `alive-${good.seq + 1}` }]));
  expect((await collector.api('GET', '/healthz')).body.ok).toBe(true);
}

const hello = (over: Record<string, unknown> = {}) =>
  encodeMessage({
    type: 'hello', protocol: 1, probeVersion: 'x', instanceId: 'e111e111e111e111', generation: 1, bootId: 'b',
    clocks: { wallMs: 0, sinceBootMs: 0 }, lastSeq: 0, config: { target: 'envd', expectPort: 49983 },
    status: { target: null, listener: { port: 49983, bound: false }, phases: { reported: false, ready: false } },
    ...over,
  } as never);

describe('a hostile guest', () => {
  it('garbage bytes close the session with ERR_MSGPACK', async () => {
    await evil(frame(Buffer.from([0xc1, 0xc1, 0xc1])));
    await waitFor('logged code', () => collector.logs().includes('"code":"ERR_MSGPACK"'));
    await goodStillWorks();
  });

  it('an oversized length prefix closes the session with ERR_FRAME_TOO_LARGE before any body is read', async () => {
    await evil(Buffer.from([0x7f, 0xff, 0xff, 0xff]));
    await waitFor('logged code', () => collector.logs().includes('"code":"ERR_FRAME_TOO_LARGE"'));
    await goodStillWorks();
  });

  it('an unknown message type closes the session with ERR_UNKNOWN_TYPE', async () => {
    await evil(hello(), frame(Buffer.from([0x81, 0xa4, ...Buffer.from('type'), 0xa3, ...Buffer.from('pwn')])));
    await waitFor('logged code', () => collector.logs().includes('"code":"ERR_UNKNOWN_TYPE"'));
  });

  it('events before hello, and non-consecutive seqs, close the session with ERR_UNEXPECTED', async () => {
    await evil(encodeMessage({ type: 'events', events: [] }));
    await evil(hello(), encodeMessage({ type: 'events', events: [{ kind: 'phase', seq: 7, t: 1, name: 'x' }] }));
    await waitFor('logged code', () => (collector.logs().match(/"code":"ERR_UNEXPECTED"/g) ?? []).length >= 2);
    expect((await allEvents(collector, 'evil', 'phase')).map((e) => e.data.name)).not.toContain('x');
    await goodStillWorks();
  });

  it('a schema violation closes the session with ERR_SCHEMA; a wrong protocol version with ERR_VERSION', async () => {
    await evil(hello({ generation: -5 }));
    await evil(hello({ protocol: 99 }));
    await waitFor('logged codes', () => collector.logs().includes('"code":"ERR_SCHEMA"') && collector.logs().includes('"code":"ERR_VERSION"'));
  });

  it('a frame flood is cut off with ERR_RATE_LIMIT and the sandbox cools down; others are unaffected', async () => {
    const beat = encodeMessage({ type: 'heartbeat', sinceBootMs: 1 });
    await evil(hello(), Buffer.concat(new Array(6000).fill(beat)));
    await waitFor('logged code', () => collector.logs().includes('"code":"ERR_RATE_LIMIT"'));
    // Reconnecting at once is refused during the cool-down.
    await evil(hello());
    const d = (await collector.api('GET', '/v1/sandboxes/evil')).body;
    expect(d.counters.refused).toBeGreaterThanOrEqual(1);
    expect(d.counters.protocolErrors).toBeGreaterThanOrEqual(1);
    await goodStillWorks();
  });
});
