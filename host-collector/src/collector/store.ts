// Persistence: SQLite in WAL mode. Writes are queued and committed every GROUP_COMMIT_MS in
// one transaction, however many sessions fed the queue, and each writer's
// callback (which sends the probe its ack) runs only after that commit: an acked event
// survives a collector crash. (synchronous=NORMAL: durable against a crash of this
// process; a host power loss may lose the last commits, but then the VMs are gone too.)

import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import Database from 'better-sqlite3';

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

/** Dumps kept per sandbox. */
export const KEEP_DUMPS = 50;

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
}

interface Pending {
  rows: EventRecord[];
  done?: (err: Error | null) => void;
}

export class Store {
  private readonly db: Database.Database;
  private queue: Pending[] = [];
  private flushScheduled = false;
  private readonly stmt;
  /** One transaction inserting every queued row (made once: better-sqlite3 builds a wrapper per call). */
  private readonly commitBatch: (batch: Pending[]) => void;
  private readonly eventQueries = new Map<string, Database.Statement>();

  constructor(dataDir: string) {
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
        data TEXT NOT NULL
      );
      CREATE INDEX IF NOT EXISTS events_by_sandbox ON events (sandbox_id, id);
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
        analysis TEXT NOT NULL
      );
      CREATE INDEX IF NOT EXISTS dumps_by_sandbox ON dumps (sandbox_id, id);
      CREATE UNIQUE INDEX IF NOT EXISTS events_by_seq ON events (sandbox_id, generation, seq) WHERE seq IS NOT NULL;
    `);
    this.stmt = {
      upsertSandbox: this.db.prepare(
        `INSERT INTO sandboxes (id, uds_path, source, generation, created_ms) VALUES (@id, @udsPath, @source, @generation, @createdMs)
         ON CONFLICT(id) DO UPDATE SET uds_path = excluded.uds_path, source = excluded.source`,
      ),
      deleteSandbox: this.db.prepare('DELETE FROM sandboxes WHERE id = ?'),
      deleteSessions: this.db.prepare('DELETE FROM sessions WHERE sandbox_id = ?'),
      deleteEvents: this.db.prepare('DELETE FROM events WHERE sandbox_id = ?'),
      deleteDumps: this.db.prepare('DELETE FROM dumps WHERE sandbox_id = ?'),
      insertDump: this.db.prepare(
        `INSERT INTO dumps (sandbox_id, generation, mode, source, trigger, complete, error, note, pid, created_ms, bytes, text, analysis)
         VALUES (@sandboxId, @generation, @mode, @source, @trigger, @complete, @error, @note, @pid, @createdMs, @bytes, @text, @analysis)`,
      ),
      listDumps: this.db.prepare(
        `SELECT ${DUMP_COLUMNS} FROM dumps WHERE sandbox_id = ? ORDER BY id DESC LIMIT ?`,
      ),
      getDump: this.db.prepare(`SELECT ${DUMP_COLUMNS}, text FROM dumps WHERE sandbox_id = ? AND id = ?`),
      dumpInfo: this.db.prepare(`SELECT ${DUMP_COLUMNS} FROM dumps WHERE sandbox_id = ? AND id = ?`),
      previousDump: this.db.prepare(
        `SELECT ${DUMP_COLUMNS}, text FROM dumps WHERE sandbox_id = ? AND mode = ? AND id < ? AND error IS NULL ORDER BY id DESC LIMIT 1`,
      ),
      pruneDumps: this.db.prepare(
        `DELETE FROM dumps WHERE sandbox_id = ? AND id <= (SELECT id FROM dumps WHERE sandbox_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
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
        'INSERT INTO events (sandbox_id, generation, seq, kind, t_guest, t_host, data) VALUES (?, ?, ?, ?, ?, ?, ?)',
      ),
      lastOfKind: this.db.prepare('SELECT id FROM events WHERE sandbox_id = ? AND kind = ? ORDER BY id DESC LIMIT 1'),
      pruneEvents: this.db.prepare(
        `DELETE FROM events WHERE sandbox_id = ? AND id <= (
           SELECT id FROM events WHERE sandbox_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
      ),
    };
    const insert = this.stmt.insertEvent;
    this.commitBatch = this.db.transaction((batch: Pending[]) => {
      for (const p of batch) {
        for (const r of p.rows) insert.run(r.sandboxId, r.generation, r.seq, r.kind, r.tGuest, r.tHost, JSON.stringify(r.data));
      }
    });
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
      this.stmt.deleteSandbox.run(id);
    })();
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

  /** Queues rows; `done` runs after they are committed (or the commit failed). */
  append(rows: EventRecord[], done?: (err: Error | null) => void): void {
    this.queue.push(done ? { rows, done } : { rows });
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
    }
    for (const p of batch) p.done?.(error);
  }

  events(sandboxId: string, q: EventQuery): StoredEvent[] {
    this.flush();
    const where = ['sandbox_id = @sandboxId', 'id > @after'];
    if (q.before !== undefined) where.push('id < @before');
    if (q.kind) where.push(q.kind.endsWith('.') ? "kind LIKE @kindPrefix ESCAPE '\\'" : 'kind = @kind');
    if (q.generation !== undefined) where.push('generation = @generation');
    const sql = `SELECT id, sandbox_id AS sandboxId, generation, seq, kind, t_guest AS tGuest, t_host AS tHost, data
         FROM events WHERE ${where.join(' AND ')} ORDER BY id ${q.order === 'desc' ? 'DESC' : 'ASC'} LIMIT @limit`;
    // A few dozen shapes at most (filters × order): each compiled once.
    let statement = this.eventQueries.get(sql);
    if (!statement) this.eventQueries.set(sql, (statement = this.db.prepare(sql)));
    const rows = statement
      .all({
        sandboxId,
        after: q.after ?? 0,
        before: q.before,
        kind: q.kind,
        kindPrefix: q.kind ? `${q.kind.replace(/[\\%_]/g, '\\$&')}%` : undefined,
        generation: q.generation,
        limit: q.limit,
      }) as Array<StoredEvent & { data: string }>;
    return rows.map((r) => ({ ...r, data: JSON.parse(r.data) as unknown }));
  }

  /** Stores a dump (its bytes already gzipped) and keeps only the newest KEEP_DUMPS of the sandbox. */
  saveDump(d: DumpRecord): number {
    const { gz, ...rest } = d;
    const id = this.db.transaction(() => {
      const r = this.stmt.insertDump.run({
        ...rest,
        complete: d.complete ? 1 : 0,
        text: gz,
        analysis: JSON.stringify(d.analysis),
      });
      this.stmt.pruneDumps.run(d.sandboxId, d.sandboxId, KEEP_DUMPS);
      return Number(r.lastInsertRowid);
    })();
    return id;
  }

  listDumps(sandboxId: string, limit = KEEP_DUMPS): StoredDump[] {
    return (this.stmt.listDumps.all(sandboxId, limit) as DumpRow[]).map(fromDumpRow);
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

  /** Keeps the newest `keep` events of a sandbox. */
  prune(sandboxId: string, keep: number): number {
    this.flush();
    return this.stmt.pruneEvents.run(sandboxId, sandboxId, keep).changes;
  }

  close(): void {
    this.flush();
    this.db.close();
  }
}

const DUMP_COLUMNS = `id, sandbox_id AS sandboxId, generation, mode, source, trigger, complete, error, note, pid,
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
