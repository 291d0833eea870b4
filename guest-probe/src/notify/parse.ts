// Parser for sd_notify datagrams: newline-separated KEY=VALUE assignments.

import { cutString } from '../logs/lines.js';

export interface NotifyMessage {
  /** Every valid assignment, unknown keys included (first occurrence of a key wins, as in systemd). */
  fields: Record<string, string>;
  /** PHASE= */
  phase?: string;
  /** STATUS= */
  status?: string;
  /** READY=1 */
  ready: boolean;
  /** STOPPING=1 */
  stopping: boolean;
  /** MAINPID=, when it is a positive decimal integer */
  mainPid?: number;
  /** ERRNO=, when it is a non-negative decimal integer */
  errno?: number;
  /** Lines that are not KEY=VALUE with KEY matching [A-Z0-9_]+ */
  invalid: number;
}

/** Values longer than this (UTF-16 code units) are cut. */
export const MAX_VALUE_CHARS = 1024;
/** Keys longer than this are counted as invalid. */
export const MAX_KEY_CHARS = 1024;
/** At most this many distinct keys are kept; further new keys are dropped. */
export const MAX_KEYS = 64;

const KEY_RE = /^[A-Z0-9_]+$/;
const DECIMAL_RE = /^[0-9]{1,15}$/;

const decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

const cut = (value: string) => cutString(value, MAX_VALUE_CHARS);

function decimal(value: string | undefined): number | undefined {
  return value !== undefined && DECIMAL_RE.test(value) ? Number(value) : undefined;
}

/**
 * Parses one sd_notify datagram. Never throws: bad lines are counted in `invalid`,
 * bytes that are not UTF-8 become U+FFFD, empty lines (and so a trailing newline)
 * are ignored.
 */
export function parseNotify(buf: Buffer): NotifyMessage {
  const text = decoder.decode(buf);
  const fields = new Map<string, string>();
  let invalid = 0;

  // Walk the lines with indexOf: a huge input must not become a huge array.
  // nextEq caches the next '=' so lines without one do not rescan the rest of the text.
  let start = 0;
  let nextEq = -1;
  while (start <= text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    if (end > start) {
      if (nextEq < start) {
        nextEq = text.indexOf('=', start);
        if (nextEq < 0) nextEq = text.length;
      }
      const eq = nextEq;
      if (eq >= end || eq === start || eq - start > MAX_KEY_CHARS) {
        invalid++;
      } else {
        const key = text.slice(start, eq);
        if (!KEY_RE.test(key)) {
          invalid++;
        } else if (!fields.has(key) && fields.size < MAX_KEYS) {
          fields.set(key, cut(text.slice(eq + 1, Math.min(end, eq + 1 + MAX_VALUE_CHARS + 1))));
        }
      }
    }
    start = end + 1;
  }

  const msg: NotifyMessage = {
    // fromEntries defines own data properties, so no key can reach a setter such as
    // __proto__ (which the key pattern rejects anyway).
    fields: Object.fromEntries(fields),
    ready: fields.get('READY') === '1',
    stopping: fields.get('STOPPING') === '1',
    invalid,
  };
  const phase = fields.get('PHASE');
  if (phase !== undefined) msg.phase = phase;
  const status = fields.get('STATUS');
  if (status !== undefined) msg.status = status;
  const mainPid = decimal(fields.get('MAINPID'));
  if (mainPid !== undefined && mainPid > 0) msg.mainPid = mainPid;
  const errno = decimal(fields.get('ERRNO'));
  if (errno !== undefined) msg.errno = errno;
  return msg;
}
