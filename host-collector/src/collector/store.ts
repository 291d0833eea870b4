// Persistence: SQLite in WAL mode. Writes are queued and committed every GROUP_COMMIT_MS in
// one transaction, however many sessions fed the queue, and each writer's
// callback (which sends the probe its ack) runs only after that commit: an acked event
// survives a collector crash. (synchronous=NORMAL: durable against a crash of this
// process; a host power loss may lose the last commits, but then the VMs are gone too.)
//
// Retention (Retention, DEFAULT_RETENTION): the commit that takes a sandbox past a bound also
// prunes its oldest events, by count and by bytes, probe and collector events apart: a guest's
// flood costs its own history first, and never the collector's record of what it did.

import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import Database from 'better-sqlite3';
import { capEventData } from './event-size.js';

export interface SandboxRow {
  id: string;
  udsPath: string;
  source: 'api' | 'discover';
  generation: number;
  createdMs: number;
}

export interface SessionRecord {
  sandboxId: string;
  generation: number;
  instanceId: string;
  probeGeneration: number;
  probeVersion: string;
  bootId: string;
  openedMs: number;
}

export interface EventRecord {
  sandboxId: string;
  generation: number;
  /** Probe sequence number; null for events the collector itself records (state changes, gaps). */
  seq: number | null;
  kind: string;
  /** Guest time, ms since guest boot (null for host events). */
  tGuest: number | null;
  /** Host wall-clock ms when the event was recorded (or, for guest events, when it happened, mapped to host time). */
  tHost: number;
  data: unknown;
}

export interface StoredEvent extends EventRecord {
  id: number;
}

export interface DumpRecord {
  sandboxId: string;
  generation: number;
  mode: string;
  source: string;
  /** 'api' (asked for), 'auto' (taken on entering stuck). */
  trigger: string;
  complete: boolean;
  error: string | null;
  note: string | null;
  pid: number | null;
  /** How long the probe stopped the target for the dump (0: read running; null: not said). */
  pausedMs?: number | null;
  createdMs: number;
  /** The dump's bytes as they arrived, gzipped (by the dump worker, off the main thread). */
  gz: Buffer;
  /** How many bytes arrived (not the size of any decoded text). */
  bytes: number;
  /** Parsed structure (goroutine groups or thread groups), JSON-able. */
  analysis: unknown;
}

export interface StoredDump extends Omit<DumpRecord, 'gz'> {
  id: number;
}

/** A stored dump with its text still gzipped: read it with dumpBytes, or hand it to the dump worker. */
export type StoredDumpBlob = StoredDump & { gz: Buffer };

/** How long writes wait to be committed together (acks wait for the commit). */
export const GROUP_COMMIT_MS = 5;

/**
 * Dumps kept per sandbox, counted apart by trigger: automatic dumps (which a guest can bring
 * about, by hanging and reconnecting) never push out the ones an operator asked for.
 */
export const KEEP_DUMPS = { api: 50, auto: 20 } as const;

/** What bounds the event history; see DEFAULT_RETENTION. */
export interface Retention {
  /** Probe events kept per sandbox (the newest). */
  guestEvents: number;
  /** Collector events (state, condition, session.open/close, gap, dump) kept per sandbox:
   *  a count of their own, so a guest's flood of events never pushes them out. */
  collectorEvents: number;
  /** Event bytes kept per sandbox, both origins: each event's data as JSON plus
   *  EVENT_OVERHEAD_BYTES. Probe events are pruned for it; collector events are held to
   *  their own share of it (COLLECTOR_SHARE). */
  sandboxBytes: number;
  /** Event bytes kept across all sandboxes: over it, the largest sandboxes are cut first. */
  totalBytes: number;
}

export const DEFAULT_RETENTION: Retention = {
  guestEvents: 20_000,
  collectorEvents: 2_000,
  sandboxBytes: 64 * 1024 * 1024,
  totalBytes: 4 * 1024 * 1024 * 1024,
};

/** What an event costs beyond its data (ids, kind, times, index entries; about what the API
 *  adds around it too), so a flood of tiny events is not free. */
export const EVENT_OVERHEAD_BYTES = 128;
/** The part of a sandbox's byte quota its collector events may use. */
const COLLECTOR_SHARE = 1 / 8;
/** A bound passed is pruned back to this fraction of it: pruning runs in steps, not on every commit. */
const KEEP_AFTER_PRUNE = 0.9;

export interface EventQuery {
  /** Only events with a larger id. */
  after?: number;
  /** Only events with a smaller id. */
  before?: number;
  /** 'desc': newest first (the newest `limit` that match), for reading a long history backwards. */
  order?: 'asc' | 'desc';
  kind?: string;
  generation?: number;
  limit: number;
  /** Stop before the events come to more than this many bytes (data JSON plus
   *  EVENT_OVERHEAD_BYTES each); the first event is returned whatever its size. */
  maxBytes?: number;
}

export interface EventPage {
  events: StoredEvent[];
  /** More events match beyond the last one returned (the page hit `limit` or `maxBytes`). */
  more: boolean;
}

/** Events and bytes a sandbox holds, by origin (bytes include EVENT_OVERHEAD_BYTES each). */
interface Usage {
  guestEvents: number;
  guestBytes: number;
  collectorEvents: number;
  collectorBytes: number;
}

type Origin = 'guest' | 'collector';

interface Pending {
  rows: EventRecord[];
  /** Each row's data as stored (JSON), made when queued, and its size in bytes. */
  json: string[];
  bytes: number[];
  /** The ids the rows were stored under, filled in by the commit. */
  ids: number[];
  done?: AppendDone;
}

/** Runs once the rows are committed, with the ids they were stored under (or the commit failed). */
export type AppendDone = (err: Error | null, ids: readonly number[]) => void;

export class Store {
  private readonly db: Database.Database;
  private queue: Pending[] = [];
  private flushScheduled = false;
  private readonly stmt;
  /** One transaction inserting every queued row (made once: better-sqlite3 builds a wrapper per call). */
  private readonly commitBatch: (batch: Pending[]) => void;
  private readonly eventQueries = new Map<string, Database.Statement>();
  private readonly retention: Retention;
  /** Mirrors the event_usage table (which keeps it across restarts), updated in the same commits. */
  private usage = new Map<string, Usage>();
  private totalBytes = 0;

  constructor(dataDir: string, retention: Partial<Retention> = {}) {
    this.retention = { ...DEFAULT_RETENTION, ...retention };
    // The history holds guest output and dumps of every sandbox: the collector's user alone
    // may read it (a folder made here is 0700; the database and its WAL files are 0600).
    fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const umask = process.umask(0o077);
    try {
      this.db = new Database(path.join(dataDir, 'vsockdiag.db'));
      this.db.pragma('journal_mode = WAL');
    } finally {
      process.umask(umask);
    }
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma('busy_timeout = 2000');
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS sandboxes (
        id TEXT PRIMARY KEY,
        uds_path TEXT NOT NULL,
        source TEXT NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL
      );
      CREATE TABLE IF NOT EXISTS sessions (
        sandbox_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        instance_id TEXT NOT NULL,
        probe_generation INTEGER NOT NULL,
        probe_version TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        opened_ms INTEGER NOT NULL,
        closed_ms INTEGER,
        close_reason TEXT,
        PRIMARY KEY (sandbox_id, generation)
      );
      CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        sandbox_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        seq INTEGER,
        kind TEXT NOT NULL,
        t_guest REAL,
        t_host INTEGER NOT NULL,
        data TEXT NOT NULL,
        bytes INTEGER NOT NULL
      );
      CREATE INDEX IF NOT EXISTS events_by_sandbox ON events (sandbox_id, id);
      -- Collector events, found without walking past every probe event (they are pruned apart).
      CREATE INDEX IF NOT EXISTS events_by_collector ON events (sandbox_id, id) WHERE seq IS NULL;
      CREATE TABLE IF NOT EXISTS event_usage (
        sandbox_id TEXT PRIMARY KEY,
        guest_events INTEGER NOT NULL,
        guest_bytes INTEGER NOT NULL,
        collector_events INTEGER NOT NULL,
        collector_bytes INTEGER NOT NULL
      ) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS dumps (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        sandbox_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        mode TEXT NOT NULL,
        source TEXT NOT NULL,
        trigger TEXT NOT NULL,
        complete INTEGER NOT NULL,
        error TEXT,
        note TEXT,
        pid INTEGER,
        created_ms INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        text BLOB NOT NULL,
        analysis TEXT NOT NULL,
        paused_ms REAL
      );
      CREATE INDEX IF NOT EXISTS dumps_by_sandbox ON dumps (sandbox_id, id);
      CREATE UNIQUE INDEX IF NOT EXISTS events_by_seq ON events (sandbox_id, generation, seq) WHERE seq IS NOT NULL;
    `);
    this.addEventBytes();
    this.addDumpPause();
    this.stmt = {
      upsertSandbox: this.db.prepare(
        `INSERT INTO sandboxes (id, uds_path, source, generation, created_ms) VALUES (@id, @udsPath, @source, @generation, @createdMs)
         ON CONFLICT(id) DO UPDATE SET uds_path = excluded.uds_path, source = excluded.source`,
      ),
      deleteSandbox: this.db.prepare('DELETE FROM sandboxes WHERE id = ?'),
      deleteSessions: this.db.prepare('DELETE FROM sessions WHERE sandbox_id = ?'),
      deleteEvents: this.db.prepare('DELETE FROM events WHERE sandbox_id = ?'),
      deleteDumps: this.db.prepare('DELETE FROM dumps WHERE sandbox_id = ?'),
      deleteUsage: this.db.prepare('DELETE FROM event_usage WHERE sandbox_id = ?'),
      allUsage: this.db.prepare(
        `SELECT sandbox_id AS id, guest_events AS guestEvents, guest_bytes AS guestBytes,
                collector_events AS collectorEvents, collector_bytes AS collectorBytes FROM event_usage`,
      ),
      saveUsage: this.db.prepare(
        `INSERT OR REPLACE INTO event_usage (sandbox_id, guest_events, guest_bytes, collector_events, collector_bytes)
         VALUES (?, ?, ?, ?, ?)`,
      ),
      insertDump: this.db.prepare(
        `INSERT INTO dumps (sandbox_id, generation, mode, source, trigger, complete, error, note, pid, created_ms, bytes, text, analysis, paused_ms)
         VALUES (@sandboxId, @generation, @mode, @source, @trigger, @complete, @error, @note, @pid, @createdMs, @bytes, @text, @analysis, @pausedMs)`,
      ),
      listDumps: this.db.prepare(`SELECT ${DUMP_COLUMNS} FROM dumps WHERE sandbox_id = ? ORDER BY id DESC LIMIT ?`),
      getDump: this.db.prepare(`SELECT ${DUMP_COLUMNS}, text FROM dumps WHERE sandbox_id = ? AND id = ?`),
      dumpInfo: this.db.prepare(`SELECT ${DUMP_COLUMNS} FROM dumps WHERE sandbox_id = ? AND id = ?`),
      previousDump: this.db.prepare(
        `SELECT ${DUMP_COLUMNS}, text FROM dumps WHERE sandbox_id = ? AND mode = ? AND id < ? AND error IS NULL ORDER BY id DESC LIMIT 1`,
      ),
      pruneDumps: this.db.prepare(
        `DELETE FROM dumps WHERE sandbox_id = @sandboxId AND trigger = @trigger AND id <= (
           SELECT id FROM dumps WHERE sandbox_id = @sandboxId AND trigger = @trigger ORDER BY id DESC LIMIT 1 OFFSET @keep)`,
      ),
      listSandboxes: this.db.prepare(
        'SELECT id, uds_path AS udsPath, source, generation, created_ms AS createdMs FROM sandboxes ORDER BY id',
      ),
      setGeneration: this.db.prepare('UPDATE sandboxes SET generation = ? WHERE id = ?'),
      openSession: this.db.prepare(
        `INSERT INTO sessions (sandbox_id, generation, instance_id, probe_generation, probe_version, boot_id, opened_ms)
         VALUES (@sandboxId, @generation, @instanceId, @probeGeneration, @probeVersion, @bootId, @openedMs)`,
      ),
      closeSession: this.db.prepare(
        'UPDATE sessions SET closed_ms = ?, close_reason = ? WHERE sandbox_id = ? AND generation = ? AND closed_ms IS NULL',
      ),
      sessions: this.db.prepare(
        `SELECT generation, instance_id AS instanceId, probe_generation AS probeGeneration, probe_version AS probeVersion,
                boot_id AS bootId, opened_ms AS openedMs, closed_ms AS closedMs, close_reason AS closeReason
         FROM sessions WHERE sandbox_id = ? ORDER BY generation`,
      ),
      ackFloor: this.db.prepare(
        `SELECT MAX(e.seq) AS seq FROM sessions s JOIN events e ON e.sandbox_id = s.sandbox_id AND e.generation = s.generation
         WHERE s.sandbox_id = ? AND s.instance_id = ? AND s.probe_generation < ? AND e.seq IS NOT NULL`,
      ),
      // Positional: the group commit binds thousands of rows a second, without an object each.
      insertEvent: this.db.prepare(
        'INSERT INTO events (sandbox_id, generation, seq, kind, t_guest, t_host, data, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      ),
      lastOfKind: this.db.prepare('SELECT id FROM events WHERE sandbox_id = ? AND kind = ? ORDER BY id DESC LIMIT 1'),
      // Oldest first, one origin: what pruning walks (only as far as it deletes). Named
      // indexes, so the planner never sorts a sandbox's whole history by way of events_by_seq.
      oldest: {
        guest: this.db.prepare(
          'SELECT id, bytes FROM events INDEXED BY events_by_sandbox WHERE sandbox_id = ? AND seq IS NOT NULL ORDER BY id',
        ),
        collector: this.db.prepare(
          'SELECT id, bytes FROM events INDEXED BY events_by_collector WHERE sandbox_id = ? AND seq IS NULL ORDER BY id',
        ),
      },
      deleteUpTo: {
        guest: this.db.prepare('DELETE FROM events WHERE sandbox_id = ? AND seq IS NOT NULL AND id <= ?'),
        collector: this.db.prepare('DELETE FROM events WHERE sandbox_id = ? AND seq IS NULL AND id <= ?'),
      },
    };
    const insert = this.stmt.insertEvent;
    this.commitBatch = this.db.transaction((batch: Pending[]) => {
      const touched = new Set<string>();
      for (const p of batch) {
        for (let i = 0; i < p.rows.length; i++) {
          const r = p.rows[i]!;
          p.ids.push(
            Number(insert.run(r.sandboxId, r.generation, r.seq, r.kind, r.tGuest, r.tHost, p.json[i]!, p.bytes[i]!).lastInsertRowid),
          );
          this.count(r.sandboxId, r.seq === null ? 'collector' : 'guest', 1, p.bytes[i]! + EVENT_OVERHEAD_BYTES);
          touched.add(r.sandboxId);
        }
      }
      for (const id of touched) this.enforce(id);
      for (const id of this.enforceTotal()) touched.add(id);
      for (const id of touched) this.saveUsage(id);
    });
    this.loadUsage();
    // Bounds may have been lowered since the last run: apply them now, not at the next event.
    this.db.transaction(() => {
      const all = [...this.usage.keys()];
      for (const id of all) this.enforce(id);
      this.enforceTotal();
      for (const id of all) this.saveUsage(id);
    })();
  }

  /** A database from before dumps recorded how long they stopped the target. */
  private addDumpPause(): void {
    const columns = this.db.prepare('PRAGMA table_info(dumps)').all() as Array<{ name: string }>;
    if (!columns.some((c) => c.name === 'paused_ms')) this.db.exec('ALTER TABLE dumps ADD COLUMN paused_ms REAL');
  }

  /** A database from before byte quotas: give every event its size, and total them once. */
  private addEventBytes(): void {
    const columns = this.db.prepare('PRAGMA table_info(events)').all() as Array<{ name: string }>;
    if (columns.some((c) => c.name === 'bytes')) return;
    this.db.transaction(() => {
      this.db.exec(`
        ALTER TABLE events ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
        UPDATE events SET bytes = length(CAST(data AS BLOB));
        DELETE FROM event_usage;
        INSERT INTO event_usage (sandbox_id, guest_events, guest_bytes, collector_events, collector_bytes)
          SELECT sandbox_id,
                 SUM(seq IS NOT NULL), SUM(CASE WHEN seq IS NOT NULL THEN bytes + ${EVENT_OVERHEAD_BYTES} ELSE 0 END),
                 SUM(seq IS NULL), SUM(CASE WHEN seq IS NULL THEN bytes + ${EVENT_OVERHEAD_BYTES} ELSE 0 END)
          FROM events GROUP BY sandbox_id;
      `);
    })();
  }

  private loadUsage(): void {
    this.usage = new Map();
    this.totalBytes = 0;
    for (const row of this.stmt.allUsage.all() as Array<Usage & { id: string }>) {
      const { id, ...u } = row;
      this.usage.set(id, u);
      this.totalBytes += u.guestBytes + u.collectorBytes;
    }
  }

  private saveUsage(id: string): void {
    const u = this.usage.get(id);
    if (u) this.stmt.saveUsage.run(id, u.guestEvents, u.guestBytes, u.collectorEvents, u.collectorBytes);
  }

  /** Adds (or, negative, takes away) events and bytes to a sandbox's usage. */
  private count(id: string, origin: Origin, events: number, bytes: number): void {
    let u = this.usage.get(id);
    if (!u) this.usage.set(id, (u = { guestEvents: 0, guestBytes: 0, collectorEvents: 0, collectorBytes: 0 }));
    if (origin === 'guest') {
      u.guestEvents += events;
      u.guestBytes += bytes;
    } else {
      u.collectorEvents += events;
      u.collectorBytes += bytes;
    }
    this.totalBytes += bytes;
  }

  /**
   * Holds one sandbox to its bounds. Probe events and collector events are pruned apart,
   * each to its own count; for bytes, probe events go to make room for both, and collector
   * events only ever to stay within their own share.
   */
  private enforce(id: string): void {
    const u = this.usage.get(id);
    if (!u) return;
    const r = this.retention;
    const collectorBytes = r.sandboxBytes * COLLECTOR_SHARE;
    if (u.collectorEvents > r.collectorEvents || u.collectorBytes > collectorBytes) {
      this.dropOldest(id, 'collector', excess(u.collectorEvents, r.collectorEvents), excess(u.collectorBytes, collectorBytes));
    }
    if (u.guestEvents > r.guestEvents || u.guestBytes + u.collectorBytes > r.sandboxBytes) {
      this.dropOldest(id, 'guest', excess(u.guestEvents, r.guestEvents), excess(u.guestBytes + u.collectorBytes, r.sandboxBytes));
    }
  }

  /**
   * Holds all sandboxes together to totalBytes: the largest are cut to one common size (the
   * level that brings the total back to KEEP_AFTER_PRUNE of the bound), so a sandbox that
   * floods loses its own history first and small ones keep theirs. Returns whom it cut.
   */
  private enforceTotal(): string[] {
    if (this.totalBytes <= this.retention.totalBytes) return [];
    const sizes = [...this.usage].map(([id, u]) => ({ id, bytes: u.guestBytes + u.collectorBytes })).sort((a, b) => b.bytes - a.bytes);
    const target = this.retention.totalBytes * KEEP_AFTER_PRUNE;
    let rest = this.totalBytes;
    let level = 0;
    let cut = 0;
    while (cut < sizes.length) {
      rest -= sizes[cut]!.bytes;
      cut++;
      level = Math.max(0, Math.floor((target - rest) / cut));
      if (cut === sizes.length || level >= sizes[cut]!.bytes) break;
    }
    const ids = sizes.slice(0, cut).map((s) => s.id);
    for (const id of ids) {
      const u = this.usage.get(id)!;
      this.dropOldest(id, 'guest', 0, u.guestBytes + u.collectorBytes - level);
      // With no probe events left to give, the collector's own go too.
      this.dropOldest(id, 'collector', 0, u.guestBytes + u.collectorBytes - level);
    }
    return ids;
  }

  /** Deletes a sandbox's oldest events of one origin: at least `events` of them and `bytes`. */
  private dropOldest(id: string, origin: Origin, events: number, bytes: number): void {
    if (events <= 0 && bytes <= 0) return;
    let n = 0;
    let size = 0;
    let upTo = 0;
    for (const row of this.stmt.oldest[origin].iterate(id) as IterableIterator<{ id: number; bytes: number }>) {
      n++;
      size += row.bytes + EVENT_OVERHEAD_BYTES;
      upTo = row.id;
      if (n >= events && size >= bytes) break;
    }
    if (n === 0) return;
    this.stmt.deleteUpTo[origin].run(id, upTo);
    this.count(id, origin, -n, -size);
  }

  saveSandbox(row: SandboxRow): void {
    this.stmt.upsertSandbox.run(row);
  }

  deleteSandbox(id: string): void {
    this.flush();
    this.db.transaction(() => {
      this.stmt.deleteDumps.run(id);
      this.stmt.deleteEvents.run(id);
      this.stmt.deleteSessions.run(id);
      this.stmt.deleteUsage.run(id);
      this.stmt.deleteSandbox.run(id);
    })();
    const u = this.usage.get(id);
    if (u) this.totalBytes -= u.guestBytes + u.collectorBytes;
    this.usage.delete(id);
  }

  listSandboxes(): SandboxRow[] {
    return this.stmt.listSandboxes.all() as SandboxRow[];
  }

  /** Records a new session and the sandbox's new generation in one commit. */
  openSession(s: SessionRecord): void {
    this.flush();
    this.db.transaction(() => {
      this.stmt.openSession.run(s);
      this.stmt.setGeneration.run(s.generation, s.sandboxId);
    })();
  }

  closeSession(sandboxId: string, generation: number, reason: string): void {
    this.stmt.closeSession.run(Date.now(), reason.slice(0, 500), sandboxId, generation);
  }

  sessions(sandboxId: string): unknown[] {
    return this.stmt.sessions.all(sandboxId);
  }

  /**
   * The highest seq this probe instance already has stored here, counting only sessions
   * the probe opened *before* this one (lower probe generation). Sessions with the same or
   * a higher probe generation belong to another timeline of the same memory (the source VM
   * resumed after a snapshot while a restore of it connects too): their seqs are not ours.
   */
  ackFloor(sandboxId: string, instanceId: string, probeGeneration: number): number {
    this.flush();
    const row = this.stmt.ackFloor.get(sandboxId, instanceId, probeGeneration) as { seq: number | null };
    return row.seq ?? 0;
  }

  /**
   * Queues rows; `done` runs after they are committed (or the commit failed). A row whose
   * data is over MAX_EVENT_DATA_BYTES has it replaced, in place, by the cut copy that is
   * stored (capEventData): whoever else holds the rows (the live stream) shows the same.
   */
  append(rows: EventRecord[], done?: AppendDone): void {
    const json: string[] = [];
    const bytes: number[] = [];
    for (const r of rows) {
      const capped = capEventData(r.data as Record<string, unknown>, JSON.stringify(r.data));
      r.data = capped.data;
      json.push(capped.json);
      bytes.push(capped.bytes);
    }
    this.queue.push({ rows, json, bytes, ids: [], ...(done ? { done } : {}) });
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      // Group commit: everything queued within a few ms goes in one transaction (one commit
      // per batch would be most of the collector's work with thousands of sessions).
      setTimeout(() => this.flush(), GROUP_COMMIT_MS);
    }
  }

  /** Commits everything queued now. */
  flush(): void {
    this.flushScheduled = false;
    if (this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    let error: Error | null = null;
    try {
      this.commitBatch(batch);
    } catch (err) {
      error = err as Error;
      // Rolled back: so is the usage the commit had counted, and the ids are nobody's.
      this.loadUsage();
      for (const p of batch) p.ids.length = 0;
    }
    for (const p of batch) p.done?.(error, p.ids);
  }

  events(sandboxId: string, q: EventQuery): EventPage {
    this.flush();
    const where = ['sandbox_id = @sandboxId', 'id > @after'];
    if (q.before !== undefined) where.push('id < @before');
    if (q.kind) where.push(q.kind.endsWith('.') ? "kind LIKE @kindPrefix ESCAPE '\\'" : 'kind = @kind');
    if (q.generation !== undefined) where.push('generation = @generation');
    const sql = `SELECT id, sandbox_id AS sandboxId, generation, seq, kind, t_guest AS tGuest, t_host AS tHost, data, bytes
         FROM events WHERE ${where.join(' AND ')} ORDER BY id ${q.order === 'desc' ? 'DESC' : 'ASC'} LIMIT @limit`;
    // A few dozen shapes at most (filters × order): each compiled once.
    let statement = this.eventQueries.get(sql);
    if (!statement) this.eventQueries.set(sql, (statement = this.db.prepare(sql)));
    const rows = statement.iterate({
      sandboxId,
      after: q.after ?? 0,
      before: q.before,
      kind: q.kind,
      kindPrefix: q.kind ? `${q.kind.replace(/[\\%_]/g, '\\$&')}%` : undefined,
      generation: q.generation,
      // One more than asked: whether there is more is then known, not guessed.
      limit: q.limit + 1,
    }) as IterableIterator<StoredEvent & { data: string; bytes: number }>;
    // Row by row, so a page cut short by maxBytes never had the rest of its rows in memory.
    const events: StoredEvent[] = [];
    let size = 0;
    for (const { bytes, ...r } of rows) {
      size += bytes + EVENT_OVERHEAD_BYTES;
      if (events.length === q.limit || (events.length > 0 && q.maxBytes !== undefined && size > q.maxBytes)) {
        return { events, more: true };
      }
      events.push({ ...r, data: JSON.parse(r.data) as unknown });
    }
    return { events, more: false };
  }

  /** Stores a dump (its bytes already gzipped) and keeps only the newest KEEP_DUMPS of the sandbox. */
  saveDump(d: DumpRecord): number {
    const { gz, ...rest } = d;
    const id = this.db.transaction(() => {
      const r = this.stmt.insertDump.run({
        ...rest,
        complete: d.complete ? 1 : 0,
        pausedMs: d.pausedMs ?? null,
        text: gz,
        analysis: JSON.stringify(d.analysis),
      });
      this.stmt.pruneDumps.run({
        sandboxId: d.sandboxId,
        trigger: d.trigger,
        keep: d.trigger === 'api' ? KEEP_DUMPS.api : KEEP_DUMPS.auto,
      });
      return Number(r.lastInsertRowid);
    })();
    return id;
  }

  /**
   * The sandbox's dumps, newest first, each as `view` makes it. One row at a time: a view that
   * keeps only a summary never has every parsed analysis (megabytes each, for a big Go dump)
   * in memory at once.
   */
  listDumps<T>(sandboxId: string, view: (d: StoredDump) => T, limit = KEEP_DUMPS.api + KEEP_DUMPS.auto): T[] {
    const out: T[] = [];
    for (const row of this.stmt.listDumps.iterate(sandboxId, limit) as IterableIterator<DumpRow>) out.push(view(fromDumpRow(row)));
    return out;
  }

  /** A dump without its text (which stays compressed in the database). */
  dumpInfo(sandboxId: string, id: number): StoredDump | null {
    const row = this.stmt.dumpInfo.get(sandboxId, id) as DumpRow | undefined;
    return row ? fromDumpRow(row) : null;
  }

  getDump(sandboxId: string, id: number): StoredDumpBlob | null {
    return withBlob(this.stmt.getDump.get(sandboxId, id) as (DumpRow & { text: Buffer }) | undefined);
  }

  /** The newest successful dump of the same mode before `id`. */
  previousDump(sandboxId: string, mode: string, id: number): StoredDumpBlob | null {
    return withBlob(this.stmt.previousDump.get(sandboxId, mode, id) as (DumpRow & { text: Buffer }) | undefined);
  }

  /** Id of the newest event of a kind (0 if none). */
  lastEventId(sandboxId: string, kind: string): number {
    this.flush();
    const row = this.stmt.lastOfKind.get(sandboxId, kind) as { id: number } | undefined;
    return row?.id ?? 0;
  }

  close(): void {
    this.flush();
    this.db.close();
  }
}

/** How much of `n` goes when it is over `max`: back to KEEP_AFTER_PRUNE of `max`. */
function excess(n: number, max: number): number {
  return n > max ? n - Math.floor(max * KEEP_AFTER_PRUNE) : 0;
}

const DUMP_COLUMNS = `id, sandbox_id AS sandboxId, generation, mode, source, trigger, complete, error, note, pid, paused_ms AS pausedMs,
  created_ms AS createdMs, bytes, analysis`;

interface DumpRow extends Omit<StoredDump, 'complete' | 'analysis'> {
  complete: number;
  analysis: string;
}

function fromDumpRow(r: DumpRow): StoredDump {
  return { ...r, complete: r.complete === 1, analysis: JSON.parse(r.analysis) as unknown };
}

function withBlob(row: (DumpRow & { text: Buffer }) | undefined): StoredDumpBlob | null {
  if (!row) return null;
  const { text, ...info } = row;
  return { ...fromDumpRow(info), gz: text };
}

const gunzip = promisify(zlib.gunzip);

/** A stored dump's bytes, unzipped on libuv's thread pool rather than the event loop. */
export function dumpBytes(d: StoredDumpBlob): Promise<Buffer> {
  return gunzip(d.gz);
}
