import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
// A fixed pause only where a test shows that nothing happens meanwhile.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  FrameDecoder,
  MAX_FRAME_BYTES,
  MAX_HELLO_FRAME_BYTES,
  PROTOCOL_VERSION,
  decodeCollectorMessage,
  encodeMessage,
  frame,
  type CollectorMessage,
  type Hello,
  type ProbeEvent,
  type ProbeMessage,
} from '@vsockdiag/proto';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Budget, type BudgetLimits } from '../src/collector/budget.js';
import { RequestError } from '../src/collector/requests.js';
import { HELLO_TIMEOUT_MS, Session, type SessionHost } from '../src/collector/session.js';
import { helloMessage } from '../../test/support/hello.js';
import { waitFor } from '../../test/support/wait.js';

const log = pino({ level: 'silent' });

const hello = helloMessage();

const phase = (seq: number): ProbeEvent => ({ kind: 'phase', seq, t: 1000 + seq, name: `p${seq}` });
/** A batch of phase events; a last argument `{ ackNow: true }` asks for its ack at once. */
function events(...args: Array<number | { ackNow: true }>): ProbeMessage {
  const seqs = args.filter((a): a is number => typeof a === 'number');
  const ackNow = args.some((a) => typeof a === 'object') || undefined;
  return { type: 'events', events: seqs.map(phase), ackNow };
}

interface Closed {
  reason: string;
  code: string | null;
}

/** A SessionHost that records every call; the test decides when stores "commit". */
class FakeHost implements SessionHost {
  ack = 0;
  hellos: Hello[] = [];
  batches: Array<{ events: ProbeEvent[]; done: (err: Error | null) => void }> = [];
  gaps: Array<[number, number]> = [];
  heartbeats: number[] = [];
  closes: Closed[] = [];
  /** Runs inside onHello, as the sandbox's verdict does (it may start a dump right there). */
  duringHello: ((s: Session) => void) | null = null;

  onHello(s: Session, h: Hello): number {
    this.hellos.push(h);
    this.duringHello?.(s);
    return this.ack;
  }
  onEvents(_s: Session, ev: ProbeEvent[], _sentAt: number | undefined, done: (err: Error | null) => void): void {
    this.batches.push({ events: ev, done });
  }
  onGap(_s: Session, from: number, to: number): void {
    this.gaps.push([from, to]);
  }
  onHeartbeat(_s: Session, sinceBootMs: number): void {
    this.heartbeats.push(sinceBootMs);
  }
  onClose(_s: Session, reason: string, code: string | null): void {
    this.closes.push({ reason, code });
  }

  async closed(): Promise<Closed> {
    await waitFor('session close', () => this.closes.length > 0);
    return this.closes[0]!;
  }
}

/** The probe's end: decodes what the collector sends. */
class Probe {
  readonly received: CollectorMessage[] = [];
  ended = false;
  private readonly decoder = new FrameDecoder((body) => {
    this.received.push(decodeCollectorMessage(body));
  });

  constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => this.decoder.push(d));
    socket.on('close', () => {
      this.ended = true;
    });
    socket.on('error', () => {
      /* the collector may reset us */
    });
  }

  send(m: ProbeMessage): void {
    this.socket.write(encodeMessage(m));
  }

  raw(b: Buffer): void {
    this.socket.write(b);
  }

  /** Messages other than heartbeats. */
  get messages(): CollectorMessage[] {
    return this.received.filter((m) => m.type !== 'heartbeat');
  }

  async next(type: CollectorMessage['type']): Promise<CollectorMessage> {
    await waitFor(type, () => this.received.some((m) => m.type === type));
    return this.received.find((m) => m.type === type)!;
  }
}

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

/** A listener whose sessions share one budget (as a sandbox's do), and a first probe on it;
 *  `dial` connects another. */
async function connect(opts: { ack?: number; budget?: Partial<BudgetLimits> } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-sess-'));
  const sock = path.join(dir, 'c.sock');
  const host = new FakeHost();
  host.ack = opts.ack ?? 0;
  const budget = new Budget(opts.budget);
  const sessions: Session[] = [];
  const clients: net.Socket[] = [];
  /** Every frame the collector's side has written, decoded as it is written: whether a call
   *  wrote anything shows at once, before the bytes reach the probe's end. */
  const written: CollectorMessage[] = [];
  const server = net.createServer((s) => {
    const decoder = new FrameDecoder((body) => written.push(decodeCollectorMessage(body)));
    const write = s.write.bind(s) as (chunk: Uint8Array) => boolean;
    s.write = ((chunk: Uint8Array) => {
      decoder.push(Buffer.from(chunk));
      return write(chunk);
    }) as typeof s.write;
    sessions.push(new Session(s, host, log, budget));
  });
  cleanup.push(async () => {
    for (const c of clients) c.destroy();
    for (const s of sessions) s.close('test over', null);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    fs.rmSync(dir, { recursive: true, force: true });
  });
  await new Promise<void>((resolve) => server.listen(sock, resolve));
  const dial = async () => {
    const client = net.connect(sock);
    clients.push(client);
    await new Promise<void>((resolve, reject) => {
      client.once('connect', resolve);
      client.once('error', reject);
    });
    return new Probe(client);
  };
  const probe = await dial();
  return { host, probe, sessions, dial, budget, written };
}

describe('Session: hello', () => {
  it('answers hello with a welcome carrying the ack from onHello', async () => {
    const { host, probe, sessions } = await connect({ ack: 7 });
    probe.send(hello);
    const welcome = await probe.next('welcome');
    expect(welcome).toMatchObject({ type: 'welcome', ack: 7 });
    expect((welcome as { hostWallMs: number }).hostWallMs).toBeGreaterThan(Date.now() - 60_000);
    expect(host.hellos).toHaveLength(1);
    expect(host.hellos[0]).toMatchObject({ instanceId: hello.instanceId, lastSeq: 0 });
    expect(sessions[0]!.hello).not.toBeNull();
    expect(host.closes).toEqual([]);
  });

  it('rejects events before hello with ERR_UNEXPECTED', async () => {
    const { host, probe } = await connect();
    probe.send(events(1));
    expect(await host.closed()).toMatchObject({ code: 'ERR_UNEXPECTED', reason: expect.stringContaining('before hello') });
    expect(host.batches).toEqual([]);
    await waitFor('socket close', () => probe.ended);
  });

  it('rejects a heartbeat before hello too', async () => {
    const { host, probe } = await connect();
    probe.send({ type: 'heartbeat', sinceBootMs: 5 });
    expect((await host.closed()).code).toBe('ERR_UNEXPECTED');
    expect(host.heartbeats).toEqual([]);
  });

  it('rejects another protocol version with ERR_VERSION', async () => {
    const { host, probe } = await connect();
    probe.send({ ...hello, protocol: PROTOCOL_VERSION + 1 });
    const c = await host.closed();
    expect(c.code).toBe('ERR_VERSION');
    expect(host.hellos).toEqual([]);
    expect(probe.messages).toEqual([]);
    await waitFor('socket close', () => probe.ended);
  });

  it('sends a command asked for inside onHello after the welcome, never before it', async () => {
    const { host, probe } = await connect({ ack: 3 });
    let answer: Promise<unknown> | null = null;
    host.duringHello = (s) => {
      answer = s.request({ op: 'status' }, 5000);
    };
    probe.send(hello);
    await waitFor('welcome and command', () => probe.messages.length >= 2);
    expect(probe.messages.map((m) => m.type)).toEqual(['welcome', 'command']);
    const { id } = probe.messages[1] as { id: number };
    probe.send({ type: 'result', id, ok: true });
    expect(await answer).toMatchObject({ result: { id, ok: true } });
  });

  it('refuses a request before the hello', async () => {
    const { sessions } = await connect();
    await expect(sessions[0]!.request({ op: 'status' }, 5000)).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('rejects a second hello', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(hello);
    expect(await host.closed()).toMatchObject({ code: 'ERR_UNEXPECTED', reason: 'second hello' });
    expect(host.hellos).toHaveLength(1);
  });
});

describe('Session: events and acks', () => {
  it('acks a batch that asks for it (ackNow) only after the host calls done(null), and at once', async () => {
    const { host, probe, written } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(1, 2, 3, { ackNow: true }));
    await waitFor('onEvents', () => host.batches.length === 1);
    expect(host.batches[0]!.events.map((e) => e.seq)).toEqual([1, 2, 3]);
    await sleep(150);
    expect(probe.messages.filter((m) => m.type === 'ack')).toEqual([]);

    // At once: written inside done(), not on a later tick.
    host.batches[0]!.done(null);
    expect(written.at(-1)).toEqual({ type: 'ack', seq: 3 });
    expect(await probe.next('ack')).toEqual({ type: 'ack', seq: 3 });

    probe.send(events(4, { ackNow: true }));
    await waitFor('second onEvents', () => host.batches.length === 2);
    host.batches[1]!.done(null);
    expect(written.at(-1)).toEqual({ type: 'ack', seq: 4 });
    await waitFor('second ack', () => probe.messages.filter((m) => m.type === 'ack').length === 2);
    expect(probe.messages.filter((m) => m.type === 'ack')).toEqual([
      { type: 'ack', seq: 3 },
      { type: 'ack', seq: 4 },
    ]);
    expect(host.closes).toEqual([]);
  });

  it('otherwise acks with its next liveness tick, one ack for every batch committed before it', async () => {
    const { host, probe, written } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(1, 2));
    probe.send(events(3));
    await waitFor('two batches', () => host.batches.length === 2);
    const before = written.length;
    host.batches[0]!.done(null);
    host.batches[1]!.done(null);
    expect(written.length).toBe(before); // nothing at once
    await waitFor('ack', () => probe.messages.some((m) => m.type === 'ack'));
    expect(probe.messages.filter((m) => m.type === 'ack')).toEqual([{ type: 'ack', seq: 3 }]);
    // Nothing is owed after it: the next tick is a heartbeat.
    const next = probe.received.findIndex((m) => m.type === 'ack') + 1;
    await waitFor('next tick', () => probe.received.length > next);
    expect(probe.received[next]).toEqual({ type: 'heartbeat' });
    expect(host.closes).toEqual([]);
  }, 20_000);

  it('a batch that asks for its ack takes the deferred ones along', async () => {
    const { host, probe, written } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(1, 2));
    probe.send(events(3, { ackNow: true }));
    await waitFor('two batches', () => host.batches.length === 2);
    const before = written.length;
    host.batches[0]!.done(null);
    expect(written.length).toBe(before);
    host.batches[1]!.done(null);
    expect(written.slice(before)).toEqual([{ type: 'ack', seq: 3 }]);
    await waitFor('ack', () => probe.messages.some((m) => m.type === 'ack'));
    const next = probe.received.findIndex((m) => m.type === 'ack') + 1;
    await waitFor('next tick', () => probe.received.length > next);
    expect(probe.received[next]).toEqual({ type: 'heartbeat' });
  }, 20_000);

  it('expects the first event right after the ack', async () => {
    const { host, probe } = await connect({ ack: 5 });
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(6, 7));
    await waitFor('onEvents', () => host.batches.length === 1);
    expect(host.batches[0]!.events.map((e) => e.seq)).toEqual([6, 7]);
    expect(host.closes).toEqual([]);
  });

  it('closes with ERR_UNEXPECTED when events resend what was acked', async () => {
    const { host, probe } = await connect({ ack: 5 });
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(5));
    expect(await host.closed()).toMatchObject({ code: 'ERR_UNEXPECTED', reason: expect.stringContaining('event seq 5 after 5') });
    expect(host.batches).toEqual([]);
  });

  it('closes with ERR_UNEXPECTED on a skipped seq', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(2));
    expect((await host.closed()).code).toBe('ERR_UNEXPECTED');
    expect(host.batches).toEqual([]);
    await waitFor('socket close', () => probe.ended);
  });

  it('closes with ERR_UNEXPECTED on a skip inside a batch, delivering nothing of it', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(1, 2, 4));
    expect((await host.closed()).code).toBe('ERR_UNEXPECTED');
    expect(host.batches).toEqual([]);
  });

  it('closes with ERR_UNEXPECTED on a duplicate across batches', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(1, 2));
    probe.send(events(2));
    expect((await host.closed()).code).toBe('ERR_UNEXPECTED');
    expect(host.batches).toHaveLength(1);
  });

  it('closes with ERR_STORE when the commit fails, and sends no ack', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send(events(1));
    await waitFor('onEvents', () => host.batches.length === 1);
    host.batches[0]!.done(new Error('disk full'));
    expect(await host.closed()).toEqual({ reason: 'store commit failed', code: 'ERR_STORE' });
    await waitFor('socket close', () => probe.ended);
    expect(probe.messages.filter((m) => m.type === 'ack')).toEqual([]);
  });

  it('ignores an empty events batch', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send({ type: 'events', events: [] });
    probe.send(events(1));
    await waitFor('onEvents', () => host.batches.length === 1);
    expect(host.batches[0]!.events.map((e) => e.seq)).toEqual([1]);
  });

  it('passes heartbeats to the host', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send({ type: 'heartbeat', sinceBootMs: 4321 });
    await waitFor('heartbeat', () => host.heartbeats.length === 1);
    expect(host.heartbeats).toEqual([4321]);
  });
});

describe('Session: gaps', () => {
  it('accepts a gap starting at lastSeq+1 and continues after it', async () => {
    const { host, probe } = await connect({ ack: 2 });
    probe.send(hello);
    await probe.next('welcome');
    probe.send({ type: 'gap', from: 3, to: 10 });
    probe.send(events(11));
    await waitFor('events after gap', () => host.batches.length === 1);
    expect(host.gaps).toEqual([[3, 10]]);
    expect(host.batches[0]!.events.map((e) => e.seq)).toEqual([11]);
    expect(host.closes).toEqual([]);
  });

  it('rejects a gap that does not start at lastSeq+1', async () => {
    const { host, probe } = await connect({ ack: 2 });
    probe.send(hello);
    await probe.next('welcome');
    probe.send({ type: 'gap', from: 5, to: 10 });
    expect(await host.closed()).toMatchObject({ code: 'ERR_UNEXPECTED', reason: expect.stringContaining('gap 5..10 after seq 2') });
    expect(host.gaps).toEqual([]);
  });

  it('rejects a gap that ends before it starts', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.send({ type: 'gap', from: 1, to: 1 }); // a one-event gap is fine
    probe.send({ type: 'gap', from: 2, to: 1 }); // starts at lastSeq+1 but runs backwards
    expect((await host.closed()).code).toBe('ERR_UNEXPECTED');
    expect(host.gaps).toEqual([[1, 1]]);
  });
});

describe('Session: hostile bytes', () => {
  it('closes with ERR_MSGPACK on a length-prefixed garbage body', async () => {
    const { host, probe } = await connect();
    // 0xc1 is never valid msgpack.
    probe.raw(frame(Buffer.from([0xc1, 0xc1, 0xc1])));
    expect((await host.closed()).code).toBe('ERR_MSGPACK');
    await waitFor('socket close', () => probe.ended);
  });

  it('closes with a schema error on valid msgpack of the wrong shape', async () => {
    const { host, probe } = await connect();
    probe.raw(frame(Buffer.from([0x93, 0x01, 0x02, 0x03]))); // [1, 2, 3]
    expect((await host.closed()).code).toBe('ERR_SCHEMA');
  });

  it('closes with ERR_UNKNOWN_TYPE on a message type a probe may not send', async () => {
    const { host, probe } = await connect();
    probe.raw(encodeMessage({ type: 'ack', seq: 1 }));
    expect((await host.closed()).code).toBe('ERR_UNKNOWN_TYPE');
  });

  it('closes with ERR_FRAME_TOO_LARGE on an oversized length prefix, before the body', async () => {
    const { host, probe } = await connect();
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_FRAME_BYTES + 1, 0);
    probe.raw(header);
    expect((await host.closed()).code).toBe('ERR_FRAME_TOO_LARGE');
    await waitFor('socket close', () => probe.ended);
  });

  it('closes with ERR_FRAME_TOO_LARGE after hello too', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.raw(Buffer.from([0xff, 0xff, 0xff, 0xff]));
    expect((await host.closed()).code).toBe('ERR_FRAME_TOO_LARGE');
  });

  it('closes with ERR_TRUNCATED when the probe ends mid-frame', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    const f = encodeMessage(events(1));
    probe.socket.end(f.subarray(0, f.length - 2));
    expect((await host.closed()).code).toBe('ERR_TRUNCATED');
    expect(host.batches).toEqual([]);
  });

  it('closes cleanly (no code) when the probe ends between frames', async () => {
    const { host, probe } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    probe.socket.end();
    expect(await host.closed()).toEqual({ reason: 'probe closed the connection', code: null });
  });

  it('closes with ERR_RATE_LIMIT when the byte budget is exceeded', async () => {
    const { host, probe } = await connect({ budget: { bytesPerSec: 1, burstBytes: 64, framesPerSec: 1000, burstFrames: 1000 } });
    // A hello is well over 64 bytes.
    expect(encodeMessage(hello).length).toBeGreaterThan(64);
    probe.send(hello);
    expect(await host.closed()).toMatchObject({ code: 'ERR_RATE_LIMIT', reason: expect.stringContaining('bytes budget') });
    expect(host.hellos).toEqual([]);
  });

  it('closes with ERR_RATE_LIMIT when the frame budget is exceeded', async () => {
    const { host, probe } = await connect({ budget: { bytesPerSec: 1e9, burstBytes: 1e9, framesPerSec: 0.001, burstFrames: 3 } });
    probe.send(hello); // 1
    await probe.next('welcome');
    probe.send(events(1)); // 2
    probe.send(events(2)); // 3
    probe.send(events(3)); // 4: over
    expect(await host.closed()).toMatchObject({ code: 'ERR_RATE_LIMIT', reason: expect.stringContaining('frames budget') });
    expect(host.batches.map((b) => b.events[0]!.seq)).toEqual([1, 2]);
  });

  it('ignores everything after it closed', async () => {
    const { host, probe, sessions } = await connect();
    probe.send(hello);
    await probe.next('welcome');
    sessions[0]!.close('bye', null);
    expect(sessions[0]!.isClosed).toBe(true);
    // A second close reports nothing more.
    sessions[0]!.close('again', 'ERR_IDLE');
    expect(host.closes).toEqual([{ reason: 'bye', code: null }]);
    await waitFor('socket close', () => probe.ended);
  });
});

describe('Session: before hello', () => {
  it('refuses a length prefix over MAX_HELLO_FRAME_BYTES before hello, without buffering the body', async () => {
    const { host, probe, sessions } = await connect();
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_HELLO_FRAME_BYTES + 1, 0);
    probe.raw(Buffer.concat([header, Buffer.alloc(32 * 1024)]));
    expect(await host.closed()).toMatchObject({
      code: 'ERR_FRAME_TOO_LARGE',
      reason: expect.stringContaining(`exceeds ${MAX_HELLO_FRAME_BYTES}`),
    });
    expect(sessions[0]!.isClosed).toBe(true);
    await waitFor('socket close', () => probe.ended);
  });

  it('takes full-size frames once the hello is accepted, even in the same write', async () => {
    const { host, probe } = await connect();
    const lines = new Array(200).fill('x'.repeat(2000));
    const big = encodeMessage({ type: 'events', events: [{ kind: 'log.lines', seq: 1, t: 5, stream: 'stdout', lines }] });
    expect(big.length).toBeGreaterThan(MAX_HELLO_FRAME_BYTES);
    probe.raw(Buffer.concat([encodeMessage(hello), big]));
    await waitFor('the big batch', () => host.batches.length === 1);
    expect(host.batches[0]!.events[0]).toMatchObject({ kind: 'log.lines', lines });
    expect(host.closes).toEqual([]);
  });

  it('closes a connection that never says hello after HELLO_TIMEOUT_MS', async () => {
    const { host, probe } = await connect();
    const started = Date.now();
    probe.raw(Buffer.from([0, 0, 1, 0, 0x85])); // half a frame, then nothing
    await waitFor('hello timeout', () => host.closes.length > 0, { timeoutMs: HELLO_TIMEOUT_MS + 10_000 });
    expect(host.closes[0]).toMatchObject({ code: 'ERR_UNEXPECTED', reason: `no hello within ${HELLO_TIMEOUT_MS} ms` });
    expect(Date.now() - started).toBeGreaterThanOrEqual(HELLO_TIMEOUT_MS - 50);
    await waitFor('socket close', () => probe.ended);
  });
});

describe("Session: one budget for all of a sandbox's connections", () => {
  it('a reconnect does not get a fresh burst', async () => {
    const size = encodeMessage(hello).length;
    const burst = 4 * size + size / 2; // room for four hellos, not five
    const { host, probe, dial } = await connect({ budget: { bytesPerSec: 1, burstBytes: burst, framesPerSec: 1000, burstFrames: 1000 } });
    let p = probe;
    for (let i = 1; i <= 4; i++) {
      p.send(hello);
      await p.next('welcome');
      p.socket.end();
      await waitFor(`close ${i}`, () => host.closes.length === i);
      p = await dial();
    }
    expect(host.closes.map((c) => c.code)).toEqual([null, null, null, null]);
    p.send(hello); // each connection alone is far under the burst; together they are over it
    await waitFor('close 5', () => host.closes.length === 5);
    expect(host.closes[4]).toMatchObject({ code: 'ERR_RATE_LIMIT', reason: expect.stringContaining('bytes budget') });
    expect(host.hellos).toHaveLength(4);
  });
});

describe('Session: a probe over budget is throttled first', () => {
  it('over the events budget, reading stops for a while and every batch still arrives, later', async () => {
    const { host, probe, budget } = await connect({ budget: { eventsPerSec: 20, burstEvents: 10 } });
    probe.send(hello);
    await probe.next('welcome');
    // 20 events in one write: 10 past the burst, half a second's worth at 20/s. The write is
    // in memory already, so it is taken whole; reading stops after it.
    probe.send(events(...Array.from({ length: 10 }, (_, i) => i + 1)));
    probe.send(events(...Array.from({ length: 10 }, (_, i) => i + 11)));
    await waitFor('the first two batches', () => host.batches.length === 2);
    const held = Date.now();
    probe.send(events(...Array.from({ length: 10 }, (_, i) => i + 21)));
    await waitFor('all three batches', () => host.batches.length === 3);
    for (const b of host.batches) b.done(null);
    await waitFor('the last ack', () => probe.received.some((m) => m.type === 'ack' && m.seq === 30));
    expect(host.closes).toEqual([]);
    expect(budget.counters.throttled.events).toBeGreaterThanOrEqual(1);
    expect(Date.now() - held).toBeGreaterThanOrEqual(300); // held (500 ms due), not refused
    expect(budget.counters.throttledMs).toBeGreaterThanOrEqual(300);
  });

  it('a probe that stays over budget is cut off with ERR_RATE_LIMIT after cutoffAfterMs', async () => {
    const { host, probe, budget } = await connect({ budget: { framesPerSec: 50, burstFrames: 20, cutoffAfterMs: 1500 } });
    probe.send(hello);
    await probe.next('welcome');
    // Heartbeats as fast as the socket takes them: each time reading resumes there are more.
    const beat = encodeMessage({ type: 'heartbeat', sinceBootMs: 1 });
    const flood = setInterval(() => probe.raw(Buffer.concat(new Array(40).fill(beat))), 20);
    try {
      expect(await host.closed()).toMatchObject({ code: 'ERR_RATE_LIMIT', reason: expect.stringContaining('frames budget') });
    } finally {
      clearInterval(flood);
    }
    expect(budget.counters.throttled.frames).toBeGreaterThanOrEqual(1);
    expect(budget.counters.cutoffs).toBe(1);
  });
});

describe('Session: dump grants last as long as their request', () => {
  // A bucket too small for one 20 KiB chunk: only a grant lets it through.
  const budget: Partial<BudgetLimits> = { bytesPerSec: 1, burstBytes: 2000, framesPerSec: 1000, burstFrames: 1000 };
  const chunk = (id: number, index: number): ProbeMessage => ({
    type: 'dump.chunk',
    id,
    index,
    data: new Uint8Array(20 * 1024).fill(index),
  });
  const commandId = async (probe: Probe) => ((await probe.next('command')) as { id: number }).id;

  it('covers the chunks of an open request, and is taken back once it is answered', async () => {
    const { host, probe, sessions } = await connect({ budget });
    probe.send(hello);
    await probe.next('welcome');
    const answer = sessions[0]!.request({ op: 'dump', mode: 'threads' }, 10_000, 64 * 1024);
    const id = await commandId(probe);
    probe.send(chunk(id, 0));
    probe.send({ type: 'result', id, ok: true });
    expect((await answer).bytes).toBe(20 * 1024);
    expect(host.closes).toEqual([]);
    probe.send(chunk(id, 1)); // after the answer: unsolicited, and over the bucket
    expect(await host.closed()).toMatchObject({ code: 'ERR_RATE_LIMIT' });
  });

  it('is taken back when the request times out', async () => {
    const { host, probe, sessions } = await connect({ budget });
    probe.send(hello);
    await probe.next('welcome');
    const answer = sessions[0]!.request({ op: 'dump', mode: 'threads' }, 200, 64 * 1024);
    const id = await commandId(probe);
    await expect(answer).rejects.toMatchObject({ code: 'TIMEOUT' });
    probe.send(chunk(id, 0)); // the dump "arrives" late: its grant is gone
    expect(await host.closed()).toMatchObject({ code: 'ERR_RATE_LIMIT' });
  });

  it('is taken back when the session closes, so the next connection cannot use it', async () => {
    const { host, probe, sessions, dial } = await connect({ budget });
    probe.send(hello);
    await probe.next('welcome');
    const answer = sessions[0]!.request({ op: 'dump', mode: 'threads' }, 10_000, 64 * 1024);
    await commandId(probe);
    probe.socket.end();
    await expect(answer).rejects.toBeInstanceOf(RequestError);
    const next = await dial();
    next.send({ ...hello, generation: 2 });
    await next.next('welcome');
    next.send(chunk(1, 0));
    await waitFor('second close', () => host.closes.length === 2);
    expect(host.closes[1]).toMatchObject({ code: 'ERR_RATE_LIMIT' });
  });
});
