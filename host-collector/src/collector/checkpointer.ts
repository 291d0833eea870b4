// WAL checkpoints off the event loop. SQLite's automatic checkpoint runs inside the commit
// that crosses its threshold, on the committing thread: it copies the WAL's pages into the
// database file and fsyncs both. With thousands of sessions that was most of the store's
// time on the main thread (issue 17: a 5,000-session fleet, test/bench/FINDINGS.md), and
// every fsync stalled acks, readiness answers and verdicts alike. Here the store turns the
// automatic checkpoint off and a worker thread with its own connection to the same file
// runs PASSIVE checkpoints instead, one at a time, at most every CHECKPOINT_EVERY_MS while
// there are writes. PASSIVE never waits for the writer or blocks it.
//
// A PASSIVE pass copies the WAL as it was when the pass began; SQLite starts the WAL over
// from its beginning only when a write begins with every frame copied. Under steady writes
// that moment never comes and the WAL would grow without end, so a pass that copied all it
// saw is followed at once by a second, short one during which the store holds its commits
// (`holding`; they queue, and their acks wait): it copies what was committed meanwhile, and
// the next commit starts the WAL over. The hold lasts as long as copying one pass's worth of
// commits, and never more than MAX_HOLD_MS: a slower pass (a busy disk, a starved machine)
// is let go on, the commits go on, and the WAL starts over at a later pass instead; without
// that bound a long hold became one huge commit that held the event loop for a second.
// `holds` records how long each hold was.
//
// A failed or crashed checkpoint loses nothing: the WAL still holds the pages, and the next
// pass (or the next open) copies them.

import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/** Least time between two checkpoints while writes go on: a WAL of a few MB at most. */
export const CHECKPOINT_EVERY_MS = 250;
const MAX_HOLDS_KEPT = 1000;
/** The longest close() waits for the worker to close its connection (a pass in flight ends first). */
const CLOSE_WAIT_MS = 5000;
/** The longest the store's commits wait for a second pass (their acks wait as long). */
export const MAX_HOLD_MS = 50;

// The worker is this source, evaluated (a file of its own would need a bundle of its own and
// would not run from the TypeScript sources the tests use). It loads the same SQLite driver
// as the store, by its resolved path.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma('busy_timeout = 2000');
parentPort.on('message', (m) => {
  if (m === 'close') {
    db.close();
    Atomics.store(workerData.closed, 0, 1);
    Atomics.notify(workerData.closed, 0);
    parentPort.close();
    return;
  }
  try {
    const [r] = db.pragma('wal_checkpoint(PASSIVE)');
    parentPort.postMessage({ ok: true, walPages: r.log, copied: r.checkpointed });
  } catch (err) {
    parentPort.postMessage({ ok: false, error: String(err && err.message) });
  }
});
`;

const driver = createRequire(import.meta.url).resolve('better-sqlite3');

export interface CheckpointResult {
  ok: boolean;
  /** Pages in the WAL, and how many of them this pass copied into the database. */
  walPages?: number;
  copied?: number;
  error?: string;
}

export class Checkpointer {
  private worker: Worker | null = null;
  private inFlight = false;
  /** True during a second pass: the store commits nothing until it ends. */
  holding = false;
  private holdStart = 0;
  private holdTimer: NodeJS.Timeout | null = null;
  /** Set to 1 by the worker once its connection is closed: close() waits for it. */
  private readonly workerClosed = new Int32Array(new SharedArrayBuffer(4));
  /**
   * Set by close(): nothing starts after it. The worker answers a pass in flight before it
   * takes the close, and that answer arrives after close() returned; acting on it (a hold's
   * second pass) started a new worker, whose connection then wrote the WAL's files into a
   * folder being removed (seen as ENOTEMPTY in a test's cleanup).
   */
  private closed = false;
  /** What the pass in flight is: the copy under writes, or the second one during a hold. */
  private pass: 'copy' | 'hold' = 'copy';
  /** How long each hold of the store's commits lasted (ms), the newest MAX_HOLDS_KEPT. */
  readonly holds: number[] = [];
  private lastMs = Number.NEGATIVE_INFINITY;
  private timer: NodeJS.Timeout | null = null;
  /** Passes done, and the last one's result: for tests and benchmarks. */
  passes = 0;
  last: CheckpointResult | null = null;

  constructor(
    private readonly file: string,
    /** Told when a hold ends: the store commits what queued meanwhile. */
    private readonly onHoldEnd: () => void,
  ) {}

  /** Called after a write: asks for a pass, now or when CHECKPOINT_EVERY_MS has gone by. */
  written(): void {
    if (this.closed || this.inFlight || this.timer) return;
    const wait = this.lastMs + CHECKPOINT_EVERY_MS - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.run();
      }, wait);
      this.timer.unref();
    } else this.run();
  }

  private run(): void {
    this.lastMs = performance.now();
    this.post('copy');
  }

  private hold(): void {
    this.holding = true;
    this.holdStart = performance.now();
    this.holdTimer = setTimeout(() => this.release(), MAX_HOLD_MS);
    this.post('hold');
  }

  private post(pass: 'copy' | 'hold'): void {
    this.inFlight = true;
    this.pass = pass;
    this.start().postMessage('checkpoint');
  }

  /** Ends a hold (its pass done, or over MAX_HOLD_MS): the store commits what queued. */
  private release(): void {
    if (!this.holding) return;
    this.holding = false;
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.holdTimer = null;
    if (this.holds.push(performance.now() - this.holdStart) > MAX_HOLDS_KEPT) this.holds.shift();
    this.onHoldEnd();
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: { driver, file: this.file, closed: this.workerClosed } });
    // A checkpoint in flight must not keep the process alive at exit.
    w.unref();
    w.on('message', (r: CheckpointResult) => this.done(r));
    w.on('error', (err) => {
      // The worker is gone; the next write starts another.
      this.worker = null;
      this.done({ ok: false, error: err.message });
    });
    this.worker = w;
    return w;
  }

  private done(r: CheckpointResult): void {
    if (this.closed) return;
    this.inFlight = false;
    this.passes++;
    this.last = r;
    // After a hold's pass (in time or let go on), the next pass waits for CHECKPOINT_EVERY_MS.
    if (this.pass === 'hold') this.release();
    else if (r.ok && r.walPages && r.copied === r.walPages) this.hold();
  }

  /**
   * Ends the worker and waits (blocking, at most CLOSE_WAIT_MS) until its connection is
   * closed: until then it may still write or remove the database's files, and whoever
   * removes or reopens the folder after the store's close must not race it.
   */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.holdTimer = null;
    this.holding = false;
    if (this.worker) {
      this.worker.postMessage('close');
      Atomics.wait(this.workerClosed, 0, 0, CLOSE_WAIT_MS);
    }
    this.worker = null;
  }
}
