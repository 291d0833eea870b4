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

let dropped = 0;

/** Log records this thread's loggers dropped since it started (`vsockdiag_log_records_dropped_total`). */
export function droppedLogRecords(): number {
  return dropped;
}

/**
 * NDJSON on stderr, one record a line (stdout stays free for CLI output), with the level as
 * its name ("level":"warn"): journald, Nomad and log shippers read it without pino's numbers.
 * Records that would take the unwritten output past LOG_BUFFER_MAX_BYTES are dropped whole;
 * once a write goes through again, a warning says how many. `fd` is for tests.
 */
export function createLogger(level: LogLevel = 'info', fd = 2): Logger {
  const dest = pino.destination({ dest: fd, minLength: 0, maxLength: LOG_BUFFER_MAX_BYTES });
  const log = pino({ level, base: { app: 'vsockdiag' }, formatters: { level: (label) => ({ level: label }) } }, dest);
  let unreported = 0;
  dest.on('drop', () => {
    dropped++;
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
