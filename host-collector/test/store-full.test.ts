// A store whose writes fail for want of space (SQLITE_FULL, made here with SQLite's
// max_page_count on the store's own connection; test/reliability/crash.ts fills a real
// disk): nothing is acked, new writers are told at once, a session's close never throws,
// and everything queued is committed once there is room again.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type Database from 'better-sqlite3';
import { afterEach, expect, it } from 'vitest';
import { Store, WRITE_RETRY_MS, type EventRecord, type SessionRecord } from '../src/collector/store.js';
import { waitFor } from '../../test/support/wait.js';

const cleanup: Array<() => void> = [];
afterEach(() => {
  for (const fn of cleanup.splice(0).reverse()) fn();
});

const rows = (from: number, n: number, pad = 2000): EventRecord[] =>
  Array.from({ length: n }, (_, i) => ({
    sandboxId: 'sb',
    generation: 1,
    session: 1,
    seq: from + i,
    kind: 'phase',
    tGuest: 0,
    tHost: 0,
    data: { status: 'x'.repeat(pad) },
  }));

const session = (n: number): SessionRecord => ({
  sandboxId: 'sb',
  generation: 1,
  session: n,
  instanceId: 'i',
  probeGeneration: n,
  probeVersion: 'v',
  bootId: 'b',
  openedMs: 0,
  bootOffsetMs: null,
  skewMs: null,
  guestMs: null,
});

const commit = (store: Store, r: EventRecord[]) => new Promise<Error | null>((resolve) => store.append(r, resolve));

it('holds the events of a full disk unacked, refuses new ones, and commits them when room returns', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-full-'));
  const states: Array<string | null> = [];
  const store = new Store(dir, {}, (err) => states.push(err ? ((err as { code?: string }).code ?? err.message) : null));
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  cleanup.push(() => store.close());
  const db = (store as unknown as { db: Database.Database }).db;
  store.openSession(session(1));
  expect(await commit(store, rows(1, 10))).toBeNull();

  // No page more: the next commit fails with SQLITE_FULL.
  db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true }) as number}`);
  let held: Error | null | undefined;
  store.append(rows(11, 200), (err) => {
    held = err;
  });
  await waitFor('the store to notice', () => store.writeError !== null);
  expect(states).toEqual(['SQLITE_FULL']);
  await new Promise((r) => setTimeout(r, WRITE_RETRY_MS * 1.5));
  expect(held).toBeUndefined(); // not acked, not failed: still queued

  // A writer that comes now is told at once; a session's close never throws.
  expect(await commit(store, rows(211, 1))).toBe(store.writeError);
  expect(() => store.closeSession('sb', 1, 'probe went away')).not.toThrow();
  expect(() => store.openSession(session(2))).toThrow();

  // Room again: the retry commits the held events, then the close.
  db.pragma('max_page_count = 1073741823');
  await waitFor('the held events committed', () => held !== undefined, { timeoutMs: WRITE_RETRY_MS * 5 });
  expect(held).toBeNull();
  expect(store.writeError).toBeNull();
  expect(states).toEqual(['SQLITE_FULL', null]);
  const seqs = store.events('sb', { limit: 1000 }).events.map((e) => e.seq);
  expect(seqs).toEqual(Array.from({ length: 210 }, (_, i) => i + 1));
  expect(store.sessions('sb')).toMatchObject([{ generation: 1, closeReason: 'probe went away' }]);
});
