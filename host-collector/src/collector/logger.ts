import pino from 'pino';

export type Logger = pino.Logger;

/** The levels --log-level takes (pino's, and `silent`). */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * NDJSON on stderr, one record a line (stdout stays free for CLI output), with the level as
 * its name ("level":"warn"): journald, Nomad and log shippers read it without pino's numbers.
 */
export function createLogger(level: LogLevel = 'info'): Logger {
  return pino({ level, base: { app: 'vsockdiag' }, formatters: { level: (label) => ({ level: label }) } }, pino.destination(2));
}

/**
 * Node's own warnings (deprecations, MaxListeners...) as log records: by default Node writes
 * them to stderr as plain text, which would break the NDJSON stream.
 */
export function logProcessWarnings(log: Logger): void {
  process.removeAllListeners('warning');
  process.on('warning', (w) => log.warn({ warning: { name: w.name, code: (w as { code?: string }).code, stack: w.stack } }, w.message));
}
