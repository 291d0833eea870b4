// Persistence: SQLite in WAL mode. Writes are queued and committed together in one
// transaction, GROUP_COMMIT_MS after the first of them or once GROUP_COMMIT_ROWS wait, however
// many sessions fed the queue, and each writer's callback (which sends the probe its ack) runs
// only after that commit: an acked event survives a collector crash. (synchronous=NORMAL:
// durable against a crash of this process; a host power loss may lose the last commits, but
// then the VMs are gone too.)
// The WAL is copied into the database by a worker thread (checkpointer.ts), not in commits.
//
// A write that fails for want of space or an I/O error (a full disk) does not fail the
// events: they stay queued, unacked, and the store retries every WRITE_RETRY_MS; meanwhile
// `writeError` is set, new events are refused at once (the intake refuses connections), so
// ingest is held back in the probes' rings rather than in this process's memory, and a
// session's close is kept to be written once a write succeeds.
//
// Retention (Retention, DEFAULT_RETENTION): the commit that takes a sandbox past a bound also
// prunes its oldest events, by count and by bytes, probe and collector events apart: a guest's
// flood costs its own history first, and never the collector's record of what it did.
//
// What a stored row costs is mostly the index pages it dirties: every index keyed by sandbox
// puts each sandbox's newest entries on a leaf page of their own, so with thousands of
// sandboxes a row is a page written per index. So the store keeps two things in memory that
// it would otherwise look up or rewrite for every row: each session's highest stored seq (a
// resend is skipped by it; the session's row gets it when it closes), and each sandbox's usage
// (each row written USAGE_SAVE_MS after it fell behind, and with every prune, with the id it
// counts through; the rows after it are counted again at open).

import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import Database from 'better-sqlite3';
import type { GenerationCause } from '../catalogue.js';
import { Checkpointer } from './checkpointer.js';
import { capEventData } from './event-size.js';
import type { GenerationRecord, LastContact } from './lives.js';

export interface SandboxRow {
  id: string;
  udsPath: string;
  source: 'api' | 'discover';
  generation: number;
  createdMs: number;
}

export interface SessionRecord {
  sandboxId: string;
  /** The collector's number for this connection, counted per sandbox. */
  session: number;
  /** The life of the VM it is a connection of. */
  generation: number;
  instanceId: string;
  probeGeneration: number;
  probeVersion: string;
  bootId: string;
  openedMs: number;
  /** What the next hello is compared with (lives.ts LastContact), as of the hello. */
  bootOffsetMs: number | null;
  skewMs: number | null;
  guestMs: number | null;
}

/** What a sandbox's generations and sessions are when the collector starts. */
export interface LifeState {
  generation: number;
  session: number;
  /** The newest generations, oldest first (at most KEEP_GENERATIONS). */
  generations: GenerationRecord[];
  /** The newest session's, or null before any. */
  last: LastContact | null;
  /** The orchestrator's pending lifecycle hint (intake.ts), as saved. */
  lifecycle: string | null;
}

/** Generations a sandbox's intake keeps to file events by: events of older lives than these
 *  arriving now are filed under the oldest kept. */
export const KEEP_GENERATIONS = 16;

/** Session rows kept per sandbox, the newest. Every hello opens one, so a guest that connects
 *  again and again (ten times a second within its frame budget, each a clean hello) grew the
 *  store without end; its generation rows likewise, and only the newest KEEP_GENERATIONS
 *  of those are ever read. Of the sessions, the reads need the newest (lifeState) and a
 *  probe's earlier ones (ackFloor), whose highest seqs rise with the session: the oldest go
 *  first. */
export const KEEP_SESSIONS = 1000;

export interface EventRecord {
  sandboxId: string;
  /** The life of the VM the event belongs to (for a probe event: the one it was made in). */
  generation: number;
  /** The session it arrived on (for collector events: the session current then; 0 before any). */
  session: number;
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

/** How long writes wait to be committed together (acks wait for the commit; reads commit
 *  what is queued first). A commit costs SQLite per page it writes, and a sandbox's rows
 *  dirty a leaf of its own: committed at 5 ms, 5,000 sandboxes at 1 Hz cost 15–17 µs a row
 *  in the commit, at 50 ms 8–11 (test/bench/FINDINGS.md). Probes take their acks with the
 *  liveness tick (2 s) unless a batch asks for its ack at once (an exit flush). */
export const GROUP_COMMIT_MS = 50;
/** Rows that commit at once, not waiting for GROUP_COMMIT_MS: what one commit holds the event
 *  loop for stays a few ms however large the fleet. */
export const GROUP_COMMIT_ROWS = 256;
/** The WAL file's size kept on disk between bursts. */
const WAL_KEEP_BYTES = 16 * 2 ** 20;

/** How often a store whose writes fail for want of space (or an I/O error) tries again. */
export const WRITE_RETRY_MS = 1000;

/** Collector events (no callback) kept queued while writes fail; beyond it they are dropped, counted. */
const MAX_QUEUED_WHILE_FAILING = 10_000;

/** SQLite's word for storage that cannot take a write now but may later: a full disk, an I/O error. */
function isStorageError(err: unknown): err is Error {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code === 'SQLITE_FULL' || code.startsWith('SQLITE_IOERR'));
}

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
/** How long a sandbox's usage row stays behind its new events (a prune writes its own at
 *  once). A crash loses nothing by it: the rows say what they count through. */
const USAGE_SAVE_MS = 10_000;

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

/** A session ackFloor counts: its highest seq if it was closed, else null. */
interface EarlierSession {
  session: number;
  maxSeq: number | null;
}

interface Pending {
  rows: EventRecord[];
  /** Each row's data as stored (JSON), made when queued, and its size in bytes. */
  json: string[];
  bytes: number[];
  /** The rows the commit stored (all but resent ones), and the ids they were stored under. */
  stored: EventRecord[];
  ids: number[];
  done?: AppendDone;
}

/**
 * Runs once the rows are committed (or the commit failed), with the rows it stored and the
 * ids they were stored under, in step. A row resent with a seq its session already has is
 * not among them: it was stored before, so it is skipped, and the rest of the batch commits.
 */
export type AppendDone = (err: Error | null, ids: readonly number[], stored: readonly EventRecord[]) => void;

export class Store {
  private readonly db: Database.Database;
  private queue: Pending[] = [];
  /** The group commit's timer, while one is due (`full`: due at once, GROUP_COMMIT_ROWS
   *  wait). A flush made sooner (a read's) clears it: the next commit comes a whole
   *  GROUP_COMMIT_MS after the queue starts again. */
  private commitTimer: { handle: NodeJS.Timeout; full: boolean } | null = null;
  private readonly stmt;
  /** One transaction inserting every queued row (made once: better-sqlite3 builds a wrapper per call). */
  private readonly commitBatch: (batch: Pending[]) => void;
  private readonly eventQueries = new Map<string, Database.Statement>();
  private readonly retention: Retention;
  /** What each sandbox holds: event_usage plus the events stored after its row's through_id. */
  private usage = new Map<string, Usage>();
  private totalBytes = 0;
  /** Sandboxes whose event_usage row is behind `usage`, with since when (performance.now()),
   *  the longest behind first: a Map keeps the order its keys came in. */
  private readonly unsaved = new Map<string, number>();
  /** Sandboxes whose usage row the commit in flight must write (a prune, or its first events). */
  private readonly mustSave = new Set<string>();
  /** The newest event id committed: what a usage row written now counts through. */
  private lastId = 0;
  /** Per sandbox, per session: the highest seq stored (from its open, or read once). */
  private readonly seqs = new Map<string, Map<number, number>>();
  /** The commit in flight's raises of `seqs`, flat (sessions map, session, seq before), undone
   *  if it rolls back. */
  private readonly seqUndo: Array<Map<number, number> | number> = [];
  /** Set while writes fail for want of space: see writeError. */
  private failing: Error | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  /** Writes that are not events (a session's close), kept while writes fail. */
  private deferred: Array<() => void> = [];
  private queuedRows = 0;
  readonly checkpointer: Checkpointer;
  /** Collector events dropped because writes failed for too long (MAX_QUEUED_WHILE_FAILING). */
  droppedWhileFailing = 0;

  constructor(
    dataDir: string,
    retention: Partial<Retention> = {},
    /** Told when writes start failing (with the error) and when they work again (null). */
    private readonly onWriteState: (error: Error | null) => void = () => undefined,
  ) {
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
    // The checkpoints run on a worker thread (checkpointer.ts), not inside our commits; a WAL
    // that a burst made large is cut back to this when it starts over.
    this.db.pragma('wal_autocheckpoint = 0');
    this.db.pragma(`journal_size_limit = ${WAL_KEEP_BYTES}`);
    this.checkpointer = new Checkpointer(path.join(dataDir, 'vsockdiag.db'), () => this.flush());
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS sandboxes (
        id TEXT PRIMARY KEY,
        uds_path TEXT NOT NULL,
        source TEXT NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL,
        session INTEGER NOT NULL DEFAULT 0,
        lifecycle TEXT
      );
      ${SESSIONS_TABLE}
      CREATE TABLE IF NOT EXISTS generations (
        sandbox_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        cause TEXT NOT NULL,
        detail TEXT NOT NULL,
        opened_ms INTEGER NOT NULL,
        instance_id TEXT NOT NULL,
        from_seq INTEGER NOT NULL,
        after_guest_ms REAL,
        PRIMARY KEY (sandbox_id, generation)
      ) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        sandbox_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        session INTEGER NOT NULL DEFAULT 0,
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
      -- Counts the sandbox's events with id <= through_id; those after it are counted at open.
      CREATE TABLE IF NOT EXISTS event_usage (
        sandbox_id TEXT PRIMARY KEY,
        guest_events INTEGER NOT NULL,
        guest_bytes INTEGER NOT NULL,
        collector_events INTEGER NOT NULL,
        collector_bytes INTEGER NOT NULL,
        through_id INTEGER NOT NULL DEFAULT 0
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
    `);
    this.addUsageThrough();
    this.addEventBytes();
    this.addDumpPause();
    this.addLives();
    this.addSessionMaxSeq();
    // A probe's seqs are unique within one session; the index that held them so cost a page
    // write per row, and the session's highest seq (seqs) holds them now.
    this.db.exec('DROP INDEX IF EXISTS events_by_session_seq');
    this.stmt = {
      upsertSandbox: this.db.prepare(
        `INSERT INTO sandboxes (id, uds_path, source, generation, created_ms) VALUES (@id, @udsPath, @source, @generation, @createdMs)
         ON CONFLICT(id) DO UPDATE SET uds_path = excluded.uds_path, source = excluded.source`,
      ),
      deleteSandbox: this.db.prepare('DELETE FROM sandboxes WHERE id = ?'),
      deleteSessions: this.db.prepare('DELETE FROM sessions WHERE sandbox_id = ?'),
      deleteGenerations: this.db.prepare('DELETE FROM generations WHERE sandbox_id = ?'),
      pruneSessions: this.db.prepare('DELETE FROM sessions WHERE sandbox_id = ? AND session <= ?'),
      pruneGenerations: this.db.prepare('DELETE FROM generations WHERE sandbox_id = ? AND generation <= ?'),
      deleteEvents: this.db.prepare('DELETE FROM events WHERE sandbox_id = ?'),
      deleteDumps: this.db.prepare('DELETE FROM dumps WHERE sandbox_id = ?'),
      deleteUsage: this.db.prepare('DELETE FROM event_usage WHERE sandbox_id = ?'),
      allUsage: this.db.prepare(
        `SELECT sandbox_id AS id, guest_events AS guestEvents, guest_bytes AS guestBytes,
                collector_events AS collectorEvents, collector_bytes AS collectorBytes, through_id AS throughId FROM event_usage`,
      ),
      saveUsage: this.db.prepare(
        `INSERT OR REPLACE INTO event_usage (sandbox_id, guest_events, guest_bytes, collector_events, collector_bytes, through_id)
         VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      usageAfter: this.db.prepare(
        `SELECT seq IS NULL AS collector, COUNT(*) AS n, SUM(bytes) AS bytes FROM events INDEXED BY events_by_sandbox
         WHERE sandbox_id = ? AND id > ? GROUP BY seq IS NULL`,
      ),
      lastId: this.db.prepare('SELECT MAX(id) AS id FROM events'),
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
      setSession: this.db.prepare('UPDATE sandboxes SET session = ?, generation = ? WHERE id = ?'),
      setLifecycle: this.db.prepare('UPDATE sandboxes SET lifecycle = ? WHERE id = ?'),
      sandboxLife: this.db.prepare('SELECT generation, session, lifecycle FROM sandboxes WHERE id = ?'),
      openSession: this.db.prepare(
        `INSERT INTO sessions (sandbox_id, session, generation, instance_id, probe_generation, probe_version, boot_id, opened_ms,
                               boot_offset_ms, skew_ms, guest_ms)
         VALUES (@sandboxId, @session, @generation, @instanceId, @probeGeneration, @probeVersion, @bootId, @openedMs,
                 @bootOffsetMs, @skewMs, @guestMs)`,
      ),
      closeSession: this.db.prepare(
        `UPDATE sessions SET closed_ms = ?, close_reason = ?, max_seq = COALESCE(?, max_seq), boot_offset_ms = COALESCE(?, boot_offset_ms),
                             skew_ms = COALESCE(?, skew_ms), guest_ms = COALESCE(?, guest_ms)
         WHERE sandbox_id = ? AND session = ? AND closed_ms IS NULL`,
      ),
      sessions: this.db.prepare(
        `SELECT session, generation, instance_id AS instanceId, probe_generation AS probeGeneration, probe_version AS probeVersion,
                boot_id AS bootId, opened_ms AS openedMs, closed_ms AS closedMs, close_reason AS closeReason
         FROM sessions WHERE sandbox_id = ? ORDER BY session`,
      ),
      lastSession: this.db.prepare(
        `SELECT instance_id AS instanceId, boot_id AS bootId, boot_offset_ms AS bootOffsetMs, skew_ms AS skewMs, guest_ms AS guestMs
         FROM sessions WHERE sandbox_id = ? ORDER BY session DESC LIMIT 1`,
      ),
      insertGeneration: this.db.prepare(
        `INSERT OR REPLACE INTO generations (sandbox_id, generation, cause, detail, opened_ms, instance_id, from_seq, after_guest_ms)
         VALUES (@sandboxId, @generation, @cause, @detail, @openedMs, @instanceId, @fromSeq, @afterGuestMs)`,
      ),
      generations: this.db.prepare(
        `SELECT generation, cause, detail, opened_ms AS openedMs, instance_id AS instanceId, from_seq AS fromSeq,
                after_guest_ms AS afterGuestMs
         FROM generations WHERE sandbox_id = ? ORDER BY generation DESC LIMIT ${KEEP_GENERATIONS}`,
      ),
      earlierSessions: this.db.prepare(
        `SELECT session, max_seq AS maxSeq FROM sessions WHERE sandbox_id = ? AND instance_id = ? AND probe_generation < ?`,
      ),
      // A session's seqs rise with the ids, so its newest probe event has its highest seq.
      lastSeqOfSession: this.db.prepare(
        'SELECT seq FROM events INDEXED BY events_by_sandbox WHERE sandbox_id = ? AND session = ? AND seq IS NOT NULL ORDER BY id DESC LIMIT 1',
      ),
      // Positional: the group commit binds thousands of rows a second, without an object each.
      insertEvent: this.db.prepare(
        'INSERT INTO events (sandbox_id, generation, session, seq, kind, t_guest, t_host, data, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
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
          // A seq its session already has is a resend, stored and counted the first time.
          // Skipped, not an error: that would fail the whole group commit, every other
          // sandbox's rows with it. (The session takes only consecutive seqs; this is the
          // store's own guard.)
          if (r.seq !== null && !this.raiseSeq(r.sandboxId, r.session, r.seq)) continue;
          const res = insert.run(r.sandboxId, r.generation, r.session, r.seq, r.kind, r.tGuest, r.tHost, p.json[i]!, p.bytes[i]!);
          this.lastId = Number(res.lastInsertRowid);
          p.stored.push(r);
          p.ids.push(this.lastId);
          this.count(r.sandboxId, r.seq === null ? 'collector' : 'guest', 1, p.bytes[i]! + EVENT_OVERHEAD_BYTES);
          touched.add(r.sandboxId);
        }
      }
      for (const id of touched) this.enforce(id);
      this.enforceTotal();
      this.saveUsage(false);
    });
    this.loadUsage();
    // Bounds may have been lowered since the last run: apply them now, not at the next event.
    this.db.transaction(() => {
      for (const id of [...this.usage.keys()]) this.enforce(id);
      this.enforceTotal();
      this.saveUsage(true);
    })();
  }

  /** A database from before dumps recorded how long they stopped the target. */
  private addDumpPause(): void {
    const columns = this.db.prepare('PRAGMA table_info(dumps)').all() as Array<{ name: string }>;
    if (!columns.some((c) => c.name === 'paused_ms')) this.db.exec('ALTER TABLE dumps ADD COLUMN paused_ms REAL');
  }

  /**
   * A database from before generations meant lives of the VM, when every hello opened one:
   * its "generations" become the sessions they were, and the generations are counted again
   * from the evidence those sessions kept (a new boot id), so a history that one collector
   * upgrade or probe restart had split is one life again. Events and dumps follow.
   */
  private addLives(): void {
    const has = (table: string, column: string) =>
      (this.db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>).some((c) => c.name === column);
    this.db.transaction(() => {
      if (!has('sandboxes', 'session')) this.db.exec('ALTER TABLE sandboxes ADD COLUMN session INTEGER NOT NULL DEFAULT 0');
      if (!has('sandboxes', 'lifecycle')) this.db.exec('ALTER TABLE sandboxes ADD COLUMN lifecycle TEXT');
      if (!has('events', 'session')) {
        // Every old generation was one session, numbered alike.
        this.db.exec('ALTER TABLE events ADD COLUMN session INTEGER NOT NULL DEFAULT 0; UPDATE events SET session = generation');
      }
      this.db.exec('DROP INDEX IF EXISTS events_by_seq');
    })();
    if (has('sessions', 'session')) return;
    this.db.transaction(() => {
      this.db.exec(`
        ALTER TABLE sessions RENAME TO sessions_before_lives;
        ${SESSIONS_TABLE}
        CREATE TEMP TABLE life_of_session (sandbox_id TEXT NOT NULL, session INTEGER NOT NULL, generation INTEGER NOT NULL,
                                           PRIMARY KEY (sandbox_id, session)) WITHOUT ROWID;
      `);
      const old = this.db
        .prepare(
          `SELECT sandbox_id AS sandboxId, generation AS session, instance_id AS instanceId, probe_generation AS probeGeneration,
                  probe_version AS probeVersion, boot_id AS bootId, opened_ms AS openedMs, closed_ms AS closedMs,
                  close_reason AS closeReason
           FROM sessions_before_lives ORDER BY sandbox_id, generation`,
        )
        .all() as Array<Record<string, string | number | null> & { sandboxId: string; session: number; bootId: string }>;
      const insertSession = this.db.prepare(
        `INSERT INTO sessions (sandbox_id, session, generation, instance_id, probe_generation, probe_version, boot_id, opened_ms,
                               closed_ms, close_reason)
         VALUES (@sandboxId, @session, @generation, @instanceId, @probeGeneration, @probeVersion, @bootId, @openedMs,
                 @closedMs, @closeReason)`,
      );
      const insertGeneration = this.db.prepare(
        `INSERT INTO generations (sandbox_id, generation, cause, detail, opened_ms, instance_id, from_seq, after_guest_ms)
         VALUES (?, ?, ?, 'counted again from the sessions recorded before generations meant lives', ?, ?, 1, NULL)`,
      );
      const map = this.db.prepare('INSERT INTO life_of_session (sandbox_id, session, generation) VALUES (?, ?, ?)');
      let sandbox = '';
      let generation = 0;
      let boot = '';
      for (const row of old) {
        if (row.sandboxId !== sandbox) {
          sandbox = row.sandboxId;
          generation = 0;
          boot = '';
        }
        if (generation === 0 || (row.bootId !== '' && boot !== '' && row.bootId !== boot)) {
          generation++;
          const cause: GenerationCause = generation === 1 ? 'first' : 'boot';
          insertGeneration.run(sandbox, generation, cause, row.openedMs, row.instanceId);
        }
        if (row.bootId !== '') boot = row.bootId;
        insertSession.run({ ...row, generation });
        map.run(sandbox, row.session, generation);
      }
      this.db.exec(`
        UPDATE events SET generation = COALESCE(
          (SELECT m.generation FROM life_of_session m WHERE m.sandbox_id = events.sandbox_id AND m.session = events.session), generation);
        UPDATE dumps SET generation = COALESCE(
          (SELECT m.generation FROM life_of_session m WHERE m.sandbox_id = dumps.sandbox_id AND m.session = dumps.generation), generation);
        UPDATE sandboxes SET
          session = COALESCE((SELECT MAX(session) FROM sessions s WHERE s.sandbox_id = sandboxes.id), 0),
          generation = COALESCE((SELECT MAX(generation) FROM sessions s WHERE s.sandbox_id = sandboxes.id), 0);
        DROP TABLE life_of_session;
        DROP TABLE sessions_before_lives;
      `);
    })();
  }

  /** A database from before usage rows said what they count through: each counted all then. */
  private addUsageThrough(): void {
    const columns = this.db.prepare('PRAGMA table_info(event_usage)').all() as Array<{ name: string }>;
    if (columns.some((c) => c.name === 'through_id')) return;
    this.db.exec(`
      ALTER TABLE event_usage ADD COLUMN through_id INTEGER NOT NULL DEFAULT 0;
      UPDATE event_usage SET through_id = COALESCE((SELECT MAX(id) FROM events), 0);
    `);
  }

  /** A database from before sessions kept their highest seq: theirs are read from the events. */
  private addSessionMaxSeq(): void {
    const columns = this.db.prepare('PRAGMA table_info(sessions)').all() as Array<{ name: string }>;
    if (!columns.some((c) => c.name === 'max_seq')) this.db.exec('ALTER TABLE sessions ADD COLUMN max_seq INTEGER');
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
        INSERT INTO event_usage (sandbox_id, guest_events, guest_bytes, collector_events, collector_bytes, through_id)
          SELECT sandbox_id,
                 SUM(seq IS NOT NULL), SUM(CASE WHEN seq IS NOT NULL THEN bytes + ${EVENT_OVERHEAD_BYTES} ELSE 0 END),
                 SUM(seq IS NULL), SUM(CASE WHEN seq IS NULL THEN bytes + ${EVENT_OVERHEAD_BYTES} ELSE 0 END),
                 (SELECT MAX(id) FROM events)
          FROM events GROUP BY sandbox_id;
      `);
    })();
  }

  /** Reads the usage rows and counts the events stored after each (at open, and after a
   *  commit rolled back). Every sandbox with events has a row (count writes it at once). */
  private loadUsage(): void {
    this.usage = new Map();
    this.totalBytes = 0;
    this.unsaved.clear();
    this.lastId = (this.stmt.lastId.get() as { id: number | null }).id ?? 0;
    for (const row of this.stmt.allUsage.all() as Array<Usage & { id: string; throughId: number }>) {
      const { id, throughId, ...u } = row;
      this.usage.set(id, u);
      this.totalBytes += u.guestBytes + u.collectorBytes;
      if (throughId >= this.lastId) continue;
      for (const after of this.stmt.usageAfter.all(id, throughId) as Array<{ collector: number; n: number; bytes: number }>) {
        this.count(id, after.collector ? 'collector' : 'guest', after.n, after.bytes + after.n * EVENT_OVERHEAD_BYTES);
      }
    }
  }

  /** Writes the usage rows that are behind: `all` of them (at open and close), or those a
   *  prune or a sandbox's first events require now and those behind for USAGE_SAVE_MS. Each
   *  row falls behind at its own moment, so the writes spread out as the events did. (All of
   *  them every USAGE_SAVE_MS was one commit of 5,000 rows that held the event loop for 12 ms.) */
  private saveUsage(all: boolean): void {
    for (const id of this.mustSave) this.writeUsage(id);
    this.mustSave.clear();
    const due = all ? Number.POSITIVE_INFINITY : performance.now() - USAGE_SAVE_MS;
    for (const [id, since] of this.unsaved) {
      if (since > due) break;
      this.writeUsage(id);
    }
  }

  private writeUsage(id: string): void {
    const u = this.usage.get(id);
    if (u) this.stmt.saveUsage.run(id, u.guestEvents, u.guestBytes, u.collectorEvents, u.collectorBytes, this.lastId);
    this.unsaved.delete(id);
  }

  /** Adds (or, negative, takes away) events and bytes to a sandbox's usage. */
  private count(id: string, origin: Origin, events: number, bytes: number): void {
    let u = this.usage.get(id);
    if (!u) {
      this.usage.set(id, (u = { guestEvents: 0, guestBytes: 0, collectorEvents: 0, collectorBytes: 0 }));
      // Its row is written in this commit: the recount at open starts from the rows.
      this.mustSave.add(id);
    }
    if (!this.unsaved.has(id)) this.unsaved.set(id, performance.now());
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
   * floods loses its own history first and small ones keep theirs.
   */
  private enforceTotal(): void {
    if (this.totalBytes <= this.retention.totalBytes) return;
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
    for (const { id } of sizes.slice(0, cut)) {
      const u = this.usage.get(id)!;
      this.dropOldest(id, 'guest', 0, u.guestBytes + u.collectorBytes - level);
      // With no probe events left to give, the collector's own go too.
      this.dropOldest(id, 'collector', 0, u.guestBytes + u.collectorBytes - level);
    }
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
    // The deleted rows are counted in the saved row: it must not outlive them.
    this.mustSave.add(id);
  }

  /** A sandbox's sessions in `seqs`, made on first use. */
  private sessionSeqs(sandboxId: string): Map<number, number> {
    let sessions = this.seqs.get(sandboxId);
    if (!sessions) this.seqs.set(sandboxId, (sessions = new Map()));
    return sessions;
  }

  /** A session's highest seq as its newest probe event says (for one `seqs` does not hold). */
  private newestSeq(sandboxId: string, session: number): number {
    return (this.stmt.lastSeqOfSession.get(sandboxId, session) as { seq: number } | undefined)?.seq ?? 0;
  }

  /** Records a probe event's seq as stored in its session; false if the session has it. */
  private raiseSeq(sandboxId: string, session: number, seq: number): boolean {
    const sessions = this.sessionSeqs(sandboxId);
    // A session this store did not open (or one closed before) is read from its events.
    const high = sessions.get(session) ?? this.newestSeq(sandboxId, session);
    if (seq <= high) return false;
    this.seqUndo.push(sessions, session, high);
    sessions.set(session, seq);
    return true;
  }

  /** The commit rolled back: so do the seqs it raised, newest first. */
  private undoSeqs(): void {
    for (let i = this.seqUndo.length - 3; i >= 0; i -= 3) {
      (this.seqUndo[i] as Map<number, number>).set(this.seqUndo[i + 1] as number, this.seqUndo[i + 2] as number);
    }
    this.seqUndo.length = 0;
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
      this.stmt.deleteGenerations.run(id);
      this.stmt.deleteUsage.run(id);
      this.stmt.deleteSandbox.run(id);
    })();
    const u = this.usage.get(id);
    if (u) this.totalBytes -= u.guestBytes + u.collectorBytes;
    this.usage.delete(id);
    this.unsaved.delete(id);
    this.seqs.delete(id);
  }

  listSandboxes(): SandboxRow[] {
    return this.stmt.listSandboxes.all() as SandboxRow[];
  }

  /** Records a new session, and the new generation it opens if it does, in one commit. */
  openSession(s: SessionRecord, opens?: GenerationRecord): void {
    this.flush();
    if (this.failing) throw this.failing;
    try {
      this.db.transaction(() => {
        if (opens) this.insertGeneration(s.sandboxId, opens);
        this.stmt.openSession.run(s);
        this.stmt.pruneSessions.run(s.sandboxId, s.session - KEEP_SESSIONS);
        this.stmt.setSession.run(s.session, s.generation, s.sandboxId);
      })();
      this.sessionSeqs(s.sandboxId).set(s.session, 0);
    } catch (err) {
      if (isStorageError(err)) this.fail(err);
      throw err;
    }
  }

  /** A generation's row, and the oldest beyond KEEP_GENERATIONS gone (inside the caller's transaction). */
  private insertGeneration(sandboxId: string, g: GenerationRecord): void {
    this.stmt.insertGeneration.run(generationRow(sandboxId, g));
    this.stmt.pruneGenerations.run(sandboxId, g.generation - KEEP_GENERATIONS);
  }

  /** A generation that begins inside a session (a vmgenid event), or where one begins moved. */
  saveGeneration(sandboxId: string, g: GenerationRecord): void {
    // Queued events before the cut are committed first, under the generation they had.
    this.flush();
    if (this.failing) throw this.failing;
    try {
      this.db.transaction(() => {
        this.insertGeneration(sandboxId, g);
        this.stmt.setGeneration.run(g.generation, sandboxId);
      })();
    } catch (err) {
      if (isStorageError(err)) this.fail(err);
      throw err;
    }
  }

  /** Ends a session, with the last the collector heard of the guest's clocks on it. Never
   *  throws for want of space: the close is then written once a write succeeds. */
  closeSession(sandboxId: string, session: number, reason: string, last: Omit<LastContact, 'instanceId' | 'bootId'> = NO_CLOCKS): void {
    const closedMs = Date.now();
    // Its queued events are committed first, so the row gets the highest seq stored of it
    // (a close kept while writes fail reads it when written, after the events it waited for).
    this.flush();
    const write = () => {
      const sessions = this.seqs.get(sandboxId);
      const maxSeq = sessions?.get(session) ?? null;
      this.stmt.closeSession.run(closedMs, reason.slice(0, 500), maxSeq, last.bootOffsetMs, last.skewMs, last.guestMs, sandboxId, session);
      sessions?.delete(session);
    };
    if (this.failing) {
      this.deferred.push(write);
      return;
    }
    try {
      write();
    } catch (err) {
      if (!isStorageError(err)) throw err;
      this.deferred.push(write);
      this.fail(err);
    }
  }

  /** What the sandbox's intake starts from: its numbers, generations and last session. */
  lifeState(sandboxId: string): LifeState {
    const row = this.stmt.sandboxLife.get(sandboxId) as { generation: number; session: number; lifecycle: string | null } | undefined;
    const generations = (this.stmt.generations.all(sandboxId) as Array<Omit<GenerationRecord, 'cause'> & { cause: string }>)
      .map((g) => ({ ...g, cause: g.cause as GenerationCause }))
      .reverse();
    const last = (this.stmt.lastSession.get(sandboxId) as LastContact | undefined) ?? null;
    return { generation: row?.generation ?? 0, session: row?.session ?? 0, generations, last, lifecycle: row?.lifecycle ?? null };
  }

  /** The orchestrator's pending lifecycle hint, kept across a collector restart. */
  saveLifecycle(sandboxId: string, json: string | null): void {
    this.stmt.setLifecycle.run(json, sandboxId);
  }

  /** Why writes fail now (a full disk, an I/O error), or null when they work. While set, new
   *  events are refused, nothing more is acked, and the store retries every WRITE_RETRY_MS. */
  get writeError(): Error | null {
    return this.failing;
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
    let floor = 0;
    const earlier = this.stmt.earlierSessions.all(sandboxId, instanceId, probeGeneration) as EarlierSession[];
    for (const s of earlier) {
      // Closed: its row says. Open (the probe came back before its old connection was seen
      // to end), or left open by a crash: what this store saw of it, or its newest event.
      floor = Math.max(floor, s.maxSeq ?? this.seqs.get(sandboxId)?.get(s.session) ?? this.newestSeq(sandboxId, s.session));
    }
    return floor;
  }

  /**
   * Queues rows; `done` runs after they are committed (or the commit failed). A row whose
   * data is over MAX_EVENT_DATA_BYTES has it replaced, in place, by the cut copy that is
   * stored (capEventData): whoever else holds the rows (the live stream) shows the same.
   */
  append(rows: EventRecord[], done?: AppendDone): void {
    if (this.failing) {
      // A writer that waits for the commit is told at once, so its probe keeps the events.
      const error = this.failing;
      if (done) return void setImmediate(() => done(error, [], []));
      if (this.queuedRows + rows.length > MAX_QUEUED_WHILE_FAILING) {
        this.droppedWhileFailing += rows.length;
        return;
      }
    }
    const json: string[] = [];
    const bytes: number[] = [];
    for (const r of rows) {
      const capped = capEventData(r.data as Record<string, unknown>, JSON.stringify(r.data));
      r.data = capped.data;
      json.push(capped.json);
      bytes.push(capped.bytes);
    }
    this.queue.push({ rows, json, bytes, stored: [], ids: [], ...(done ? { done } : {}) });
    this.queuedRows += rows.length;
    if (!this.failing) this.scheduleCommit();
  }

  /** Group commit: everything queued meanwhile goes in one transaction (one commit per batch
   *  would be most of the collector's work with thousands of sessions). Never within append
   *  itself: writers are told on a later turn of the event loop, as with any commit. */
  private scheduleCommit(): void {
    const full = this.queuedRows >= GROUP_COMMIT_ROWS;
    if (this.commitTimer && (this.commitTimer.full || !full)) return;
    if (this.commitTimer) clearTimeout(this.commitTimer.handle);
    this.commitTimer = { handle: setTimeout(() => this.groupCommit(), full ? 0 : GROUP_COMMIT_MS), full };
  }

  /** The group commit's timer: it waits while the checkpointer holds commits (it flushes
   *  when the hold ends). Reads flush at once in any case. */
  private groupCommit(): void {
    this.commitTimer = null;
    if (!this.checkpointer.holding) this.flush();
  }

  /** Commits everything queued now (unless writes are failing: the retry owns the queue then). */
  flush(): void {
    if (this.commitTimer) {
      clearTimeout(this.commitTimer.handle);
      this.commitTimer = null;
    }
    if (!this.failing) this.commitQueue();
  }

  /** Commits the queue. False when a storage error kept it queued (its acks wait) and
   *  started the retries; any other error fails the batch's writers. */
  private commitQueue(): boolean {
    if (this.queue.length === 0) return true;
    const batch = this.queue;
    this.queue = [];
    let error: Error | null = null;
    try {
      this.commitBatch(batch);
      this.seqUndo.length = 0;
    } catch (err) {
      // Rolled back: so are the seqs and the usage the commit had counted, and the ids are nobody's.
      this.undoSeqs();
      this.mustSave.clear();
      this.loadUsage();
      for (const p of batch) {
        p.stored.length = 0;
        p.ids.length = 0;
      }
      if (isStorageError(err)) {
        this.queue = batch.concat(this.queue);
        this.fail(err);
        return false;
      }
      error = err as Error;
    }
    this.queuedRows -= batch.reduce((n, p) => n + p.rows.length, 0);
    if (!error) this.checkpointer.written();
    for (const p of batch) p.done?.(error, p.ids, p.stored);
    return true;
  }

  private fail(err: Error): void {
    if (!this.failing) {
      this.failing = err;
      this.onWriteState(err);
    }
    this.retryTimer ??= setTimeout(() => this.retry(), WRITE_RETRY_MS);
  }

  /** Tries the writes again: the queued events first, then what was deferred. */
  private retry(): void {
    this.retryTimer = null;
    if (this.queue.length === 0 && this.deferred.length === 0) {
      try {
        // Nothing waits: any write that touches a page says whether there is room again.
        this.db.exec('UPDATE sandboxes SET generation = generation');
      } catch (err) {
        if (isStorageError(err)) return this.fail(err);
      }
    }
    if (!this.commitQueue()) return;
    while (this.deferred.length > 0) {
      try {
        this.deferred[0]!();
      } catch (err) {
        if (isStorageError(err)) return this.fail(err);
        // Not a space problem: this write will never work; the others may.
      }
      this.deferred.shift();
    }
    this.failing = null;
    this.onWriteState(null);
  }

  events(sandboxId: string, q: EventQuery): EventPage {
    this.flush();
    const where = ['sandbox_id = @sandboxId', 'id > @after'];
    if (q.before !== undefined) where.push('id < @before');
    if (q.kind) where.push(q.kind.endsWith('.') ? "kind LIKE @kindPrefix ESCAPE '\\'" : 'kind = @kind');
    if (q.generation !== undefined) where.push('generation = @generation');
    const sql = `SELECT id, sandbox_id AS sandboxId, generation, session, seq, kind, t_guest AS tGuest, t_host AS tHost, data, bytes
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
    this.checkpointer.written();
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
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.flush();
    // A clean stop leaves every usage row current: the next open counts nothing again.
    if (!this.failing && this.unsaved.size > 0) this.db.transaction(() => this.saveUsage(true))();
    this.checkpointer.close();
    this.db.close();
  }
}

const SESSIONS_TABLE = `CREATE TABLE IF NOT EXISTS sessions (
        sandbox_id TEXT NOT NULL,
        session INTEGER NOT NULL,
        generation INTEGER NOT NULL,
        instance_id TEXT NOT NULL,
        probe_generation INTEGER NOT NULL,
        probe_version TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        opened_ms INTEGER NOT NULL,
        closed_ms INTEGER,
        close_reason TEXT,
        boot_offset_ms REAL,
        skew_ms REAL,
        guest_ms REAL,
        PRIMARY KEY (sandbox_id, session)
      );`;

const NO_CLOCKS = { bootOffsetMs: null, skewMs: null, guestMs: null };

function generationRow(sandboxId: string, g: GenerationRecord) {
  return { sandboxId, ...g, detail: g.detail.slice(0, 500) };
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
