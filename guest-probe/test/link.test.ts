import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// A fixed pause only where a test shows that nothing happens meanwhile.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  FrameDecoder,
  MAX_EVENTS_PER_BATCH,
  PROTOCOL_VERSION,
  decodeProbeMessage,
  encodeMessage,
  initialStatus,
  type CollectorMessage,
  type EventBody,
  type ProbeMessage,
  type ProbeMessageOf,
} from '@vsockdiag/proto';
import { Backoff } from '../src/backoff.js';
import { FATAL_RETRY_MS, Link, type LinkOptions } from '../src/link.js';
import type { CommandAnswer } from '../src/commands.js';
import { EventRing } from '../src/ring.js';
import { helloMessage } from '../../test/support/hello.js';
import { waitFor } from '../../test/support/wait.js';

// ---------------------------------------------------------------------------------------
// A fake collector: a Unix socket server that decodes what the probe sends with the real
// codec (schema-validated) and lets each test decide what to answer.

interface FakeSession {
  index: number;
  socket: net.Socket;
  messages: ProbeMessage[];
  errors: Error[];
  closed: boolean;
  openedAt: number;
  closedAt: number;
  send(m: CollectorMessage): void;
  /** Seqs of every event received on this session, in arrival order. */
  seqs(): number[];
  of<T extends ProbeMessage['type']>(type: T): Array<ProbeMessageOf<T>>;
}

type Behaviour = (session: FakeSession, message: ProbeMessage) => void;

class FakeCollector {
  readonly sessions: FakeSession[] = [];
  private server!: net.Server;

  constructor(
    readonly path: string,
    public behaviour: Behaviour,
  ) {}

  get address(): string {
    return `unix:${this.path}`;
  }

  async start(): Promise<void> {
    this.server = net.createServer((socket) => this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.path, () => resolve());
    });
  }

  async close(): Promise<void> {
    for (const s of this.sessions) s.socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Every event seq received, over all sessions. */
  allSeqs(): number[] {
    return this.sessions.flatMap((s) => s.seqs());
  }

  private accept(socket: net.Socket): void {
    const session: FakeSession = {
      index: this.sessions.length,
      socket,
      messages: [],
      errors: [],
      closed: false,
      openedAt: Date.now(),
      closedAt: 0,
      send: (m) => {
        if (!socket.destroyed) socket.write(encodeMessage(m));
      },
      seqs: () => session.of('events').flatMap((m) => m.events.map((e) => e.seq)),
      of: <T extends ProbeMessage['type']>(type: T) => session.messages.filter((m): m is ProbeMessageOf<T> => m.type === type),
    };
    this.sessions.push(session);
    const decoder = new FrameDecoder((body) => {
      const m = decodeProbeMessage(body);
      session.messages.push(m);
      this.behaviour(session, m);
    });
    socket.on('data', (chunk) => {
      try {
        decoder.push(chunk);
      } catch (err) {
        session.errors.push(err as Error);
        socket.destroy();
      }
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      session.closed = true;
      session.closedAt = Date.now();
    });
  }
}

/** Answers hello with welcome{ack}, and (optionally) acks every events batch. */
function standard(opts: { ack?: (session: FakeSession) => number; ackEvents?: boolean } = {}): Behaviour {
  return (session, m) => {
    if (m.type === 'hello') session.send({ type: 'welcome', ack: opts.ack?.(session) ?? 0, hostWallMs: Date.now() });
    if (m.type === 'events' && opts.ackEvents !== false) {
      session.send({ type: 'ack', seq: m.events[m.events.length - 1]!.seq });
    }
  };
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
const notice = (i: number): EventBody => ({ kind: 'probe.notice', level: 'info', message: `event ${i}` });

// ---------------------------------------------------------------------------------------

let dir: string;
let collector: FakeCollector;
let link: Link | null;
let logs: Array<[string, string]>;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vd-link-'));
  collector = new FakeCollector(join(dir, 'collector.sock'), standard());
  await collector.start();
  link = null;
  logs = [];
});

afterEach(async () => {
  link?.stop();
  await collector.close();
  rmSync(dir, { recursive: true, force: true });
});

function push(ring: EventRing, count: number): void {
  for (let i = 0; i < count; i++) ring.push(notice(ring.lastSeq + 1), ring.lastSeq + 1);
}

function startLink(ring: EventRing, extra: Partial<LinkOptions> = {}): Link {
  link = new Link({
    address: collector.address,
    ring,
    hello: (generation) => helloMessage({ generation, lastSeq: ring.lastSeq, clocks: { wallMs: Date.now(), sinceBootMs: 1234 } }),
    onCommand: async () => ({ ok: true }),
    sinceBootMs: () => 1234,
    log: (level, message) => logs.push([level, message]),
    backoff: new Backoff(1, 10),
    ...extra,
  });
  link.start();
  return link;
}

function noDecodeErrors(): void {
  for (const s of collector.sessions) expect(s.errors, `session ${s.index}`).toEqual([]);
}

describe('Link: session start', () => {
  it('sends hello first, with generation 1 and the ring lastSeq', async () => {
    const ring = new EventRing();
    push(ring, 3);
    collector.behaviour = () => {}; // no welcome yet
    const l = startLink(ring);
    await waitFor('hello', () => (collector.sessions[0]?.messages.length ?? 0) > 0);
    const first = collector.sessions[0]!.messages[0]!;
    expect(first.type).toBe('hello');
    const hello = first as ProbeMessageOf<'hello'>;
    expect(hello.generation).toBe(1);
    expect(hello.lastSeq).toBe(3);
    expect(hello.protocol).toBe(PROTOCOL_VERSION);
    expect(l.generation).toBe(1);
    // Nothing but hello (and heartbeats) before the welcome.
    await sleep(50);
    expect(collector.sessions[0]!.of('events')).toEqual([]);
    expect(l.connected).toBe(false);
    noDecodeErrors();
  });

  it('after welcome{ack:N} sends events N+1.. in order', async () => {
    const ring = new EventRing();
    push(ring, 20);
    collector.behaviour = standard({ ack: () => 7, ackEvents: false });
    const l = startLink(ring);
    const connected = new Promise<number>((resolve) => l.once('connected', resolve));
    expect(await connected).toBe(1);
    expect(l.connected).toBe(true);
    await waitFor('events', () => collector.allSeqs().length >= 13);
    await sleep(30);
    expect(collector.allSeqs()).toEqual(range(8, 20));
    expect(collector.sessions[0]!.of('gap')).toEqual([]);
    // The welcome's ack counts as acked.
    expect(l.acked).toBe(7);
    noDecodeErrors();
  });

  it('sends a big backlog in order, in batches of at most 256', async () => {
    const ring = new EventRing();
    push(ring, 1000);
    collector.behaviour = standard({ ack: () => 100 });
    const l = startLink(ring);
    await waitFor('all events', () => collector.allSeqs().length >= 900);
    expect(collector.allSeqs()).toEqual(range(101, 1000));
    const batches = collector.sessions[0]!.of('events');
    expect(batches.length).toBeGreaterThanOrEqual(Math.ceil(900 / MAX_EVENTS_PER_BATCH));
    for (const b of batches) {
      expect(b.events.length).toBeGreaterThan(0);
      expect(b.events.length).toBeLessThanOrEqual(256);
    }
    expect(await l.waitAcked(1000, 3000)).toBe(true);
    noDecodeErrors();
  });

  it('stamps each batch with the guest clock as it is written (a sample of the clock for the host)', async () => {
    const ring = new EventRing();
    push(ring, 600);
    collector.behaviour = standard();
    let clock = 5000;
    startLink(ring, { sinceBootMs: () => (clock += 10) });
    await waitFor('all events', () => collector.allSeqs().length >= 600);
    const stamps = collector.sessions[0]!.of('events').map((b) => b.sentAt);
    expect(stamps.length).toBeGreaterThanOrEqual(3);
    // Read once per batch, at its write: each a fresh reading, none reused.
    for (let i = 0; i < stamps.length; i++) expect(stamps[i]).toBeGreaterThan(i === 0 ? 5000 : stamps[i - 1]!);
    noDecodeErrors();
  });

  it('sends new events after flush(), coalescing pushes of one turn into one batch', async () => {
    const ring = new EventRing();
    collector.behaviour = standard();
    const l = startLink(ring);
    await waitFor('welcome', () => l.connected);
    for (let i = 0; i < 5; i++) {
      push(ring, 1);
      l.flush();
    }
    await waitFor('5 events', () => collector.allSeqs().length >= 5);
    await sleep(20);
    expect(collector.allSeqs()).toEqual([1, 2, 3, 4, 5]);
    expect(collector.sessions[0]!.of('events')).toHaveLength(1);
    push(ring, 2);
    l.flush();
    await waitFor('7 events', () => collector.allSeqs().length >= 7);
    expect(collector.allSeqs()).toEqual(range(1, 7));
  });

  it('does not send events pushed before the welcome until the welcome', async () => {
    const ring = new EventRing();
    let welcomeNow: (() => void) | null = null;
    collector.behaviour = (s, m) => {
      if (m.type === 'hello') welcomeNow = () => s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
    };
    const l = startLink(ring);
    await waitFor('hello', () => welcomeNow !== null);
    push(ring, 3);
    l.flush();
    await sleep(50);
    expect(collector.allSeqs()).toEqual([]);
    welcomeNow!();
    await waitFor('events', () => collector.allSeqs().length >= 3);
    expect(collector.allSeqs()).toEqual([1, 2, 3]);
  });
});

describe('Link: acks', () => {
  it('advances acked on ack and resolves waitAcked', async () => {
    const ring = new EventRing();
    push(ring, 10);
    const sessions: FakeSession[] = [];
    collector.behaviour = (s, m) => {
      if (m.type === 'hello') {
        sessions.push(s);
        s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
      }
    };
    const l = startLink(ring);
    const acks: number[] = [];
    l.on('ack', (n: number) => acks.push(n));
    await waitFor('events', () => collector.allSeqs().length >= 10);
    expect(l.acked).toBe(0);
    const waiting = l.waitAcked(6, 3000);
    const tooLate = l.waitAcked(10, 100);
    sessions[0]!.send({ type: 'ack', seq: 4 });
    await waitFor('ack 4', () => l.acked === 4);
    sessions[0]!.send({ type: 'ack', seq: 6 });
    expect(await waiting).toBe(true);
    expect(l.acked).toBe(6);
    expect(await tooLate).toBe(false);
    // Already acked: resolves at once.
    expect(await l.waitAcked(5, 0)).toBe(true);
    // An old ack does not move acked backwards.
    sessions[0]!.send({ type: 'ack', seq: 2 });
    sessions[0]!.send({ type: 'ack', seq: 10 });
    await waitFor('ack 10', () => l.acked === 10);
    expect(acks).toEqual([0, 4, 6, 10]);
    expect(l.listenerCount('ack')).toBe(1); // waitAcked cleaned up after itself
  });

  it('asks for the ack at once (ackNow) only on batches someone waits for', async () => {
    const ring = new EventRing();
    collector.behaviour = standard({ ackEvents: false });
    const l = startLink(ring);
    await waitFor('welcome', () => l.connected);
    push(ring, 2);
    l.flush();
    await waitFor('first batch', () => collector.allSeqs().length >= 2);
    // The exit flush's order: the event pushed, its flush queued, then the wait.
    push(ring, 1);
    l.flush();
    const waiting = l.waitAcked(3, 3000);
    await waitFor('second batch', () => collector.allSeqs().length >= 3);
    const batches = collector.sessions[0]!.of('events');
    expect(batches.map((b) => [b.events.map((e) => e.seq), b.ackNow])).toEqual([
      [[1, 2], undefined],
      [[3], true],
    ]);
    collector.sessions[0]!.send({ type: 'ack', seq: 3 });
    expect(await waiting).toBe(true);
    // Acked: the next batch no longer asks.
    push(ring, 1);
    l.flush();
    await waitFor('third batch', () => collector.allSeqs().length >= 4);
    expect(collector.sessions[0]!.of('events')[2]!.ackNow).toBeUndefined();
  });

  it('never counts as acked more than it sent', async () => {
    const ring = new EventRing();
    push(ring, 5);
    collector.behaviour = (s, m) => {
      if (m.type === 'hello') s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
      if (m.type === 'events') s.send({ type: 'ack', seq: 1_000_000 });
    };
    const l = startLink(ring);
    await waitFor('ack', () => l.acked > 0);
    expect(l.acked).toBe(5);
    expect(await l.waitAcked(6, 50)).toBe(false);
  });

  it('clamps a welcome ack beyond the ring to lastSeq', async () => {
    const ring = new EventRing();
    push(ring, 5);
    collector.behaviour = standard({ ack: () => 50 });
    const l = startLink(ring);
    await waitFor('welcome', () => l.connected);
    expect(l.acked).toBe(5);
    push(ring, 1);
    l.flush();
    await waitFor('event 6', () => collector.allSeqs().length > 0);
    expect(collector.allSeqs()).toEqual([6]);
  });
});

describe('Link: gaps', () => {
  it('sends a gap first when the ring evicted unacked events', async () => {
    const ring = new EventRing({ maxEvents: 10, maxBytes: 1e9 });
    push(ring, 25); // holds 16..25
    const l = startLink(ring);
    await waitFor('events', () => collector.allSeqs().length >= 10);
    const msgs = collector.sessions[0]!.messages.filter((m) => m.type !== 'heartbeat');
    expect(msgs.map((m) => m.type)).toEqual(['hello', 'gap', 'events']);
    expect(msgs[1]).toEqual({ type: 'gap', from: 1, to: 15 });
    expect(collector.allSeqs()).toEqual(range(16, 25));
    expect(await l.waitAcked(25, 2000)).toBe(true);
  });

  it('starts the gap after the welcome ack', async () => {
    const ring = new EventRing({ maxEvents: 10, maxBytes: 1e9 });
    push(ring, 25);
    collector.behaviour = standard({ ack: () => 5 });
    startLink(ring);
    await waitFor('events', () => collector.allSeqs().length >= 10);
    expect(collector.sessions[0]!.of('gap')).toEqual([{ type: 'gap', from: 6, to: 15 }]);
    expect(collector.allSeqs()).toEqual(range(16, 25));
  });

  it('reports a gap for events evicted while connected but unsent (no duplicates, no holes)', async () => {
    const ring = new EventRing({ maxEvents: 10, maxBytes: 1e9 });
    collector.behaviour = standard();
    const l = startLink(ring);
    await waitFor('welcome', () => l.connected);
    push(ring, 30); // one turn: only 21..30 are left when the flush runs
    l.flush();
    await waitFor('events', () => collector.allSeqs().length >= 10);
    expect(collector.sessions[0]!.of('gap')).toEqual([{ type: 'gap', from: 1, to: 20 }]);
    expect(collector.allSeqs()).toEqual(range(21, 30));
  });
});

describe('Link: reconnects', () => {
  it('reconnects with a fresh socket and generation 2; no duplicates when everything was acked', async () => {
    const ring = new EventRing();
    push(ring, 10);
    collector.behaviour = (s, m) => {
      if (m.type === 'hello') s.send({ type: 'welcome', ack: s.index === 0 ? 0 : 10, hostWallMs: Date.now() });
      if (m.type === 'events') s.send({ type: 'ack', seq: m.events[m.events.length - 1]!.seq });
    };
    const l = startLink(ring);
    const disconnected = new Promise<void>((resolve) => l.once('disconnected', () => resolve()));
    expect(await l.waitAcked(10, 3000)).toBe(true);
    collector.sessions[0]!.socket.end(); // the collector closes the session
    await disconnected;
    await waitFor('second session', () => collector.sessions.length === 2 && l.connected);
    const s2 = collector.sessions[1]!;
    expect(s2.socket).not.toBe(collector.sessions[0]!.socket);
    expect(s2.messages[0]).toMatchObject({ type: 'hello', generation: 2, lastSeq: 10 });
    expect(l.generation).toBe(2);
    await sleep(50);
    expect(s2.seqs()).toEqual([]);
    // New events go out on the new session only.
    push(ring, 2);
    l.flush();
    await waitFor('new events', () => s2.seqs().length >= 2);
    expect(s2.seqs()).toEqual([11, 12]);
    expect(collector.allSeqs()).toEqual(range(1, 12));
    noDecodeErrors();
  });

  it("marks where a session was lost, after what the loss brought along (a restore's uevent)", async () => {
    const ring = new EventRing();
    push(ring, 3);
    const hello = (generation: number) => ({
      protocol: PROTOCOL_VERSION,
      probeVersion: 'test',
      instanceId: 'test-instance-0001',
      generation,
      bootId: 'boot-id',
      clocks: { wallMs: Date.now(), sinceBootMs: 1234 },
      lastSeq: ring.lastSeq,
      ...(link?.lostAtSeq !== undefined ? { lostAtSeq: link.lostAtSeq } : {}),
      config: { target: 'envd', expectPort: 49983 },
      status: initialStatus(49983),
    });
    // The kernel's NEW_VMGENID is read when the link drops: it lands before the mark.
    const l = startLink(ring, { hello, onLost: () => push(ring, 1) });
    expect(l.lostAtSeq).toBeUndefined();
    expect(await l.waitAcked(3, 3000)).toBe(true);
    collector.sessions[0]!.socket.destroy(); // a transport reset
    await waitFor('second session', () => collector.sessions.length === 2 && l.connected);
    expect(l.lostAtSeq).toBe(4);
    expect(collector.sessions[0]!.messages[0]).not.toHaveProperty('lostAtSeq');
    expect(collector.sessions[1]!.messages[0]).toMatchObject({ type: 'hello', generation: 2, lastSeq: 4, lostAtSeq: 4 });
    noDecodeErrors();
  });

  it('replays from the new welcome ack when the collector acked less', async () => {
    const ring = new EventRing();
    push(ring, 10);
    collector.behaviour = (s, m) => {
      // The second collector only has 1..3 (it lost what it had not committed).
      if (m.type === 'hello') s.send({ type: 'welcome', ack: s.index === 0 ? 0 : 3, hostWallMs: Date.now() });
      if (m.type === 'events') s.send({ type: 'ack', seq: m.events[m.events.length - 1]!.seq });
    };
    const l = startLink(ring);
    expect(await l.waitAcked(10, 3000)).toBe(true);
    collector.sessions[0]!.socket.destroy();
    await waitFor('replay', () => (collector.sessions[1]?.seqs().length ?? 0) >= 7);
    await sleep(30);
    expect(collector.sessions[1]!.seqs()).toEqual(range(4, 10));
    expect(collector.sessions[1]!.messages[0]).toMatchObject({ type: 'hello', generation: 2 });
    expect(await l.waitAcked(10, 3000)).toBe(true);
  });

  it('resends unacked events after a reconnect', async () => {
    const ring = new EventRing();
    push(ring, 6);
    collector.behaviour = (s, m) => {
      if (m.type === 'hello') s.send({ type: 'welcome', ack: s.index === 0 ? 0 : 2, hostWallMs: Date.now() });
      // Session 0 acks only up to 2, then the connection drops.
      if (m.type === 'events' && s.index === 0) {
        s.send({ type: 'ack', seq: 2 });
        setTimeout(() => s.socket.destroy(), 20);
      }
    };
    const l = startLink(ring);
    await waitFor('session 2 events', () => (collector.sessions[1]?.seqs().length ?? 0) >= 4);
    expect(collector.sessions[0]!.seqs()).toEqual(range(1, 6));
    expect(collector.sessions[1]!.seqs()).toEqual(range(3, 6));
    expect(l.acked).toBe(2);
  });

  it('keeps trying while the collector is down, then connects', async () => {
    const ring = new EventRing();
    push(ring, 2);
    await collector.close();
    const l = startLink(ring);
    await waitFor('a failed dial', () => logs.some(([lvl, msg]) => lvl === 'warn' && msg.startsWith('connect ')));
    expect(l.connected).toBe(false);
    collector = new FakeCollector(collector.path, standard());
    rmSync(collector.path, { force: true });
    await collector.start();
    await waitFor('events', () => collector.allSeqs().length >= 2);
    expect(collector.allSeqs()).toEqual([1, 2]);
    // Failed dials do not count as sessions.
    expect(l.generation).toBe(1);
    expect(collector.sessions[0]!.messages[0]).toMatchObject({ type: 'hello', generation: 1 });
  });

  it('gives up on a silent collector after idleTimeoutMs and reconnects', async () => {
    const ring = new EventRing();
    collector.behaviour = (s, m) => {
      // Welcome, then silence: no acks, no heartbeats.
      if (m.type === 'hello') s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
    };
    const l = startLink(ring, { heartbeatMs: 50, idleTimeoutMs: 300 });
    await waitFor('second session', () => collector.sessions.length >= 2);
    const [s1, s2] = collector.sessions;
    expect(s1!.closed).toBe(true);
    const lifetime = s1!.closedAt - s1!.openedAt;
    expect(lifetime).toBeGreaterThanOrEqual(250);
    expect(lifetime).toBeLessThan(3000);
    // The link kept sending heartbeats meanwhile.
    expect(s1!.of('heartbeat').length).toBeGreaterThanOrEqual(2);
    expect(s1!.of('heartbeat')[0]).toEqual({ type: 'heartbeat', sinceBootMs: 1234 });
    expect(logs.some(([, msg]) => msg.includes('ERR_IDLE'))).toBe(true);
    await waitFor('generation 2 hello', () => s2!.messages.length > 0);
    expect(s2!.messages[0]).toMatchObject({ type: 'hello', generation: 2 });
    expect(l.generation).toBeGreaterThanOrEqual(2);
  });

  it('stays connected past idleTimeoutMs while the collector sends heartbeats', async () => {
    const ring = new EventRing();
    const timers: NodeJS.Timeout[] = [];
    collector.behaviour = (s, m) => {
      if (m.type === 'hello') {
        s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
        timers.push(setInterval(() => s.send({ type: 'heartbeat' }), 50));
      }
    };
    try {
      const l = startLink(ring, { heartbeatMs: 50, idleTimeoutMs: 300 });
      await waitFor('welcome', () => l.connected);
      await sleep(800);
      expect(collector.sessions).toHaveLength(1);
      expect(l.connected).toBe(true);
      expect(l.generation).toBe(1);
    } finally {
      timers.forEach(clearInterval);
    }
  });

  it("with drivenLiveness, heartbeats come from the owner's ticks and from no timer of its own", async () => {
    const ring = new EventRing();
    collector.behaviour = (s, m) => {
      if (m.type === 'hello') s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
    };
    const l = startLink(ring, { heartbeatMs: 50, idleTimeoutMs: 60_000, drivenLiveness: true });
    await waitFor('welcome', () => l.connected);
    // Six heartbeat periods without a tick: nothing goes out.
    await sleep(300);
    const s = collector.sessions[0]!;
    expect(s.of('heartbeat')).toEqual([]);
    // heartbeatMs minus the tick slack is 0 here: each tick sends one.
    for (let i = 0; i < 3; i++) l.tick();
    await waitFor('three heartbeats', () => s.of('heartbeat').length === 3);
    expect(s.of('heartbeat')[0]).toEqual({ type: 'heartbeat', sinceBootMs: 1234 });
  });

  it('also gives up when the collector never answers hello', async () => {
    const ring = new EventRing();
    collector.behaviour = () => {};
    startLink(ring, { heartbeatMs: 50, idleTimeoutMs: 300 });
    await waitFor('second session', () => collector.sessions.length >= 2);
    expect(collector.sessions[0]!.closedAt - collector.sessions[0]!.openedAt).toBeGreaterThanOrEqual(250);
  });

  it('drops the session on a malformed frame and reconnects', async () => {
    const ring = new EventRing();
    push(ring, 3);
    collector.behaviour = (s, m) => {
      if (m.type !== 'hello') return;
      if (s.index === 0)
        s.socket.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 1, 2, 3])); // length far over the limit
      else s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
    };
    const l = startLink(ring);
    await waitFor('replay on session 2', () => (collector.sessions[1]?.seqs().length ?? 0) >= 3);
    expect(collector.sessions[0]!.closed).toBe(true);
    expect(collector.sessions[0]!.seqs()).toEqual([]);
    expect(collector.sessions[1]!.seqs()).toEqual([1, 2, 3]);
    expect(collector.sessions[1]!.messages[0]).toMatchObject({ type: 'hello', generation: 2 });
    expect(logs.some(([lvl, msg]) => lvl === 'warn' && msg.includes('ERR_FRAME_TOO_LARGE'))).toBe(true);
    expect(l.generation).toBe(2);
  });

  it.each([
    ['bad msgpack', Buffer.from([0, 0, 0, 1, 0xc1]), 'ERR_MSGPACK'],
    ['an empty frame', Buffer.from([0, 0, 0, 0]), 'ERR_FRAME_EMPTY'],
    ['an unknown message type', encodeMessage({ type: 'bogus' } as unknown as CollectorMessage), 'ERR_UNKNOWN_TYPE'],
    ['ack before welcome', encodeMessage({ type: 'ack', seq: 1 }), 'ERR_UNEXPECTED'],
    ['a command before welcome', encodeMessage({ type: 'command', id: 1, op: 'status' }), 'ERR_UNEXPECTED'],
  ])('drops the session on %s', async (_what, bytes, code) => {
    const ring = new EventRing();
    collector.behaviour = (s, m) => {
      if (m.type !== 'hello') return;
      if (s.index === 0) s.socket.write(bytes);
      else s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
    };
    const l = startLink(ring);
    await waitFor('second session welcomed', () => collector.sessions.length >= 2 && l.connected);
    expect(collector.sessions[0]!.closed).toBe(true);
    expect(logs.some(([, msg]) => msg.includes(code))).toBe(true);
  });

  it('drops the session on a second welcome', async () => {
    const ring = new EventRing();
    collector.behaviour = (s, m) => {
      if (m.type !== 'hello') return;
      s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
      if (s.index === 0) s.send({ type: 'welcome', ack: 0, hostWallMs: Date.now() });
    };
    const l = startLink(ring);
    await waitFor('second session', () => collector.sessions.length >= 2 && l.connected);
    expect(collector.sessions[0]!.closed).toBe(true);
    expect(logs.some(([, msg]) => msg.includes('second welcome'))).toBe(true);
  });
});

describe('Link: commands', () => {
  it('answers commands through onCommand', async () => {
    const ring = new EventRing();
    const seen: unknown[] = [];
    const status = initialStatus(8080);
    const l = startLink(ring, {
      onCommand: async (c): Promise<CommandAnswer> => {
        seen.push(c);
        return { ok: true, status };
      },
    });
    await waitFor('welcome', () => l.connected);
    collector.sessions[0]!.send({ type: 'command', id: 7, op: 'status' });
    await waitFor('result', () => collector.sessions[0]!.of('result').length > 0);
    expect(seen).toEqual([{ type: 'command', id: 7, op: 'status' }]);
    expect(collector.sessions[0]!.of('result')).toEqual([{ type: 'result', id: 7, ok: true, status }]);
    noDecodeErrors();
  });

  it('turns a failing command into ok:false with the error', async () => {
    const ring = new EventRing();
    const l = startLink(ring, {
      onCommand: async () => {
        throw new Error('no can do');
      },
    });
    await waitFor('welcome', () => l.connected);
    collector.sessions[0]!.send({ type: 'command', id: 3, op: 'status' });
    await waitFor('result', () => collector.sessions[0]!.of('result').length > 0);
    expect(collector.sessions[0]!.of('result')).toEqual([{ type: 'result', id: 3, ok: false, error: 'no can do' }]);
  });

  it('answers several commands by id, even out of order', async () => {
    const ring = new EventRing();
    const l = startLink(ring, {
      onCommand: async (c) => {
        await sleep(c.id === 1 ? 60 : 5);
        return { ok: true };
      },
    });
    await waitFor('welcome', () => l.connected);
    collector.sessions[0]!.send({ type: 'command', id: 1, op: 'status' });
    collector.sessions[0]!.send({ type: 'command', id: 2, op: 'status' });
    await waitFor('two results', () => collector.sessions[0]!.of('result').length >= 2);
    expect(collector.sessions[0]!.of('result').map((r) => r.id)).toEqual([2, 1]);
  });
});

describe('Link: stop', () => {
  it('stop() closes the session and stops reconnecting', async () => {
    const ring = new EventRing();
    const l = startLink(ring);
    await waitFor('welcome', () => l.connected);
    l.stop();
    await waitFor('session closed', () => collector.sessions[0]!.closed);
    await sleep(150);
    expect(collector.sessions).toHaveLength(1);
    expect(l.connected).toBe(false);
  });

  it('stop() while the collector is unreachable ends the dial loop', async () => {
    const ring = new EventRing();
    await collector.close();
    const l = startLink(ring);
    await waitFor('a few failed dials', () => logs.length >= 3);
    l.stop();
    await sleep(30);
    const after = logs.length;
    await sleep(150);
    expect(logs.length).toBe(after);
    // A collector that comes back now is not dialled.
    collector = new FakeCollector(collector.path, standard());
    rmSync(collector.path, { force: true });
    await collector.start();
    await sleep(100);
    expect(collector.sessions).toHaveLength(0);
  });
});

describe('Link: fatal dial errors', () => {
  it('retries a fatal error only slowly and says so once; passing errors use the fast backoff', async () => {
    const missing = `unix:${join(dir, 'nobody-here.sock')}`;
    const attempts: string[] = [];
    const l = startLink(new EventRing(), {
      address: missing,
      isFatal: (err) => {
        attempts.push((err as NodeJS.ErrnoException).code ?? '?');
        return true;
      },
    });
    await sleep(300);
    expect(attempts).toEqual(['ENOENT']); // one try, then a 30 s wait
    const said = logs.filter(([, m]) => m.includes('not a passing error'));
    expect(said).toHaveLength(1);
    expect(said[0]![1]).toContain(`retrying every ${FATAL_RETRY_MS / 1000} s`);
    l.stop();

    logs = [];
    const fast = startLink(new EventRing(), { address: missing, isFatal: () => false });
    await waitFor('retries of a passing error', () => logs.filter(([, m]) => m.includes('ENOENT')).length > 3);
    fast.stop();
  });
});
