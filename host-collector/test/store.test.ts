import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_EVENT_DATA_BYTES } from '../src/collector/event-size.js';
import {
  EVENT_OVERHEAD_BYTES,
  GROUP_COMMIT_MS,
  GROUP_COMMIT_ROWS,
  KEEP_DUMPS,
  KEEP_GENERATIONS,
  KEEP_SESSIONS,
  Store,
  type DumpRecord,
  type EventRecord,
  type Retention,
  type SessionRecord,
} from '../src/collector/store.js';

const cleanup: Array<() => void> = [];
afterEach(() => {
  while (cleanup.length) {
    try {
      cleanup.pop()!();
    } catch {
      /* already closed */
    }
  }
});

function tmpDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-store-'));
  cleanup.unshift(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function open(dir: string, retention?: Partial<Retention>): Store {
  const s = new Store(dir, retention);
  cleanup.push(() => s.close());
  return s;
}

function reader(dir: string): Database.Database {
  const db = new Database(path.join(dir, 'vsockdiag.db'), { readonly: true, fileMustExist: true });
  cleanup.push(() => db.close());
  return db;
}

/** An event; unless told, it arrived on the session numbered like its generation. */
function ev(
  sandboxId: string,
  generation: number,
  seq: number | null,
  kind = 'phase',
  data: unknown = { name: `p${seq}` },
  session = generation,
): EventRecord {
  return { sandboxId, generation, session, seq, kind, tGuest: seq === null ? null : seq * 10, tHost: 1_700_000_000_000 + (seq ?? 0), data };
}

/** A row the events table refuses (kind is NOT NULL): what makes a commit fail. */
function broken(sandboxId: string, seq: number): EventRecord {
  return { ...ev(sandboxId, 1, seq), kind: null as unknown as string };
}

/** A session; unless told, numbered like its generation (one session per generation). */
function session(over: Partial<SessionRecord> & Pick<SessionRecord, 'generation'>): SessionRecord {
  return {
    session: over.generation,
    bootOffsetMs: null,
    skewMs: null,
    guestMs: null,
    sandboxId: 'sb1',
    instanceId: 'instance-aaaa',
    probeGeneration: 1,
    probeVersion: '0.1.0',
    bootId: 'boot-1',
    openedMs: Date.now(),
    ...over,
  };
}

const appendAndWait = (s: Store, rows: EventRecord[]) =>
  new Promise<void>((resolve, reject) => s.append(rows, (err) => (err ? reject(err) : resolve())));

/** What a crash of the collector would leave on disk now: its committed state (the database
 *  and its WAL), copied while the store is still open, so nothing a clean close writes. */
function crashImage(dir: string): string {
  const copy = tmpDir();
  for (const name of ['vsockdiag.db', 'vsockdiag.db-wal']) {
    if (fs.existsSync(path.join(dir, name))) fs.copyFileSync(path.join(dir, name), path.join(copy, name));
  }
  return copy;
}

describe('Store.append', () => {
  it('commits on the next turn and calls done only after the commit', async () => {
    const dir = tmpDir();
    const store = open(dir);
    const db = reader(dir);
    const count = () => (db.prepare('SELECT COUNT(*) AS n FROM events').get() as { n: number }).n;

    const seenInCallback = await new Promise<{ n: number; row: unknown }>((resolve, reject) => {
      let called = false;
      store.append([ev('sb1', 1, 1, 'phase', { name: 'hello', nested: { a: [1, 2] } })], (err) => {
        if (err) return reject(err);
        called = true;
        const row = db.prepare('SELECT sandbox_id, generation, seq, kind, t_guest, data FROM events').get();
        resolve({ n: count(), row });
      });
      // Not yet: the commit happens on a later turn, and done has not run.
      expect(called).toBe(false);
      expect(count()).toBe(0);
    });
    expect(seenInCallback.n).toBe(1);
    expect(seenInCallback.row).toEqual({
      sandbox_id: 'sb1',
      generation: 1,
      seq: 1,
      kind: 'phase',
      t_guest: 10,
      data: JSON.stringify({ name: 'hello', nested: { a: [1, 2] } }),
    });
  });

  it('commits everything queued in one turn, then calls every callback', async () => {
    const dir = tmpDir();
    const store = open(dir);
    const db = reader(dir);
    const order: string[] = [];
    await new Promise<void>((resolve) => {
      store.append([ev('a', 1, 1), ev('a', 1, 2)], () => {
        order.push(`a:${(db.prepare('SELECT COUNT(*) AS n FROM events').get() as { n: number }).n}`);
      });
      store.append([ev('b', 1, 1)], () => {
        order.push(`b:${(db.prepare('SELECT COUNT(*) AS n FROM events').get() as { n: number }).n}`);
        resolve();
      });
    });
    // Both callbacks ran after the whole batch (3 rows) was visible.
    expect(order).toEqual(['a:3', 'b:3']);
  });

  it('reports a failed commit to done and stores nothing of the batch', async () => {
    const dir = tmpDir();
    const store = open(dir);
    await appendAndWait(store, [ev('sb1', 1, 1)]);
    const err = await new Promise<Error | null>((resolve) => store.append([ev('sb1', 1, 2), broken('sb1', 3)], resolve));
    expect(err).toBeInstanceOf(Error);
    expect(store.events('sb1', { limit: 10 }).events.map((e) => e.seq)).toEqual([1]);
  });

  it('skips a resent seq, commits the rest of the batch, and counts the resent row once', async () => {
    const dir = tmpDir();
    const store = open(dir, { guestEvents: 10 });
    await appendAndWait(store, [ev('sb1', 1, 1), ev('sb1', 1, 2)]);
    // One group commit: other sandboxes' rows around a resend of sb1's seq 2 (and seq 2 again
    // within the batch), and seq 2 of another session, which is not a resend.
    const done: Array<{ err: Error | null; ids: readonly number[]; seqs: (number | null)[] }> = [];
    const append = (rows: EventRecord[]) =>
      new Promise<void>((resolve) =>
        store.append(rows, (err, ids, stored) => {
          done.push({ err, ids, seqs: stored.map((r) => r.seq) });
          resolve();
        }),
      );
    await Promise.all([
      append([ev('a', 1, 1), ev('a', 1, 2)]),
      append([ev('sb1', 1, 2, 'phase', { name: 'resent' }), ev('sb1', 1, 3), ev('sb1', 1, 3)]),
      append([ev('b', 1, 1)]),
      append([ev('sb1', 2, 2)]),
    ]);
    expect(done.map((d) => d.err)).toEqual([null, null, null, null]);
    // The resent writer is told what was stored now: seq 3 once, under one new id.
    expect(done.map((d) => d.seqs)).toEqual([[1, 2], [3], [1], [2]]);
    expect(done.map((d) => d.ids.length)).toEqual([2, 1, 1, 1]);
    expect(store.events('a', { limit: 10 }).events.map((e) => e.seq)).toEqual([1, 2]);
    expect(store.events('b', { limit: 10 }).events.map((e) => e.seq)).toEqual([1]);
    const sb1 = store.events('sb1', { limit: 10 }).events;
    expect(sb1.map((e) => [e.session, e.seq])).toEqual([
      [1, 1],
      [1, 2],
      [1, 3],
      [2, 2],
    ]);
    expect(sb1[1]!.data).toEqual({ name: 'p2' }); // the first one stored stays
    expect(sb1[2]!.id).toBe(done[1]!.ids[0]);
    // Counted once each: six more fill the bound of ten exactly, and nothing is pruned.
    await appendAndWait(
      store,
      Array.from({ length: 6 }, (_, i) => ev('sb1', 2, i + 3)),
    );
    expect(store.events('sb1', { limit: 100 }).events).toHaveLength(10);
  });

  it('accepts rows without a callback and host events without seq', async () => {
    const dir = tmpDir();
    const store = open(dir);
    store.append([ev('sb1', 1, null, 'state', { state: 'booting' }), ev('sb1', 1, null, 'state', { state: 'ready' })]);
    const rows = store.events('sb1', { limit: 10 }).events;
    expect(rows.map((r) => [r.seq, r.kind, r.tGuest, r.data])).toEqual([
      [null, 'state', null, { state: 'booting' }],
      [null, 'state', null, { state: 'ready' }],
    ]);
  });
});

describe('Store group commit', () => {
  // Only the timers are faked; the checkpointer is kept out (its pass ends in a flush of its
  // own, on the worker's schedule: the checkpointer's tests own that).
  afterEach(() => void vi.useRealTimers());
  function timedStore(): { store: Store; committed: () => number } {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const dir = tmpDir();
    const store = open(dir);
    store.checkpointer.written = () => undefined;
    const db = reader(dir);
    return { store, committed: () => (db.prepare('SELECT COUNT(*) AS n FROM events').get() as { n: number }).n };
  }
  const rows = (n: number, sandboxId = 'sb1', from = 1) => Array.from({ length: n }, (_, i) => ev(sandboxId, 1, from + i));

  it('commits GROUP_COMMIT_MS after the first queued row, everything queued by then in one go', () => {
    const { store, committed } = timedStore();
    const done: number[] = [];
    store.append(rows(2), () => done.push(committed()));
    vi.advanceTimersByTime(GROUP_COMMIT_MS - 10);
    store.append(rows(1, 'sb2'), () => done.push(committed()));
    vi.advanceTimersByTime(9);
    expect(committed()).toBe(0);
    vi.advanceTimersByTime(1);
    expect(done).toEqual([3, 3]);
  });

  it('commits at once when GROUP_COMMIT_ROWS are queued', () => {
    const { store, committed } = timedStore();
    store.append(rows(GROUP_COMMIT_ROWS - 1));
    vi.advanceTimersByTime(1);
    expect(committed()).toBe(0);
    store.append(rows(1, 'sb2'));
    // Not within append itself: writers hear of the commit on a later turn, as always.
    expect(committed()).toBe(0);
    vi.advanceTimersByTime(1);
    expect(committed()).toBe(GROUP_COMMIT_ROWS);
  });

  it('after a read committed the queue, the next rows wait a whole GROUP_COMMIT_MS', () => {
    const { store, committed } = timedStore();
    store.append(rows(1));
    vi.advanceTimersByTime(GROUP_COMMIT_MS / 2);
    store.events('sb1', { limit: 10 });
    expect(committed()).toBe(1);
    // The first rows' timer is gone with them: it does not cut the next rows' wait short.
    store.append(rows(1, 'sb1', 2));
    vi.advanceTimersByTime(GROUP_COMMIT_MS - 1);
    expect(committed()).toBe(1);
    vi.advanceTimersByTime(1);
    expect(committed()).toBe(2);
  });
});

describe('Store.events', () => {
  async function seeded() {
    const store = open(tmpDir());
    await appendAndWait(store, [
      ev('sb1', 1, 1, 'target.found'),
      ev('sb1', 1, 2, 'phase'),
      ev('sb1', 1, 3, 'listener.bound'),
      ev('sb1', 1, null, 'state'),
      ev('sb1', 2, 1, 'phase'),
      ev('sb1', 2, 2, 'target.exit'),
      ev('other', 1, 1, 'phase'),
      ev('sb1', 2, 3, 'targetx'),
    ]);
    return store;
  }

  it("returns a sandbox's events in id order, with their fields", async () => {
    const store = await seeded();
    const all = store.events('sb1', { limit: 100 }).events;
    expect(all.map((e) => e.kind)).toEqual(['target.found', 'phase', 'listener.bound', 'state', 'phase', 'target.exit', 'targetx']);
    expect(all.every((e) => e.sandboxId === 'sb1')).toBe(true);
    const ids = all.map((e) => e.id);
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
    expect(all[0]).toMatchObject({ generation: 1, seq: 1, tGuest: 10, tHost: 1_700_000_000_001, data: { name: 'p1' } });
  });

  it('filters by after', async () => {
    const store = await seeded();
    const all = store.events('sb1', { limit: 100 }).events;
    const after = all[2]!.id;
    expect(store.events('sb1', { after, limit: 100 }).events.map((e) => e.id)).toEqual(all.slice(3).map((e) => e.id));
    expect(store.events('sb1', { after: all[all.length - 1]!.id, limit: 100 }).events).toEqual([]);
  });

  it('filters by exact kind', async () => {
    const store = await seeded();
    expect(store.events('sb1', { kind: 'phase', limit: 100 }).events.map((e) => [e.generation, e.seq])).toEqual([
      [1, 2],
      [2, 1],
    ]);
    expect(store.events('sb1', { kind: 'target', limit: 100 }).events).toEqual([]);
  });

  it('filters by a kind prefix ending with "."', async () => {
    const store = await seeded();
    expect(store.events('sb1', { kind: 'target.', limit: 100 }).events.map((e) => e.kind)).toEqual(['target.found', 'target.exit']);
  });

  it('treats LIKE wildcards in a prefix literally', async () => {
    const store = open(tmpDir());
    await appendAndWait(store, [ev('s', 1, null, 'a_b.c'), ev('s', 1, null, 'axb.c'), ev('s', 1, null, 'a%.d'), ev('s', 1, null, 'aq.d')]);
    expect(store.events('s', { kind: 'a_b.', limit: 10 }).events.map((e) => e.kind)).toEqual(['a_b.c']);
    expect(store.events('s', { kind: 'a%.', limit: 10 }).events.map((e) => e.kind)).toEqual(['a%.d']);
  });

  it('filters by generation', async () => {
    const store = await seeded();
    expect(store.events('sb1', { generation: 2, limit: 100 }).events.map((e) => e.kind)).toEqual(['phase', 'target.exit', 'targetx']);
    expect(store.events('sb1', { generation: 2, kind: 'phase', limit: 100 }).events).toHaveLength(1);
    expect(store.events('sb1', { generation: 9, limit: 100 }).events).toEqual([]);
  });

  it('honours limit (oldest first)', async () => {
    const store = await seeded();
    expect(store.events('sb1', { limit: 2 }).events.map((e) => e.kind)).toEqual(['target.found', 'phase']);
    expect(store.events('sb1', { limit: 1, kind: 'phase', generation: 2 }).events.map((e) => e.seq)).toEqual([1]);
  });

  it('sees events appended in this turn (events() flushes first)', () => {
    const store = open(tmpDir());
    store.append([ev('sb1', 1, 1)]);
    expect(store.events('sb1', { limit: 10 }).events).toHaveLength(1);
  });

  it('lastEventId finds the newest event of a kind', async () => {
    const store = await seeded();
    const phases = store.events('sb1', { kind: 'phase', limit: 100 }).events;
    expect(store.lastEventId('sb1', 'phase')).toBe(phases[phases.length - 1]!.id);
    expect(store.lastEventId('sb1', 'nope')).toBe(0);
    expect(store.lastEventId('missing', 'phase')).toBe(0);
  });
});

describe('Store.ackFloor', () => {
  it('counts only earlier sessions of the same probe instance', async () => {
    const store = open(tmpDir());
    // Session 1 (collector generation 1) of instance A, probe generation 1: seqs 1..5 stored.
    store.openSession(session({ generation: 1, probeGeneration: 1 }));
    await appendAndWait(
      store,
      [1, 2, 3, 4, 5].map((seq) => ev('sb1', 1, seq)),
    );
    store.closeSession('sb1', 1, 'probe closed the connection');

    // The same probe reconnects (its 2nd session): it already has 1..5 stored here.
    store.openSession(session({ generation: 2, probeGeneration: 2 }));
    expect(store.ackFloor('sb1', 'instance-aaaa', 2)).toBe(5);

    // A hello with probe generation 1 again: another timeline of the same memory (a
    // snapshot clone). Those seqs are not its own.
    store.openSession(session({ generation: 3, probeGeneration: 1 }));
    expect(store.ackFloor('sb1', 'instance-aaaa', 1)).toBe(0);

    // Another probe instance knows nothing stored here.
    store.openSession(session({ generation: 4, instanceId: 'instance-bbbb', probeGeneration: 2 }));
    expect(store.ackFloor('sb1', 'instance-bbbb', 2)).toBe(0);

    // And another sandbox with the same instance id neither.
    expect(store.ackFloor('sb2', 'instance-aaaa', 2)).toBe(0);
  });

  it('ignores host events (null seq) and sees events queued but not yet committed', () => {
    const store = open(tmpDir());
    store.openSession(session({ generation: 1, probeGeneration: 1 }));
    store.append([ev('sb1', 1, null, 'session.open'), ev('sb1', 1, 1), ev('sb1', 1, 2)]);
    expect(store.ackFloor('sb1', 'instance-aaaa', 2)).toBe(2);
  });

  it("keeps a closed session's highest seq in its row, even once its events are pruned", async () => {
    const dir = tmpDir();
    const store = open(dir, { guestEvents: 10 });
    store.openSession(session({ generation: 1, probeGeneration: 1 }));
    await appendAndWait(
      store,
      [1, 2, 3, 4, 5].map((seq) => ev('sb1', 1, seq)),
    );
    store.closeSession('sb1', 1, 'probe closed the connection');
    const row = reader(dir).prepare('SELECT max_seq AS maxSeq FROM sessions WHERE sandbox_id = ? AND session = 1').get('sb1');
    expect(row).toEqual({ maxSeq: 5 });
    // A session of another instance fills the sandbox's bound: session 1's events are pruned.
    store.openSession(session({ generation: 2, instanceId: 'instance-bbbb', probeGeneration: 1 }));
    await appendAndWait(
      store,
      Array.from({ length: 12 }, (_, i) => ev('sb1', 2, i + 1)),
    );
    expect(store.events('sb1', { limit: 100 }).events.filter((e) => e.session === 1)).toEqual([]);
    // The first probe comes back: it has 1..5 stored here, pruned or not, and sends none again.
    store.openSession(session({ generation: 3, probeGeneration: 2 }));
    expect(store.ackFloor('sb1', 'instance-aaaa', 2)).toBe(5);
  });

  it('after a crash, reads the highest seq of a session left open from its events', async () => {
    const dir = tmpDir();
    const store = open(dir);
    store.openSession(session({ generation: 1, probeGeneration: 1 }));
    await appendAndWait(store, [ev('sb1', 1, 1), ev('sb1', 1, 2)]);
    store.closeSession('sb1', 1, 'link dropped');
    store.openSession(session({ generation: 2, probeGeneration: 2 }));
    await appendAndWait(store, [ev('sb1', 2, 3), ev('sb1', 2, 4), ev('sb1', 2, null, 'state', { state: 'ready' })]);
    const after = open(crashImage(dir));
    expect(after.ackFloor('sb1', 'instance-aaaa', 3)).toBe(4);
    // And a resend on that session is still known as one.
    await appendAndWait(after, [ev('sb1', 2, 4), ev('sb1', 2, 5)]);
    expect(after.events('sb1', { limit: 100 }).events.flatMap((e) => (e.seq === null ? [] : [e.seq]))).toEqual([1, 2, 3, 4, 5]);
  });

  it('takes the maximum over all earlier sessions', async () => {
    const store = open(tmpDir());
    store.openSession(session({ generation: 1, probeGeneration: 1 }));
    await appendAndWait(store, [ev('sb1', 1, 1), ev('sb1', 1, 2)]);
    store.openSession(session({ generation: 2, probeGeneration: 2 }));
    await appendAndWait(store, [ev('sb1', 2, 3), ev('sb1', 2, 4), ev('sb1', 2, 5), ev('sb1', 2, 6)]);
    store.openSession(session({ generation: 3, probeGeneration: 3 }));
    expect(store.ackFloor('sb1', 'instance-aaaa', 3)).toBe(6);
    expect(store.ackFloor('sb1', 'instance-aaaa', 2)).toBe(2);
  });
});

describe('Store sessions and sandboxes', () => {
  it('records sessions, sets the sandbox generation, and closes a session once', () => {
    const store = open(tmpDir());
    store.saveSandbox({ id: 'sb1', udsPath: '/run/fc/sb1.sock', source: 'api', generation: 0, createdMs: 1 });
    store.openSession(session({ generation: 1 }));
    expect(store.listSandboxes()[0]!.generation).toBe(1);
    store.closeSession('sb1', 1, 'first');
    store.closeSession('sb1', 1, 'second');
    const rows = store.sessions('sb1') as Array<{ generation: number; closeReason: string | null; closedMs: number | null }>;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ generation: 1, instanceId: 'instance-aaaa', probeGeneration: 1, closeReason: 'first' });
    expect(rows[0]!.closedMs).toEqual(expect.any(Number));
  });

  it('keeps the newest KEEP_SESSIONS sessions and KEEP_GENERATIONS generations of a guest that reconnects without end', async () => {
    const store = open(tmpDir());
    store.saveSandbox({ id: 'sb1', udsPath: '/run/fc/sb1.sock', source: 'api', generation: 0, createdMs: 1 });
    const total = KEEP_SESSIONS + 200;
    // Every connection a new boot (a new life), each with one event: the probe's seqs rise.
    for (let n = 1; n <= total; n++) {
      const g = {
        generation: n,
        cause: 'boot' as const,
        detail: `boot ${n}`,
        openedMs: n,
        instanceId: `i${n}`,
        fromSeq: 0,
        afterGuestMs: null,
      };
      store.openSession(session({ session: n, generation: n, instanceId: `i${n}`, bootId: `b${n}` }), g);
      store.append([ev('sb1', n, 1, 'phase', {}, n)]);
      store.closeSession('sb1', n, 'probe went away');
    }
    const rows = store.sessions('sb1') as Array<{ session: number }>;
    expect(rows.map((r) => r.session)).toEqual(Array.from({ length: KEEP_SESSIONS }, (_, i) => total - KEEP_SESSIONS + 1 + i));
    const db = (store as unknown as { db: Database.Database }).db;
    expect(db.prepare("SELECT MIN(generation) AS lo, COUNT(*) AS n FROM generations WHERE sandbox_id = 'sb1'").get()).toEqual({
      lo: total - KEEP_GENERATIONS + 1,
      n: KEEP_GENERATIONS,
    });
    // What reads it is as before: the newest session and lives, and the floor of a kept session.
    const life = store.lifeState('sb1');
    expect([life.generation, life.session, life.generations.length]).toEqual([total, total, KEEP_GENERATIONS]);
    expect(life.last).toMatchObject({ instanceId: `i${total}`, bootId: `b${total}` });
    expect(store.ackFloor('sb1', `i${total}`, 2)).toBe(1);
    // The events are the retention's to bound, not this.
    expect(store.events('sb1', { limit: 10_000 }).events).toHaveLength(total);
  });

  it('upserts a sandbox (moving its path keeps its generation)', () => {
    const store = open(tmpDir());
    store.saveSandbox({ id: 'b', udsPath: '/b', source: 'api', generation: 0, createdMs: 1 });
    store.saveSandbox({ id: 'a', udsPath: '/a', source: 'discover', generation: 0, createdMs: 2 });
    store.openSession(session({ sandboxId: 'a', generation: 3 }));
    store.saveSandbox({ id: 'a', udsPath: '/a2', source: 'api', generation: 0, createdMs: 3 });
    expect(store.listSandboxes()).toEqual([
      { id: 'a', udsPath: '/a2', source: 'api', generation: 3, createdMs: 2 },
      { id: 'b', udsPath: '/b', source: 'api', generation: 0, createdMs: 1 },
    ]);
  });

  it('deleteSandbox removes the sandbox, its sessions and its events, and nothing else', async () => {
    const store = open(tmpDir());
    for (const id of ['sb1', 'sb2']) {
      store.saveSandbox({ id, udsPath: `/run/${id}`, source: 'api', generation: 0, createdMs: 1 });
      store.openSession(session({ sandboxId: id, generation: 1 }));
    }
    await appendAndWait(store, [ev('sb1', 1, 1), ev('sb1', 1, 2), ev('sb2', 1, 1)]);
    // A row still queued when the sandbox is deleted is flushed first, then deleted too.
    store.append([ev('sb1', 1, 3)]);
    store.deleteSandbox('sb1');
    expect(store.listSandboxes().map((s) => s.id)).toEqual(['sb2']);
    expect(store.sessions('sb1')).toEqual([]);
    expect(store.events('sb1', { limit: 100 }).events).toEqual([]);
    expect(store.sessions('sb2')).toHaveLength(1);
    expect(store.events('sb2', { limit: 100 }).events).toHaveLength(1);
    expect(store.ackFloor('sb1', 'instance-aaaa', 2)).toBe(0);
  });
});

/** What the database holds for one sandbox, by origin: events and bytes as the quota counts them. */
function held(dir: string, sandboxId: string) {
  const db = reader(dir);
  const q = (origin: string) =>
    db
      .prepare(
        `SELECT COUNT(*) AS events, COALESCE(SUM(bytes + ${EVENT_OVERHEAD_BYTES}), 0) AS bytes FROM events WHERE sandbox_id = ? AND seq IS ${origin}`,
      )
      .get(sandboxId) as { events: number; bytes: number };
  const out = { guest: q('NOT NULL'), collector: q('NULL') };
  db.close();
  return out;
}

/** Collector events a session leaves (state changes, session edges, a dump record). */
function collectorEvents(sandboxId: string, n: number): EventRecord[] {
  return Array.from({ length: n }, (_, i) => ev(sandboxId, 1, null, i % 2 ? 'state' : 'dump', { n: i }));
}

const KiB = 1024;
const MiB = 1024 * KiB;

describe('Store retention', () => {
  it('keeps the newest probe events by count, pruned back to 90% when over', async () => {
    const dir = tmpDir();
    const store = open(dir, { guestEvents: 10 });
    await appendAndWait(
      store,
      Array.from({ length: 10 }, (_, i) => ev('sb1', 1, i + 1)),
    );
    expect(store.events('sb1', { limit: 100 }).events).toHaveLength(10);
    await appendAndWait(store, [ev('sb1', 1, 11), ev('sb2', 1, 1)]);
    expect(store.events('sb1', { limit: 100 }).events.map((e) => e.seq)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(store.events('sb2', { limit: 100 }).events).toHaveLength(1);
  });

  it('a flood of tiny probe events never erases the collector events', async () => {
    // The attack: 21,504 tiny events (84 full batches) against the default bounds. Before
    // this, pruning kept the newest 20,000 of any kind: 44 state events became 1, dumps 0.
    const dir = tmpDir();
    const store = open(dir);
    await appendAndWait(store, collectorEvents('sb1', 44));
    let seq = 0;
    for (let b = 0; b < 84; b++) {
      await appendAndWait(
        store,
        Array.from({ length: 256 }, () => ev('sb1', 1, ++seq, 'phase', { n: seq })),
      );
    }
    const h = held(dir, 'sb1');
    expect(h.collector.events).toBe(44);
    expect(h.guest.events).toBeLessThanOrEqual(20_000);
    expect(h.guest.events).toBeGreaterThanOrEqual(18_000);
    expect(store.events('sb1', { kind: 'dump', limit: 100 }).events).toHaveLength(22);
    expect(store.events('sb1', { kind: 'state', limit: 100 }).events).toHaveLength(22);
    // The newest probe events are the ones kept.
    expect(store.events('sb1', { order: 'desc', kind: 'phase', limit: 1 }).events[0]!.seq).toBe(seq);
  });

  it('bounds collector events by their own count, without touching probe events', async () => {
    const dir = tmpDir();
    const store = open(dir, { collectorEvents: 10 });
    await appendAndWait(store, [ev('sb1', 1, 1), ev('sb1', 1, 2)]);
    await appendAndWait(store, collectorEvents('sb1', 11));
    const h = held(dir, 'sb1');
    expect(h.collector.events).toBe(9);
    expect(h.guest.events).toBe(2);
    // The oldest two went.
    expect(store.events('sb1', { kind: 'dump', limit: 100 }).events.map((e) => (e.data as { n: number }).n)).toEqual([2, 4, 6, 8, 10]);
  });

  it('big probe events hit the byte quota: the oldest are pruned by bytes, collector events stay', async () => {
    const dir = tmpDir();
    const store = open(dir, { sandboxBytes: 4 * MiB });
    await appendAndWait(store, collectorEvents('sb1', 5));
    const big = 'x'.repeat(100 * KiB);
    let seq = 0;
    // 20 MB in 200 events, each well within the event cap: only the byte quota can stop it.
    for (let b = 0; b < 20; b++) {
      await appendAndWait(
        store,
        Array.from({ length: 10 }, () => ev('sb1', 1, ++seq, 'log.lines', { stream: 'stderr', lines: [big] })),
      );
      const h = held(dir, 'sb1');
      expect(h.guest.bytes + h.collector.bytes).toBeLessThanOrEqual(4 * MiB);
    }
    const h = held(dir, 'sb1');
    expect(h.collector.events).toBe(5);
    expect(h.guest.bytes + h.collector.bytes).toBeGreaterThan(3 * MiB);
    const kept = store.events('sb1', { kind: 'log.lines', limit: 1000 }).events.map((e) => e.seq!);
    // Oldest first out: what is left is the newest, without holes.
    expect(kept[kept.length - 1]).toBe(seq);
    expect(kept).toEqual(Array.from({ length: kept.length }, (_, i) => seq - kept.length + 1 + i));
  });

  it('holds collector events to their share of the byte quota', async () => {
    const dir = tmpDir();
    const store = open(dir, { sandboxBytes: 8 * MiB }); // share: 1 MiB
    await appendAndWait(store, [ev('sb1', 1, 1)]);
    const reason = 'r'.repeat(100 * KiB);
    await appendAndWait(
      store,
      Array.from({ length: 15 }, (_, i) => ev('sb1', 1, null, 'state', { i, reason })),
    );
    const h = held(dir, 'sb1');
    expect(h.collector.bytes).toBeLessThanOrEqual(1 * MiB);
    expect(h.collector.events).toBeGreaterThan(5);
    expect(h.guest.events).toBe(1);
  });

  it('keeps the total under its cap by cutting the largest sandboxes first', async () => {
    const dir = tmpDir();
    const store = open(dir, { totalBytes: 3 * MiB });
    const small = Array.from({ length: 20 }, (_, i) => ev('small', 1, i + 1, 'log.lines', { lines: ['s'.repeat(10 * KiB)] }));
    await appendAndWait(store, small);
    const big = 'x'.repeat(100 * KiB);
    let seq = 0;
    for (let b = 0; b < 10; b++) {
      await appendAndWait(
        store,
        Array.from({ length: 10 }, () => ev('flood', 1, ++seq, 'log.lines', { lines: [big] })),
      );
    }
    const f = held(dir, 'flood');
    const s = held(dir, 'small');
    expect(f.guest.bytes + f.collector.bytes + s.guest.bytes + s.collector.bytes).toBeLessThanOrEqual(3 * MiB);
    expect(s.guest.events).toBe(20);
    expect(f.guest.events).toBeGreaterThan(10);
  });

  it('remembers what each sandbox holds across a restart, and applies lowered bounds at open', async () => {
    const dir = tmpDir();
    const first = new Store(dir);
    await appendAndWait(
      first,
      Array.from({ length: 30 }, (_, i) => ev('sb1', 1, i + 1, 'log.lines', { lines: ['y'.repeat(50 * KiB)] })),
    );
    await appendAndWait(first, collectorEvents('sb1', 3));
    first.close();
    // 1.5 MB held; reopened with a 1 MiB quota, it is cut before any new event arrives.
    const second = open(dir, { sandboxBytes: 1 * MiB });
    const h = held(dir, 'sb1');
    expect(h.guest.bytes + h.collector.bytes).toBeLessThanOrEqual(1 * MiB);
    expect(h.collector.events).toBe(3);
    expect(second.events('sb1', { order: 'desc', limit: 1, kind: 'log.lines' }).events[0]!.seq).toBe(30);
  });

  it('after a crash, counts again what was stored since the usage rows were written', async () => {
    const dir = tmpDir();
    const store = open(dir, { guestEvents: 10 });
    // The first commit writes sb1's row; the next ones, a moment later, only count in memory.
    await appendAndWait(
      store,
      [1, 2, 3, 4].map((seq) => ev('sb1', 1, seq)),
    );
    await appendAndWait(
      store,
      [5, 6, 7, 8].map((seq) => ev('sb1', 1, seq)),
    );
    const copy = crashImage(dir);
    const after = open(copy, { guestEvents: 10 });
    // Eight held, eight counted: within the bound, nothing pruned at open...
    expect(held(copy, 'sb1').guest.events).toBe(8);
    // ...and three more take it past ten: pruned back to nine.
    await appendAndWait(
      after,
      [9, 10, 11].map((seq) => ev('sb1', 1, seq)),
    );
    expect(after.events('sb1', { limit: 100 }).events.map((e) => e.seq)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11]);
  });

  it('writes a usage row USAGE_SAVE_MS after it fell behind, each at its own moment', async () => {
    // performance.now() alone is faked: the group commit's timer still runs.
    vi.useFakeTimers({ toFake: ['performance'] });
    cleanup.push(() => vi.useRealTimers());
    const dir = tmpDir();
    const store = open(dir);
    const db = reader(dir);
    const behind = () =>
      (
        db
          .prepare(
            `SELECT sandbox_id AS id FROM event_usage u
             WHERE through_id < (SELECT MAX(id) FROM events e WHERE e.sandbox_id = u.sandbox_id) ORDER BY sandbox_id`,
          )
          .all() as Array<{ id: string }>
      ).map((r) => r.id);
    // First events write their rows at once; the next ones leave them behind, a second apart.
    await appendAndWait(store, [ev('a', 1, 1), ev('b', 1, 1), ev('c', 1, 1)]);
    expect(behind()).toEqual([]);
    await appendAndWait(store, [ev('a', 1, 2)]);
    vi.advanceTimersByTime(1000);
    await appendAndWait(store, [ev('b', 1, 2), ev('c', 1, 2)]);
    expect(behind()).toEqual(['a', 'b', 'c']);
    // More events do not move a row's turn: it has been behind since the first of them.
    vi.advanceTimersByTime(8_999);
    await appendAndWait(store, [ev('a', 1, 3)]);
    expect(behind()).toEqual(['a', 'b', 'c']);
    vi.advanceTimersByTime(1);
    await appendAndWait(store, [ev('new', 1, 1)]);
    expect(behind()).toEqual(['b', 'c']);
    vi.advanceTimersByTime(1000);
    await appendAndWait(store, [ev('new', 1, 2)]);
    expect(behind()).toEqual(['new']);
  });

  it('counts nothing of a commit that failed', async () => {
    const dir = tmpDir();
    const store = open(dir, { guestEvents: 10 });
    await appendAndWait(
      store,
      Array.from({ length: 9 }, (_, i) => ev('sb1', 1, i + 1)),
    );
    // A broken row fails the whole batch: its five rows were never stored...
    const err = await new Promise<Error | null>((resolve) =>
      store.append([ev('sb1', 1, 10), ev('sb1', 1, 11), ev('sb1', 1, 12), ev('sb1', 1, 13), broken('sb1', 14)], resolve),
    );
    expect(err).toBeInstanceOf(Error);
    // ...so one more is the tenth, within the bound: nothing is pruned.
    await appendAndWait(store, [ev('sb1', 1, 10)]);
    expect(store.events('sb1', { limit: 100 }).events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  it('drops the usage of a deleted sandbox', async () => {
    const dir = tmpDir();
    const store = open(dir, { totalBytes: 2 * MiB });
    const rows = (id: string, n: number) =>
      Array.from({ length: n }, (_, i) => ev(id, 1, i + 1, 'log.lines', { lines: ['z'.repeat(100 * KiB)] }));
    await appendAndWait(store, rows('gone', 15));
    store.deleteSandbox('gone');
    // 1.5 MB in a new sandbox fits the 2 MiB total once the deleted one no longer counts.
    await appendAndWait(store, rows('new', 15));
    expect(held(dir, 'new').guest.events).toBe(15);
  });

  it('gives the events of a database from before byte quotas their size', async () => {
    const dir = tmpDir();
    const old = new Database(path.join(dir, 'vsockdiag.db'));
    old.exec(`CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, sandbox_id TEXT NOT NULL, generation INTEGER NOT NULL,
      seq INTEGER, kind TEXT NOT NULL, t_guest REAL, t_host INTEGER NOT NULL, data TEXT NOT NULL)`);
    const insert = old.prepare(
      'INSERT INTO events (sandbox_id, generation, seq, kind, t_guest, t_host, data) VALUES (?, 1, ?, ?, 0, 0, ?)',
    );
    for (let i = 1; i <= 20; i++) insert.run('sb1', i, 'log.lines', JSON.stringify({ lines: ['o'.repeat(100 * KiB)] }));
    insert.run('sb1', null, 'state', JSON.stringify({ state: 'ready' }));
    old.close();
    const store = open(dir, { sandboxBytes: 1 * MiB });
    const h = held(dir, 'sb1');
    expect(h.guest.bytes).toBeGreaterThan(500 * KiB);
    expect(h.guest.bytes + h.collector.bytes).toBeLessThanOrEqual(1 * MiB);
    expect(h.collector.events).toBe(1);
    expect(store.events('sb1', { order: 'desc', limit: 1 }).events[0]!.kind).toBe('state');
  });
});

describe('a database from before generations meant lives', () => {
  it('turns its generations into sessions and counts the generations again from the boot ids', () => {
    const dir = tmpDir();
    const old = new Database(path.join(dir, 'vsockdiag.db'));
    old.exec(`
      CREATE TABLE sandboxes (id TEXT PRIMARY KEY, uds_path TEXT NOT NULL, source TEXT NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL);
      CREATE TABLE sessions (sandbox_id TEXT NOT NULL, generation INTEGER NOT NULL, instance_id TEXT NOT NULL,
        probe_generation INTEGER NOT NULL, probe_version TEXT NOT NULL, boot_id TEXT NOT NULL, opened_ms INTEGER NOT NULL,
        closed_ms INTEGER, close_reason TEXT, PRIMARY KEY (sandbox_id, generation));
      CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, sandbox_id TEXT NOT NULL, generation INTEGER NOT NULL,
        seq INTEGER, kind TEXT NOT NULL, t_guest REAL, t_host INTEGER NOT NULL, data TEXT NOT NULL, bytes INTEGER NOT NULL);
      CREATE UNIQUE INDEX events_by_seq ON events (sandbox_id, generation, seq) WHERE seq IS NOT NULL;
      CREATE TABLE dumps (id INTEGER PRIMARY KEY AUTOINCREMENT, sandbox_id TEXT NOT NULL, generation INTEGER NOT NULL,
        mode TEXT NOT NULL, source TEXT NOT NULL, trigger TEXT NOT NULL, complete INTEGER NOT NULL, error TEXT, note TEXT,
        pid INTEGER, created_ms INTEGER NOT NULL, bytes INTEGER NOT NULL, text BLOB NOT NULL, analysis TEXT NOT NULL, paused_ms REAL);
      INSERT INTO sandboxes VALUES ('sb1', '/run/sb1', 'api', 3, 1);
      -- Sessions 1 and 2 of boot A (a collector upgrade between them), 3 of boot B.
      INSERT INTO sessions VALUES ('sb1', 1, 'inst-a', 1, '0.1.0', 'boot-a', 10, 20, 'collector stopped');
      INSERT INTO sessions VALUES ('sb1', 2, 'inst-a', 2, '0.1.0', 'boot-a', 30, 40, 'probe closed');
      INSERT INTO sessions VALUES ('sb1', 3, 'inst-b', 1, '0.1.0', 'boot-b', 50, NULL, NULL);
      INSERT INTO events (sandbox_id, generation, seq, kind, t_host, data, bytes) VALUES
        ('sb1', 0, NULL, 'state', 1, '{}', 2), ('sb1', 1, 1, 'phase', 11, '{}', 2), ('sb1', 2, 2, 'phase', 31, '{}', 2),
        ('sb1', 3, 1, 'phase', 51, '{}', 2), ('sb1', 3, NULL, 'state', 52, '{}', 2);
      INSERT INTO dumps (sandbox_id, generation, mode, source, trigger, complete, created_ms, bytes, text, analysis)
        VALUES ('sb1', 2, 'threads', 'proc', 'api', 1, 32, 0, x'', 'null');
    `);
    old.close();
    const store = open(dir);
    expect(store.sessions('sb1')).toEqual([
      expect.objectContaining({ session: 1, generation: 1, instanceId: 'inst-a', closeReason: 'collector stopped' }),
      expect.objectContaining({ session: 2, generation: 1, instanceId: 'inst-a' }),
      expect.objectContaining({ session: 3, generation: 2, instanceId: 'inst-b' }),
    ]);
    expect(store.events('sb1', { limit: 10 }).events.map((e) => [e.kind, e.seq, e.generation, e.session])).toEqual([
      ['state', null, 0, 0],
      ['phase', 1, 1, 1],
      ['phase', 2, 1, 2],
      ['phase', 1, 2, 3],
      ['state', null, 2, 3],
    ]);
    expect(store.listDumps('sb1', (d) => d.generation)).toEqual([1]);
    const life = store.lifeState('sb1');
    expect([life.generation, life.session]).toEqual([2, 3]);
    expect(life.generations.map((g) => [g.generation, g.cause, g.instanceId])).toEqual([
      [1, 'first', 'inst-a'],
      [2, 'boot', 'inst-b'],
    ]);
    expect(life.last).toMatchObject({ instanceId: 'inst-b', bootId: 'boot-b' });
    // The ack floor follows sessions: instance a's second session already has seq 1 stored.
    expect(store.ackFloor('sb1', 'inst-a', 3)).toBe(2);
  });
});

describe('event size cap', () => {
  it('stores an oversize event cut, saying what was lost, and the caller sees the same', async () => {
    const dir = tmpDir();
    const store = open(dir);
    const lines = Array.from({ length: 200 }, (_, i) => `${i}:`.padEnd(2048, '\u0001')); // escapes to ~12 KB a line
    const row = ev('sb1', 1, 1, 'log.lines', { stream: 'stderr', lines, dropped: 3 });
    const notice0 = { level: 'warn', message: 'm'.repeat(MAX_EVENT_DATA_BYTES) };
    await appendAndWait(store, [row, ev('sb1', 1, 2, 'probe.notice', notice0)]);
    const [logs, notice] = store.events('sb1', { limit: 10 }).events as Array<{ data: Record<string, any> }>;
    // The leading lines that fit are kept, in order; the note says how many there were.
    expect(logs!.data.stream).toBe('stderr');
    expect(logs!.data.dropped).toBe(3);
    expect(logs!.data.lines.length).toBeGreaterThan(10);
    expect(logs!.data.lines.length).toBeLessThan(200);
    expect(logs!.data.lines).toEqual(lines.slice(0, logs!.data.lines.length));
    expect(logs!.data.truncated).toEqual({ bytes: expect.any(Number), limit: MAX_EVENT_DATA_BYTES, cut: { lines: 200 } });
    expect(logs!.data.truncated.bytes).toBeGreaterThan(2 * MiB);
    // A field that cannot be cut is left out, and named.
    expect(notice!.data).toEqual({
      level: 'warn',
      truncated: { bytes: Buffer.byteLength(JSON.stringify(notice0)), limit: MAX_EVENT_DATA_BYTES, omitted: ['message'] },
    });
    // The row handed in now holds what was stored (the live stream shows the same).
    expect(row.data).toEqual(logs!.data);
    const db = reader(dir);
    const sizes = db.prepare('SELECT bytes, length(CAST(data AS BLOB)) AS actual FROM events').all() as Array<{
      bytes: number;
      actual: number;
    }>;
    for (const s of sizes) {
      expect(s.bytes).toBe(s.actual);
      expect(s.bytes).toBeLessThanOrEqual(MAX_EVENT_DATA_BYTES);
    }
  });

  it('leaves events within the cap as they are', async () => {
    const store = open(tmpDir());
    const data = { stream: 'stdout', lines: Array.from({ length: 200 }, () => 'l'.repeat(2048)) };
    await appendAndWait(store, [ev('sb1', 1, 1, 'log.lines', data)]);
    expect(store.events('sb1', { limit: 1 }).events[0]!.data).toEqual(data);
  });
});

describe('Store.events by bytes', () => {
  it('stops a page at maxBytes, says there is more, and paging either way returns everything', async () => {
    const store = open(tmpDir());
    const payload = 'p'.repeat(100 * KiB);
    await appendAndWait(
      store,
      Array.from({ length: 25 }, (_, i) => ev('sb1', 1, i + 1, 'log.lines', { lines: [payload] })),
    );
    const all: number[] = [];
    for (let after = 0; ; ) {
      const page = store.events('sb1', { after, limit: 1000, maxBytes: 1 * MiB });
      expect(page.events.length).toBeLessThanOrEqual(10);
      all.push(...page.events.map((e) => e.seq!));
      if (!page.more) break;
      after = page.events[page.events.length - 1]!.id;
    }
    expect(all).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    const back: number[] = [];
    for (let before: number | undefined; ; ) {
      const page = store.events('sb1', { limit: 1000, maxBytes: 1 * MiB, order: 'desc', ...(before ? { before } : {}) });
      back.push(...page.events.map((e) => e.seq!));
      if (!page.more) break;
      before = page.events[page.events.length - 1]!.id;
    }
    expect(back).toEqual([...all].reverse());
  });

  it('returns the first event whatever its size, and says more only when there is more', async () => {
    const store = open(tmpDir());
    await appendAndWait(store, [ev('sb1', 1, 1, 'log.lines', { lines: ['q'.repeat(200 * KiB)] }), ev('sb1', 1, 2)]);
    const first = store.events('sb1', { limit: 10, maxBytes: 1000 });
    expect(first.events.map((e) => e.seq)).toEqual([1]);
    expect(first.more).toBe(true);
    expect(store.events('sb1', { limit: 2 }).more).toBe(false);
    expect(store.events('sb1', { limit: 1 }).more).toBe(true);
    expect(store.events('sb1', { after: first.events[0]!.id, limit: 1, maxBytes: 1000 })).toMatchObject({
      more: false,
      events: [{ seq: 2 }],
    });
  });
});

describe('Store dumps retention', () => {
  function dump(trigger: 'api' | 'auto', n: number): DumpRecord {
    return {
      sandboxId: 'sb1',
      generation: n,
      mode: 'threads',
      source: 'proc',
      trigger,
      complete: true,
      error: null,
      note: null,
      pid: 42,
      createdMs: n,
      gz: zlib.gzipSync(`dump ${n}`),
      bytes: `dump ${n}`.length,
      analysis: { kind: 'unknown' },
    };
  }

  it('a storm of automatic dumps never pushes out the ones an operator asked for', () => {
    const store = open(tmpDir());
    const api = [1, 2, 3].map((n) => store.saveDump(dump('api', n)));
    // Each reconnect of a hanging guest was a new episode, hence a new automatic dump.
    for (let n = 10; n < 10 + 3 * KEEP_DUMPS.auto; n++) store.saveDump(dump('auto', n));
    const listed = store.listDumps('sb1', (d) => ({ id: d.id, trigger: d.trigger, generation: d.generation }));
    expect(listed.filter((d) => d.trigger === 'api').map((d) => d.id)).toEqual([...api].reverse());
    const autos = listed.filter((d) => d.trigger === 'auto');
    expect(autos).toHaveLength(KEEP_DUMPS.auto);
    expect(autos[0]!.generation).toBe(10 + 3 * KEEP_DUMPS.auto - 1);
    expect(zlib.gunzipSync(store.getDump('sb1', api[0]!)!.gz).toString()).toBe('dump 1');
  });

  it('keeps the newest KEEP_DUMPS.api operator dumps', () => {
    const store = open(tmpDir());
    for (let n = 1; n <= KEEP_DUMPS.api + 5; n++) store.saveDump(dump('api', n));
    store.saveDump(dump('auto', 999));
    const listed = store.listDumps('sb1', (d) => d.generation);
    expect(listed).toHaveLength(KEEP_DUMPS.api + 1);
    expect(listed[0]).toBe(999);
    expect(listed[listed.length - 1]).toBe(6);
  });
});

describe('Store persistence', () => {
  it('keeps sandboxes, sessions and events across close and reopen', async () => {
    const dir = tmpDir();
    const first = new Store(dir);
    first.saveSandbox({ id: 'sb1', udsPath: '/run/fc/sb1.sock', source: 'api', generation: 0, createdMs: 5 });
    first.openSession(session({ generation: 1 }));
    await appendAndWait(first, [ev('sb1', 1, 1), ev('sb1', 1, 2)]);
    // queued and closed before the next turn: close() commits it and calls back
    let doneErr: Error | null | undefined;
    first.append([ev('sb1', 1, 3)], (err) => {
      doneErr = err;
    });
    first.close();
    expect(doneErr).toBeNull();

    const second = open(dir);
    expect(second.listSandboxes()).toEqual([{ id: 'sb1', udsPath: '/run/fc/sb1.sock', source: 'api', generation: 1, createdMs: 5 }]);
    expect(second.events('sb1', { limit: 10 }).events.map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(second.sessions('sb1')).toHaveLength(1);
    expect(second.ackFloor('sb1', 'instance-aaaa', 2)).toBe(3);
  });

  it('creates the data directory and uses WAL', () => {
    const dir = path.join(tmpDir(), 'nested', 'data');
    const store = open(dir);
    store.saveSandbox({ id: 'x', udsPath: '/x', source: 'api', generation: 0, createdMs: 0 });
    expect(fs.existsSync(path.join(dir, 'vsockdiag.db'))).toBe(true);
    const db = reader(dir);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
  });
});
