// The store's WAL is checkpointed by a worker thread (checkpointer.ts), never inside the
// main thread's commits, and it stays bounded under writes that never pause.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Checkpointer } from '../src/collector/checkpointer.js';
import { Store, type EventRecord } from '../src/collector/store.js';
import { waitFor } from '../../test/support/wait.js';

const cleanup: Array<() => void> = [];
afterEach(() => {
  while (cleanup.length) cleanup.pop()!();
});

function openStore(): { store: Store; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-ckpt-'));
  const store = new Store(dir);
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  cleanup.push(() => store.close());
  return { store, dir };
}

const SANDBOXES = 500;

function row(i: number, seq: number): EventRecord {
  return {
    sandboxId: `sb-${i % SANDBOXES}`,
    generation: 1,
    session: 1,
    seq,
    kind: 'sample',
    tGuest: seq,
    tHost: Date.now(),
    data: { pad: 'x'.repeat(200) },
  };
}

describe('Checkpointer', () => {
  it('turns off the automatic checkpoint: the commits on the main thread never copy the WAL', () => {
    const { store } = openStore();
    const db = (store as unknown as { db: Database.Database }).db;
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(0);
  });

  it('keeps the WAL bounded while writes never pause, and loses no row', async () => {
    const { store } = openStore();
    for (let i = 0; i < SANDBOXES; i++) {
      store.saveSandbox({ id: `sb-${i}`, udsPath: `/run/vd/${i}.sock`, source: 'api', generation: 1, createdMs: Date.now() });
    }
    // Batches every millisecond, as a busy fleet's group commits come, for long enough that
    // an uncheckpointed WAL would pass the bound several times over.
    // The WAL's length (in pages) as each pass saw it: without a start-over it only grows.
    let seq = 0;
    let acked = 0;
    let seen = 0;
    const walPages: number[] = [];
    const watch = () => {
      if (store.checkpointer.passes === seen) return;
      seen = store.checkpointer.passes;
      if (store.checkpointer.last?.walPages !== undefined) walPages.push(store.checkpointer.last.walPages);
    };
    for (let r = 0; r < 3000 || walPages.length < 4; r++) {
      const rows = Array.from({ length: 10 }, () => row(seq, ++seq));
      store.append(rows, (err, ids) => {
        if (!err) acked += ids.length;
      });
      watch();
      await new Promise((res) => setTimeout(res, 1));
    }
    await waitFor('every row acked', () => acked === seq, { timeoutMs: 30_000 });
    // Some pass saw a shorter WAL than the one before it: the WAL started over.
    expect(
      walPages.some((n, i) => i > 0 && n < walPages[i - 1]!),
      `WAL pages per pass: ${walPages}`,
    ).toBe(true);
    expect(store.checkpointer.holds.length).toBeGreaterThan(0);
    // The round to a multiple of SANDBOXES: every sandbox got the same count.
    while (seq % SANDBOXES !== 0) {
      await new Promise<void>((resolve) => store.append([row(seq, ++seq)], () => resolve()));
    }
    expect(store.events('sb-0', { after: 0, limit: 10_000 }).events.length).toBe(seq / SANDBOXES);
  }, 60_000);

  it('leaves a database that opens with every row after the store closes', async () => {
    const { store, dir } = openStore();
    store.saveSandbox({ id: 'sb-0', udsPath: '/run/vd/0.sock', source: 'api', generation: 1, createdMs: Date.now() });
    await new Promise<void>((resolve) => store.append([row(0, 1), row(0, 2)], () => resolve()));
    await waitFor('a checkpoint pass', () => store.checkpointer.passes > 0, { timeoutMs: 10_000 });
    store.close();
    cleanup.pop();
    // The worker's connection is closed by then: the store's was the last, which removes the
    // WAL, so nothing writes in the folder after close() (a test that removes it does not race).
    expect(fs.readdirSync(dir)).toEqual(['vsockdiag.db']);
    const db = new Database(path.join(dir, 'vsockdiag.db'), { readonly: true });
    cleanup.push(() => db.close());
    expect(db.prepare("SELECT COUNT(*) AS n FROM events WHERE sandbox_id = 'sb-0'").get()).toEqual({ n: 2 });
  });

  it('starts nothing after close(), not even for the answer of a pass that was in flight', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-ckpt-'));
    cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'x.db');
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    db.pragma('wal_autocheckpoint = 0');
    db.exec('CREATE TABLE t (x)');
    const insert = db.prepare('INSERT INTO t VALUES (?)');
    for (let i = 0; i < 100; i++) insert.run(i);
    const checkpointer = new Checkpointer(file, () => {});
    // A pass copies the whole WAL, so its answer would ask for a hold's second pass; the
    // worker sends that answer before it takes the close, and it arrives after close().
    checkpointer.written();
    checkpointer.close();
    db.close();
    // Long enough for a started worker to open the database (it took ~50 ms when it did).
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(fs.readdirSync(dir)).toEqual(['x.db']);
  });
});
