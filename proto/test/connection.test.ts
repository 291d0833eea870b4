import { EventEmitter } from 'node:events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { decodeCollectorMessage, decodeProbeMessage, encodeMessage } from '../src/codec.js';
import {
  CONNECTION_EVENTS,
  CONNECTION_MOVES,
  CONNECTION_STATES,
  Connection,
  admit,
  transition,
  type Allowance,
  type Closed,
  type ConnectionEvent,
  type ConnectionRole,
  type ConnectionSocket,
  type ConnectionState,
} from '../src/connection.js';
import { ProtocolError } from '../src/errors.js';
import { FrameDecoder, frame } from '../src/frame.js';
import { MAX_FRAME_BYTES, MAX_HELLO_FRAME_BYTES } from '../src/limits.js';
import type { CollectorMessage, ProbeMessage } from '../src/messages.js';
import { helloMessage } from '../../test/support/hello.js';

const hello = helloMessage();

/** A socket that records what is written and is driven by the test (emit 'data', 'end', …).
 *  Like a net.Socket, destroy() emits 'close' on the next tick. */
class FakeSocket extends EventEmitter implements ConnectionSocket {
  readonly written: Buffer[] = [];
  destroyed = false;
  /** write() reports a full buffer (the caller must wait for 'drain'). */
  full = false;

  write(chunk: Uint8Array): boolean {
    this.written.push(Buffer.from(chunk));
    return !this.full;
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    process.nextTick(() => this.emit('close'));
  }

  /** Every frame written, decoded as the peer would. */
  decoded<M>(decode: (body: Uint8Array) => M): M[] {
    const out: M[] = [];
    const decoder = new FrameDecoder((body) => out.push(decode(body)));
    for (const chunk of this.written) decoder.push(chunk);
    return out;
  }
}

const nextTick = () => new Promise<void>((resolve) => process.nextTick(resolve));

/** The collector's end of a probe session: awaits the probe's hello, then takes events. */
function collectorSide(extra: Partial<ConnectionRole<ProbeMessage, CollectorMessage, 'hello' | 'events' | 'heartbeat'>> = {}) {
  const socket = new FakeSocket();
  const received: ProbeMessage[] = [];
  const closes: Closed[] = [];
  const connection = new Connection(socket, {
    peer: 'probe',
    decode: decodeProbeMessage,
    admits: { 'awaiting-hello': ['hello'], open: ['events', 'heartbeat'] },
    onMessage: (m) => {
      received.push(m);
      if (m.type === 'hello') connection.open();
    },
    onClose: (c) => closes.push(c),
    ...extra,
  });
  const sent = () => socket.decoded(decodeCollectorMessage);
  return { socket, connection, received, closes, sent };
}

/** The probe's end: speaks first (hello), awaits the welcome. */
function probeSide(extra: Partial<ConnectionRole<CollectorMessage, ProbeMessage, 'welcome' | 'ack' | 'heartbeat'>> = {}) {
  const socket = new FakeSocket();
  const received: CollectorMessage[] = [];
  const closes: Closed[] = [];
  const connection = new Connection(socket, {
    peer: 'collector',
    decode: decodeCollectorMessage,
    admits: { 'awaiting-hello': ['welcome'], open: ['ack', 'heartbeat'] },
    hello,
    onMessage: (m) => {
      received.push(m);
      if (m.type === 'welcome') connection.open();
    },
    onClose: (c) => closes.push(c),
    ...extra,
  });
  const sent = () => socket.decoded(decodeProbeMessage);
  return { socket, connection, received, closes, sent };
}

const events = (...seqs: number[]): ProbeMessage => ({
  type: 'events',
  events: seqs.map((seq) => ({ kind: 'phase', seq, t: seq, name: `p${seq}` })),
});

describe('transition', () => {
  const states = Object.keys(CONNECTION_STATES) as ConnectionState[];
  const allEvents = Object.keys(CONNECTION_EVENTS) as ConnectionEvent[];
  const legal: Array<[ConnectionState, ConnectionEvent, ConnectionState]> = [
    ['awaiting-hello', 'opened', 'open'],
    ['awaiting-hello', 'close', 'closing'],
    ['open', 'close', 'closing'],
    ['closing', 'gone', 'closed'],
  ];
  // The runtime view of the typed function, to reach the pairs the types refuse.
  const anyTransition = transition as (from: ConnectionState, event: ConnectionEvent) => ConnectionState;

  it('makes every legal move, and the table holds exactly those', () => {
    for (const [from, event, to] of legal) expect(anyTransition(from, event)).toBe(to);
    const table = Object.entries(CONNECTION_MOVES).flatMap(([from, moves]) =>
      Object.entries(moves).map(([event, to]) => [from, event, to]),
    );
    expect(table).toEqual(legal);
  });

  it('throws ERR_UNEXPECTED for every other pair', () => {
    const isLegal = (s: ConnectionState, e: ConnectionEvent) => legal.some(([from, event]) => from === s && event === e);
    let refused = 0;
    for (const s of states) {
      for (const e of allEvents) {
        if (isLegal(s, e)) continue;
        expect(() => anyTransition(s, e)).toThrow(expect.objectContaining({ code: 'ERR_UNEXPECTED', message: `${e} in state ${s}` }));
        refused++;
      }
    }
    expect(refused).toBe(states.length * allEvents.length - legal.length);
  });

  it('does not compile for an illegal pair (checked by tsc)', () => {
    const refuse = (f: () => unknown) => expect(f).toThrow(ProtocolError);
    // @ts-expect-error open is not open twice
    refuse(() => transition('open', 'opened'));
    // @ts-expect-error a connection is gone only after closing
    refuse(() => transition('open', 'gone'));
    // @ts-expect-error closing is reported once
    refuse(() => transition('closing', 'close'));
    // @ts-expect-error closed is terminal
    refuse(() => transition('closed', 'close'));
    const either = 'open' as 'awaiting-hello' | 'open';
    // Both may close: allowed for the union…
    expect(transition(either, 'close')).toBe('closing');
    // @ts-expect-error …but only one of them may open.
    refuse(() => transition(either, 'opened'));
  });
});

describe('admit', () => {
  const admits = { 'awaiting-hello': ['hello'], open: ['events', 'heartbeat'] } as const;

  it('passes what the state admits', () => {
    expect(admit(admits, 'awaiting-hello', hello)).toBe(hello);
    const batch = events(1);
    expect(admit(admits, 'open', batch)).toBe(batch);
  });

  it('refuses anything else with ERR_UNEXPECTED, saying why', () => {
    const refused = (state: 'awaiting-hello' | 'open', m: ProbeMessage) => {
      try {
        admit(admits, state, m);
      } catch (err) {
        expect(err).toBeInstanceOf(ProtocolError);
        expect((err as ProtocolError).code).toBe('ERR_UNEXPECTED');
        return (err as Error).message;
      }
      throw new Error('admitted');
    };
    expect(refused('awaiting-hello', events(1))).toBe('events before hello');
    expect(refused('awaiting-hello', { type: 'heartbeat', sinceBootMs: 1 })).toBe('heartbeat before hello');
    expect(refused('open', hello)).toBe('second hello');
    expect(refused('open', { type: 'gap', from: 1, to: 2 })).toBe('gap is not admitted on this connection');
  });
});

describe('Connection: the hello exchange', () => {
  it('a side that speaks first sends its hello as it starts', () => {
    const { sent, connection } = probeSide();
    expect(sent()).toEqual([hello]);
    expect(connection.state).toBe('awaiting-hello');
  });

  it('a side that does not speak first sends nothing', () => {
    const { sent, connection } = collectorSide();
    expect(sent()).toEqual([]);
    expect(connection.state).toBe('awaiting-hello');
  });

  it('opens when the role says so, and dispatches the open-state messages', () => {
    const { socket, connection, received, closes } = collectorSide();
    socket.emit('data', Buffer.concat([encodeMessage(hello), encodeMessage(events(1, 2))]));
    expect(connection.state).toBe('open');
    expect(received.map((m) => m.type)).toEqual(['hello', 'events']);
    expect(closes).toEqual([]);
  });

  it('closes with ERR_UNEXPECTED on a message before the hello, and reads nothing after it', () => {
    const { socket, connection, received, closes } = collectorSide();
    socket.emit('data', Buffer.concat([encodeMessage(events(1)), encodeMessage(hello)]));
    expect(received).toEqual([]);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_UNEXPECTED', reason: 'events before hello', from: 'awaiting-hello' })]);
    expect(closes[0]!.error).toBeInstanceOf(ProtocolError);
    expect(connection.state).toBe('closing');
    expect(socket.destroyed).toBe(true);
  });

  it('closes with ERR_UNEXPECTED on a second hello', () => {
    const { socket, received, closes } = collectorSide();
    socket.emit('data', Buffer.concat([encodeMessage(hello), encodeMessage(hello)]));
    expect(received).toHaveLength(1);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_UNEXPECTED', reason: 'second hello', from: 'open' })]);
  });

  it('refuses to open twice', () => {
    const { connection } = collectorSide();
    connection.open();
    expect(() => connection.open()).toThrow(expect.objectContaining({ code: 'ERR_UNEXPECTED' }));
  });

  it('goes closing → closed when the socket closes', async () => {
    const { connection } = collectorSide();
    connection.close('test', null);
    expect(connection.state).toBe('closing');
    await nextTick();
    expect(connection.state).toBe('closed');
  });
});

describe('Connection: frame limits', () => {
  const header = (length: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(length, 0);
    return b;
  };

  it('refuses a frame over MAX_HELLO_FRAME_BYTES before the hello, on its length prefix', () => {
    const { socket, closes } = collectorSide();
    socket.emit('data', header(MAX_HELLO_FRAME_BYTES + 1));
    expect(closes).toEqual([
      expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE', reason: expect.stringContaining(`exceeds ${MAX_HELLO_FRAME_BYTES}`) }),
    ]);
  });

  it('takes frames up to MAX_FRAME_BYTES once open, from the next frame of the same chunk', () => {
    const { socket, received, closes } = collectorSide();
    const lines = new Array(200).fill('x'.repeat(2000));
    const big = encodeMessage({ type: 'events', events: [{ kind: 'log.lines', seq: 1, t: 5, stream: 'stdout', lines }] });
    expect(big.length).toBeGreaterThan(MAX_HELLO_FRAME_BYTES);
    socket.emit('data', Buffer.concat([encodeMessage(hello), big]));
    expect(received.map((m) => m.type)).toEqual(['hello', 'events']);
    socket.emit('data', header(MAX_FRAME_BYTES + 1));
    expect(closes).toEqual([
      expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE', reason: expect.stringContaining(`exceeds ${MAX_FRAME_BYTES}`) }),
    ]);
  });

  it('closes with ERR_MSGPACK on a bad body and ERR_FRAME_EMPTY on a zero length', () => {
    const a = collectorSide();
    a.socket.emit('data', frame(Buffer.from([0xc1])));
    expect(a.closes[0]?.code).toBe('ERR_MSGPACK');
    const b = collectorSide();
    b.socket.emit('data', header(0));
    expect(b.closes[0]?.code).toBe('ERR_FRAME_EMPTY');
  });
});

describe('Connection: how it ends', () => {
  it('a clean end of stream is no error', () => {
    const { socket, closes } = collectorSide();
    socket.emit('data', encodeMessage(hello));
    socket.emit('end');
    expect(closes).toEqual([{ reason: 'probe closed the connection', code: null, from: 'open' }]);
  });

  it('an end in the middle of a frame is ERR_TRUNCATED', () => {
    const { socket, closes } = collectorSide();
    socket.emit('data', encodeMessage(hello).subarray(0, 10));
    socket.emit('end');
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_TRUNCATED', from: 'awaiting-hello' })]);
  });

  it('a socket error has no code but keeps the error', () => {
    const { socket, closes } = collectorSide();
    const err = new Error('ECONNRESET');
    socket.emit('error', err);
    expect(closes).toEqual([{ reason: 'socket error: ECONNRESET', code: null, error: err, from: 'awaiting-hello' }]);
  });

  it("a socket that closes by itself ends the connection ('close' without 'end')", () => {
    const { socket, connection, closes } = collectorSide();
    socket.emit('close');
    expect(closes).toEqual([{ reason: 'connection closed', code: null, from: 'awaiting-hello' }]);
    expect(connection.state).toBe('closed');
  });

  it('an exception in the role is ERR_INTERNAL', () => {
    const { socket, closes } = collectorSide({
      onMessage: () => {
        throw new Error('store on fire');
      },
    });
    socket.emit('data', encodeMessage(hello));
    expect(closes).toEqual([
      expect.objectContaining({ reason: 'internal error: store on fire', code: 'ERR_INTERNAL', from: 'awaiting-hello' }),
    ]);
  });

  it('reports once, then reads, dispatches and sends nothing', async () => {
    const { socket, connection, received, closes } = collectorSide({
      onMessage: (m) => {
        received.push(m);
        if (m.type === 'hello') connection.open();
        else connection.close('enough', 'ERR_STORE'); // the role ends it from inside a dispatch
      },
    });
    socket.emit('data', Buffer.concat([encodeMessage(hello), encodeMessage(events(1)), encodeMessage(events(2))]));
    expect(received.map((m) => m.type)).toEqual(['hello', 'events']);
    connection.close('again', null);
    socket.emit('error', new Error('late'));
    socket.emit('data', encodeMessage(events(3)));
    await nextTick();
    expect(closes).toEqual([{ reason: 'enough', code: 'ERR_STORE', from: 'open' }]);
    expect(received).toHaveLength(2);
    const before = socket.written.length;
    expect(connection.send({ type: 'heartbeat' })).toBe(false);
    await expect(connection.deliver({ type: 'heartbeat' })).rejects.toThrow('connection closed');
    expect(socket.written).toHaveLength(before);
    expect(connection.state).toBe('closed');
  });
});

describe('Connection: backpressure', () => {
  it('deliver() waits for drain when the buffer is full; onDrain follows', async () => {
    let drains = 0;
    const { socket, connection } = collectorSide({ onDrain: () => drains++ });
    connection.open();
    socket.full = true;
    expect(connection.send({ type: 'heartbeat' })).toBe(false);
    let delivered = false;
    const pending = connection.deliver({ type: 'ack', seq: 1 }).then(() => (delivered = true));
    await nextTick();
    expect(delivered).toBe(false);
    socket.full = false;
    socket.emit('drain');
    await pending;
    expect(drains).toBe(1);
  });

  it('deliver() rejects when the connection ends while it waits', async () => {
    const { socket, connection } = collectorSide();
    connection.open();
    socket.full = true;
    const pending = connection.deliver({ type: 'ack', seq: 1 });
    connection.close('bye');
    await expect(pending).rejects.toThrow('connection closed');
  });
});

describe('Connection: budget', () => {
  /** A budget that cuts off (throws) past `bytes`/`frames`, like the collector's on a deep overdraft. */
  const budget = (bytes: number, frames: number): Allowance => ({
    spendBytes: (n) => {
      if ((bytes -= n) < 0) throw new ProtocolError('ERR_RATE_LIMIT', 'probe over its bytes budget');
      return 0;
    },
    spendFrame: () => {
      if (--frames < 0) throw new ProtocolError('ERR_RATE_LIMIT', 'probe over its frames budget');
      return 0;
    },
  });

  it('closes with the code the budget throws when the bytes are over it, before decoding them', () => {
    const { socket, received, closes } = collectorSide({ budget: budget(10, 100) });
    socket.emit('data', encodeMessage(hello));
    expect(received).toEqual([]);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_RATE_LIMIT', reason: 'probe over its bytes budget' })]);
  });

  it('closes with the code the budget throws when the frames are over it', () => {
    const { socket, received, closes } = collectorSide({ budget: budget(1e9, 2) });
    socket.emit('data', Buffer.concat([encodeMessage(hello), encodeMessage(events(1)), encodeMessage(events(2))]));
    expect(received.map((m) => m.type)).toEqual(['hello', 'events']);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_RATE_LIMIT', reason: 'probe over its frames budget' })]);
  });
});

/** A FakeSocket that records pause() and resume(). */
class PausableSocket extends FakeSocket {
  paused = false;
  pauses = 0;
  pause(): void {
    this.paused = true;
    this.pauses++;
  }
  resume(): void {
    this.paused = false;
  }
}

describe('Connection: throttle', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** The collector's side on a pausable socket, with a budget that asks for `wait` ms per chunk. */
  function throttled(
    wait: () => number,
    extra: Partial<ConnectionRole<ProbeMessage, CollectorMessage, 'hello' | 'events' | 'heartbeat'>> = {},
  ) {
    const socket = new PausableSocket();
    const received: ProbeMessage[] = [];
    const closes: Closed[] = [];
    const held: number[] = [];
    const connection = new Connection(socket, {
      peer: 'probe',
      decode: decodeProbeMessage,
      admits: { 'awaiting-hello': ['hello'], open: ['events', 'heartbeat'] },
      budget: { spendBytes: wait, spendFrame: () => 0, held: (ms) => held.push(ms) },
      onMessage: (m) => {
        received.push(m);
        if (m.type === 'hello') connection.open();
      },
      onClose: (c) => closes.push(c),
      ...extra,
    });
    return { socket, connection, received, closes, held };
  }

  it('decodes the chunk that went over, then stops reading until the budget says', () => {
    const { socket, received, held } = throttled(() => 300);
    socket.emit('data', Buffer.concat([encodeMessage(hello), encodeMessage(events(1))]));
    expect(received.map((m) => m.type)).toEqual(['hello', 'events']);
    expect(socket.paused).toBe(true);
    vi.advanceTimersByTime(299);
    expect(socket.paused).toBe(true);
    vi.advanceTimersByTime(1);
    expect(socket.paused).toBe(false);
    expect(held).toEqual([300]);
  });

  it('a longer throttle while held extends it; a shorter one does not shorten it', () => {
    const waits = [300, 1000, 100];
    const { socket, connection } = throttled(() => waits.shift() ?? 0);
    socket.emit('data', encodeMessage(hello));
    connection.throttle(1000); // from the events budget, say
    connection.throttle(100);
    vi.advanceTimersByTime(999);
    expect(socket.paused).toBe(true);
    vi.advanceTimersByTime(1);
    expect(socket.paused).toBe(false);
    expect(socket.pauses).toBe(1);
  });

  it('neither the idle timeout nor the hello deadline runs against a peer we are not reading', () => {
    const { socket, closes } = throttled(() => 8000, {
      helloTimeoutMs: 2000,
      liveness: { heartbeatMs: 1000, idleTimeoutMs: 5000, heartbeat: () => ({ type: 'heartbeat' }) },
    });
    socket.emit('data', Buffer.from([0, 0])); // half a length prefix, then held 8 s
    vi.advanceTimersByTime(8000 + 1999);
    expect(closes).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_UNEXPECTED', reason: 'no hello within 2000 ms' })]);
  });

  it('a close while held releases the hold and counts the time held', () => {
    const { socket, connection, held } = throttled(() => 5000);
    socket.emit('data', encodeMessage(hello));
    vi.advanceTimersByTime(1200);
    connection.close('bye');
    expect(held).toEqual([1200]);
    expect(socket.paused).toBe(true); // never resumed: it is destroyed
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('Connection: timers', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const liveness = { heartbeatMs: 1000, idleTimeoutMs: 5000 };

  it('closes with ERR_UNEXPECTED when the hello does not come within the deadline', () => {
    const { closes } = collectorSide({ helloTimeoutMs: 2000 });
    vi.advanceTimersByTime(1999);
    expect(closes).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(closes).toEqual([
      expect.objectContaining({ code: 'ERR_UNEXPECTED', reason: 'no hello within 2000 ms', from: 'awaiting-hello' }),
    ]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a hello in time cancels the deadline', () => {
    const { socket, closes } = collectorSide({ helloTimeoutMs: 2000 });
    vi.advanceTimersByTime(1000);
    socket.emit('data', encodeMessage(hello));
    vi.advanceTimersByTime(10_000);
    expect(closes).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('closes with ERR_IDLE after idleTimeoutMs of silence, and not while the peer talks', () => {
    const { socket, closes } = collectorSide({ liveness: { ...liveness, heartbeat: () => ({ type: 'heartbeat' }) } });
    socket.emit('data', encodeMessage(hello));
    for (let i = 0; i < 10; i++) {
      vi.advanceTimersByTime(1000);
      socket.emit('data', encodeMessage({ type: 'heartbeat', sinceBootMs: i }));
    }
    expect(closes).toEqual([]);
    vi.advanceTimersByTime(5000);
    expect(closes).toEqual([]);
    vi.advanceTimersByTime(1000);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_IDLE', reason: 'no word from the probe for 5000 ms', from: 'open' })]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("this side's own stall is not the peer's silence: idle only after idleTimeoutMs on time", () => {
    const { socket, closes } = collectorSide({ liveness: { ...liveness, heartbeat: () => ({ type: 'heartbeat' }) } });
    socket.emit('data', encodeMessage(hello));
    vi.advanceTimersByTime(1000);
    // The event loop stalls for 8 s: the clock moves, no timer runs (the peer's frames would
    // be waiting unread in the socket).
    vi.setSystemTime(Date.now() + 8000);
    vi.advanceTimersByTime(1000);
    expect(closes).toEqual([]);
    // From here the peer stays silent while this side runs on time: it goes idle once the
    // silence on time is over idleTimeoutMs (1 s before the stall, 1 s of the late tick's own
    // interval, then these).
    vi.advanceTimersByTime(3000);
    expect(closes).toEqual([]);
    vi.advanceTimersByTime(1000);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_IDLE' })]);
  });

  it("the hello deadline does not count this side's own stall either", () => {
    const { closes } = collectorSide({ helloTimeoutMs: 2000 });
    vi.advanceTimersByTime(500);
    vi.setSystemTime(Date.now() + 6000);
    // The deadline's timer comes 6 s late: it looks again once the frames waiting are read.
    vi.advanceTimersByTime(1500);
    expect(closes).toEqual([]);
    vi.advanceTimersByTime(250);
    expect(closes).toEqual([expect.objectContaining({ code: 'ERR_UNEXPECTED', reason: 'no hello within 2000 ms' })]);
  });

  it('goes idle before the hello exchange too', () => {
    const { closes } = probeSide({ liveness: { ...liveness, heartbeat: () => ({ type: 'heartbeat', sinceBootMs: 1 }) } });
    vi.advanceTimersByTime(6000);
    expect(closes).toEqual([
      expect.objectContaining({ code: 'ERR_IDLE', reason: 'no word from the collector for 5000 ms', from: 'awaiting-hello' }),
    ]);
  });

  it('a side that did not speak first heartbeats only once open, and only when nothing else went out', () => {
    const { socket, connection, sent } = collectorSide({ liveness: { ...liveness, heartbeat: () => ({ type: 'heartbeat' }) } });
    vi.advanceTimersByTime(1000);
    expect(sent()).toEqual([]);
    socket.emit('data', encodeMessage(hello));
    vi.advanceTimersByTime(1000);
    expect(sent()).toEqual([{ type: 'heartbeat' }]);
    vi.advanceTimersByTime(500);
    connection.send({ type: 'ack', seq: 1 });
    vi.advanceTimersByTime(500); // a tick 500 ms after the ack: nothing needed
    expect(sent()).toEqual([{ type: 'heartbeat' }, { type: 'ack', seq: 1 }]);
    vi.advanceTimersByTime(1000);
    expect(sent()).toEqual([{ type: 'heartbeat' }, { type: 'ack', seq: 1 }, { type: 'heartbeat' }]);
  });

  it('a frame owed for the tick goes out on it whatever went out before, in place of the heartbeat', () => {
    let owed: CollectorMessage | null = null;
    const { socket, connection, sent } = collectorSide({
      liveness: {
        ...liveness,
        heartbeat: () => ({ type: 'heartbeat' }),
        owed: () => {
          const m = owed;
          owed = null;
          return m;
        },
      },
    });
    owed = { type: 'ack', seq: 9 };
    vi.advanceTimersByTime(1000); // not open yet: nothing goes, and it stays owed
    expect(sent()).toEqual([]);
    socket.emit('data', encodeMessage(hello));
    vi.advanceTimersByTime(500);
    connection.send({ type: 'command', id: 1, op: 'status' });
    vi.advanceTimersByTime(500); // 500 ms after another frame: the owed one goes all the same
    expect(sent()).toEqual([
      { type: 'command', id: 1, op: 'status' },
      { type: 'ack', seq: 9 },
    ]);
    vi.advanceTimersByTime(1000); // nothing owed: a heartbeat, as before
    expect(sent()).toEqual([{ type: 'command', id: 1, op: 'status' }, { type: 'ack', seq: 9 }, { type: 'heartbeat' }]);
  });

  it('a side that spoke first heartbeats while it awaits the answer', () => {
    const { sent } = probeSide({ liveness: { ...liveness, heartbeat: () => ({ type: 'heartbeat', sinceBootMs: 7 }) } });
    vi.advanceTimersByTime(2000);
    expect(sent()).toEqual([hello, { type: 'heartbeat', sinceBootMs: 7 }, { type: 'heartbeat', sinceBootMs: 7 }]);
  });

  it('a side whose hello went out on the raw socket (greeted) heartbeats like one that sent it', () => {
    const { sent } = probeSide({
      hello: undefined,
      greeted: true,
      liveness: { ...liveness, heartbeat: () => ({ type: 'heartbeat', sinceBootMs: 7 }) },
    });
    // Nothing is sent as it starts: the hello is already out.
    expect(sent()).toEqual([]);
    vi.advanceTimersByTime(999);
    expect(sent()).toEqual([]);
    vi.advanceTimersByTime(1001);
    expect(sent()).toEqual([
      { type: 'heartbeat', sinceBootMs: 7 },
      { type: 'heartbeat', sinceBootMs: 7 },
    ]);
  });

  describe('driven by its owner (Liveness.driven)', () => {
    const driven = { ...liveness, driven: true, heartbeat: () => ({ type: 'heartbeat', sinceBootMs: 7 }) as const };

    it('keeps no timer and heartbeats only when ticked, and only when nothing else went out', () => {
      const { socket, connection, sent } = probeSide({ liveness: driven });
      expect(vi.getTimerCount()).toBe(0);
      vi.advanceTimersByTime(3000);
      expect(sent()).toEqual([hello]);
      connection.tick();
      expect(sent()).toEqual([hello, { type: 'heartbeat', sinceBootMs: 7 }]);
      socket.emit('data', encodeMessage({ type: 'welcome', ack: 0, hostWallMs: 1 }));
      // Ticks 200 ms apart (the probe's boot rate): one heartbeat a heartbeatMs, no more.
      for (let i = 0; i < 10; i++) {
        vi.advanceTimersByTime(200);
        connection.tick();
        socket.emit('data', encodeMessage({ type: 'heartbeat' }));
      }
      expect(sent().filter((m) => m.type === 'heartbeat')).toHaveLength(3);
    });

    it("goes idle on a tick after idleTimeoutMs of the peer's silence", () => {
      const { socket, connection, closes } = probeSide({ liveness: driven });
      socket.emit('data', encodeMessage({ type: 'welcome', ack: 0, hostWallMs: 1 }));
      for (let i = 0; i < 5; i++) {
        vi.advanceTimersByTime(1000);
        connection.tick();
      }
      expect(closes).toEqual([]);
      vi.advanceTimersByTime(1000);
      connection.tick();
      expect(closes).toEqual([expect.objectContaining({ code: 'ERR_IDLE', reason: 'no word from the collector for 5000 ms' })]);
      // A tick after the close does nothing (the owner's loop may run on).
      connection.tick();
      expect(closes).toHaveLength(1);
    });

    it("a late tick is this side's stall, not the peer's silence", () => {
      const { socket, connection, closes } = probeSide({ liveness: driven });
      socket.emit('data', encodeMessage({ type: 'welcome', ack: 0, hostWallMs: 1 }));
      vi.advanceTimersByTime(1000);
      connection.tick();
      // The owner's loop does not run for 8 s.
      vi.advanceTimersByTime(8000);
      connection.tick();
      expect(closes).toEqual([]);
      for (let i = 0; i < 4; i++) {
        vi.advanceTimersByTime(1000);
        connection.tick();
      }
      expect(closes).toEqual([expect.objectContaining({ code: 'ERR_IDLE' })]);
    });
  });

  it('stops every timer when it closes', () => {
    const { connection } = collectorSide({ helloTimeoutMs: 2000, liveness: { ...liveness, heartbeat: () => ({ type: 'heartbeat' }) } });
    expect(vi.getTimerCount()).toBe(2);
    connection.close('bye');
    expect(vi.getTimerCount()).toBe(0);
  });
});
