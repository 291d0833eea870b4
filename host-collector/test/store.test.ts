import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Store, type EventRecord, type SessionRecord } from '../src/collector/store.js';

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

function open(dir: string): Store {
  const s = new Store(dir);
  cleanup.push(() => s.close());
  return s;
}

function reader(dir: string): Database.Database {
  const db = new Database(path.join(dir, 'vsockdiag.db'), { readonly: true, fileMustExist: true });
  cleanup.push(() => db.close());
  return db;
}

function ev(sandboxId: string, generation: number, seq: number | null, kind = 'phase', data: unknown = { name: `p${seq}` }): EventRecord {
  return { sandboxId, generation, seq, kind, tGuest: seq === null ? null : seq * 10, tHost: 1_700_000_000_000 + (seq ?? 0), data };
}

function session(over: Partial<SessionRecord> & Pick<SessionRecord, 'generation'>): SessionRecord {
  return {
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
    // Same (sandbox, generation, seq) again violates the unique index.
    const err = await new Promise<Error | null>((resolve) => store.append([ev('sb1', 1, 2), ev('sb1', 1, 1)], resolve));
    expect(err).toBeInstanceOf(Error);
    expect(store.events('sb1', { limit: 10 }).map((e) => e.seq)).toEqual([1]);
  });

  it('accepts rows without a callback and host events without seq', async () => {
    const dir = tmpDir();
    const store = open(dir);
    store.append([ev('sb1', 1, null, 'state', { state: 'booting' }), ev('sb1', 1, null, 'state', { state: 'ready' })]);
    const rows = store.events('sb1', { limit: 10 });
    expect(rows.map((r) => [r.seq, r.kind, r.tGuest, r.data])).toEqual([
      [null, 'state', null, { state: 'booting' }],
      [null, 'state', null, { state: 'ready' }],
    ]);
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

  it('returns a sandbox\'s events in id order, with their fields', async () => {
    const store = await seeded();
    const all = store.events('sb1', { limit: 100 });
    expect(all.map((e) => e.kind)).toEqual(['target.found', 'phase', 'listener.bound', 'state', 'phase', 'target.exit', 'targetx']);
    expect(all.every((e) => e.sandboxId === 'sb1')).toBe(true);
    const ids = all.map((e) => e.id);
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
    expect(all[0]).toMatchObject({ generation: 1, seq: 1, tGuest: 10, tHost: 1_700_000_000_001, data: { name: 'p1' } });
  });

  it('filters by after', async () => {
    const store = await seeded();
    const all = store.events('sb1', { limit: 100 });
    const after = all[2]!.id;
    expect(store.events('sb1', { after, limit: 100 }).map((e) => e.id)).toEqual(all.slice(3).map((e) => e.id));
    expect(store.events('sb1', { after: all[all.length - 1]!.id, limit: 100 })).toEqual([]);
  });

  it('filters by exact kind', async () => {
    const store = await seeded();
    expect(store.events('sb1', { kind: 'phase', limit: 100 }).map((e) => [e.generation, e.seq])).toEqual([
      [1, 2],
      [2, 1],
    ]);
    expect(store.events('sb1', { kind: 'target', limit: 100 })).toEqual([]);
  });

  it('filters by a kind prefix ending with "."', async () => {
    const store = await seeded();
    expect(store.events('sb1', { kind: 'target.', limit: 100 }).map((e) => e.kind)).toEqual(['target.found', 'target.exit']);
  });

  it('treats LIKE wildcards in a prefix literally', async () => {
    const store = open(tmpDir());
    await appendAndWait(store, [ev('s', 1, null, 'a_b.c'), ev('s', 1, null, 'axb.c'), ev('s', 1, null, 'a%.d'), ev('s', 1, null, 'aq.d')]);
    expect(store.events('s', { kind: 'a_b.', limit: 10 }).map((e) => e.kind)).toEqual(['a_b.c']);
    expect(store.events('s', { kind: 'a%.', limit: 10 }).map((e) => e.kind)).toEqual(['a%.d']);
  });

  it('filters by generation', async () => {
    const store = await seeded();
    expect(store.events('sb1', { generation: 2, limit: 100 }).map((e) => e.kind)).toEqual(['phase', 'target.exit', 'targetx']);
    expect(store.events('sb1', { generation: 2, kind: 'phase', limit: 100 })).toHaveLength(1);
    expect(store.events('sb1', { generation: 9, limit: 100 })).toEqual([]);
  });

  it('honours limit (oldest first)', async () => {
    const store = await seeded();
    expect(store.events('sb1', { limit: 2 }).map((e) => e.kind)).toEqual(['target.found', 'phase']);
    expect(store.events('sb1', { limit: 1, kind: 'phase', generation: 2 }).map((e) => e.seq)).toEqual([1]);
  });

  it('sees events appended in this turn (events() flushes first)', () => {
    const store = open(tmpDir());
    store.append([ev('sb1', 1, 1)]);
    expect(store.events('sb1', { limit: 10 })).toHaveLength(1);
  });

  it('lastEventId finds the newest event of a kind', async () => {
    const store = await seeded();
    const phases = store.events('sb1', { kind: 'phase', limit: 100 });
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
    await appendAndWait(store, [1, 2, 3, 4, 5].map((seq) => ev('sb1', 1, seq)));
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
    expect(store.events('sb1', { limit: 100 })).toEqual([]);
    expect(store.sessions('sb2')).toHaveLength(1);
    expect(store.events('sb2', { limit: 100 })).toHaveLength(1);
    expect(store.ackFloor('sb1', 'instance-aaaa', 2)).toBe(0);
  });
});

describe('Store.prune', () => {
  it('keeps the newest `keep` events of one sandbox', async () => {
    const store = open(tmpDir());
    await appendAndWait(store, [...Array.from({ length: 10 }, (_, i) => ev('sb1', 1, i + 1)), ev('sb2', 1, 1), ev('sb2', 1, 2)]);
    expect(store.prune('sb1', 3)).toBe(7);
    expect(store.events('sb1', { limit: 100 }).map((e) => e.seq)).toEqual([8, 9, 10]);
    expect(store.events('sb2', { limit: 100 })).toHaveLength(2);
    // nothing more to prune
    expect(store.prune('sb1', 3)).toBe(0);
    expect(store.prune('sb1', 100)).toBe(0);
    expect(store.prune('missing', 1)).toBe(0);
  });

  it('prunes rows queued in this turn too', () => {
    const store = open(tmpDir());
    store.append(Array.from({ length: 5 }, (_, i) => ev('sb1', 1, i + 1)));
    expect(store.prune('sb1', 2)).toBe(3);
    expect(store.events('sb1', { limit: 100 }).map((e) => e.seq)).toEqual([4, 5]);
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
    expect(second.events('sb1', { limit: 10 }).map((e) => e.seq)).toEqual([1, 2, 3]);
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
