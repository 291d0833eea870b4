import pino from 'pino';

export type Logger = pino.Logger;

/** The levels --log-level takes (pino's, and `silent`). */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * The most log output held in memory while stderr does not take it (journald behind, a pipe
 * nobody reads); past it, records are dropped and counted. A guest makes the collector log
 * (each connection it opens or breaks is a record or two), so it must not be able to make the
 * collector grow through its log: the fuzzer's collector, whose stderr its parent read late,
 * held ~3 MiB more of unwritten records every 5 s, and all of it until the run ended.
 */
export const LOG_BUFFER_MAX_BYTES = 4 * 1024 * 1024;

/** Log records this thread's loggers dropped since it started, by why: their reader fell
 *  behind, or a sandbox was over its budget (`vsockdiag_log_records_dropped_total{reason}`). */
const dropped = { reader_behind: 0, sandbox_budget: 0 };

export function droppedLogRecords(): Readonly<typeof dropped> {
  return dropped;
}

/**
 * What one sandbox's guest can make the collector log: a burst of GUEST_LOG_BURST records,
 * then GUEST_LOG_PER_SEC a second. Each connection a guest opens or breaks, each state change
 * and each new life is a record, and a guest may open a hundred connections at once and ten a
 * second after (budget.ts, framesPerConnection): unchecked, one guest could write records by
 * the hundred into the host's journal, whose own rate limit then drops every other sandbox's
 * records with them. Past its budget a sandbox's records are counted, not written; the next
 * one written says how many (`suppressed`).
 * Records at error and fatal always go: those are the collector's own faults.
 */
export const GUEST_LOG_BURST = 100;
export const GUEST_LOG_PER_SEC = 10;
/** Buckets kept before the full ones (a sandbox quiet long enough) are forgotten. */
const MAX_QUIET_BUCKETS = 10_000;
const ERROR_LEVEL = 50;

/** The sandboxes' log budgets (a token bucket each, by sandbox id). */
export class GuestLogBudget {
  private readonly buckets = new Map<string, { tokens: number; at: number; suppressed: number }>();

  /** A record of sandbox `id` at `now` (ms): null to drop it, else how many were dropped before it. */
  take(id: string, now: number): number | null {
    let b = this.buckets.get(id);
    if (!b) {
      if (this.buckets.size >= MAX_QUIET_BUCKETS) this.forgetQuiet(now);
      b = { tokens: GUEST_LOG_BURST, at: now, suppressed: 0 };
      this.buckets.set(id, b);
    }
    b.tokens = Math.min(GUEST_LOG_BURST, b.tokens + ((now - b.at) * GUEST_LOG_PER_SEC) / 1000);
    b.at = now;
    if (b.tokens < 1) {
      b.suppressed++;
      return null;
    }
    b.tokens--;
    const n = b.suppressed;
    b.suppressed = 0;
    return n;
  }

  /** Drops the buckets that would be full again and owe no count: nothing is lost. */
  private forgetQuiet(now: number): void {
    for (const [id, b] of this.buckets) {
      if (b.suppressed === 0 && b.tokens + ((now - b.at) * GUEST_LOG_PER_SEC) / 1000 >= GUEST_LOG_BURST) this.buckets.delete(id);
    }
  }
}

/** pino's logMethod hook: a record about a sandbox (a `sandbox` field, or a child bound to
 *  one) is spent from that sandbox's budget. */
function limitGuests(budget: GuestLogBudget): LogMethodHook {
  return function (args, method, level) {
    const first: unknown = args[0];
    const fields = typeof first === 'object' && first !== null && !(first instanceof Error) ? (first as Record<string, unknown>) : null;
    const id = level >= ERROR_LEVEL ? undefined : (fields?.sandbox ?? this.bindings().sandbox);
    if (typeof id !== 'string') return void method.apply(this, args);
    const suppressed = budget.take(id, performance.now());
    if (suppressed === null) return void dropped.sandbox_budget++;
    if (suppressed === 0) return void method.apply(this, args);
    method.apply(this, (fields ? [{ ...fields, suppressed }, ...args.slice(1)] : [{ suppressed }, ...args]) as typeof args);
  };
}

type LogMethodHook = NonNullable<NonNullable<pino.LoggerOptions['hooks']>['logMethod']>;

/**
 * NDJSON on stderr, one record a line (stdout stays free for CLI output), with the level as
 * its name ("level":"warn"): journald, Nomad and log shippers read it without pino's numbers.
 * Records that would take the unwritten output past LOG_BUFFER_MAX_BYTES are dropped whole;
 * once a write goes through again, a warning says how many. Each sandbox's records are
 * limited to its GUEST_LOG_BURST / GUEST_LOG_PER_SEC. `fd` is for tests.
 */
export function createLogger(level: LogLevel = 'info', fd = 2): Logger {
  const dest = pino.destination({ dest: fd, minLength: 0, maxLength: LOG_BUFFER_MAX_BYTES });
  const log = pino(
    {
      level,
      base: { app: 'vsockdiag' },
      formatters: { level: (label) => ({ level: label }) },
      hooks: { logMethod: limitGuests(new GuestLogBudget()) },
    },
    dest,
  );
  let unreported = 0;
  dest.on('drop', () => {
    dropped.reader_behind++;
    unreported++;
  });
  // 'write' comes before the stream counts the bytes written as gone: the warning waits a tick.
  dest.on('write', () => {
    if (unreported > 0)
      process.nextTick(() => {
        const n = unreported;
        if (n === 0) return;
        unreported = 0;
        log.warn({ dropped: n }, `${n} log records dropped: their reader fell ${LOG_BUFFER_MAX_BYTES} bytes behind`);
      });
  });
  return log;
}

/**
 * Node's own warnings (deprecations, MaxListeners...) as log records: by default Node writes
 * them to stderr as plain text, which would break the NDJSON stream.
 */
export function logProcessWarnings(log: Logger): void {
  process.removeAllListeners('warning');
  process.on('warning', (w) => log.warn({ warning: { name: w.name, code: (w as { code?: string }).code, stack: w.stack } }, w.message));
}
