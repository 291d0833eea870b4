import pino from 'pino';

export type Logger = pino.Logger;

/** JSON lines on stderr (stdout stays free for CLI output); level from VSOCKDIAG_LOG_LEVEL. */
export function createLogger(): Logger {
  return pino({ level: process.env.VSOCKDIAG_LOG_LEVEL ?? 'info', base: { app: 'vsockdiag' } }, pino.destination(2));
}
