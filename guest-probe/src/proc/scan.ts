/**
 * Tiny byte scanners over the shared read buffer (internal). They avoid substrings, regexes and
 * split(): each parse function returns its value and leaves the index just past the parsed text
 * in `cursor.pos`.
 */

/**
 * `cursor.pos` is the index just past the last token parsed by parseDec / parseHex / skipToken.
 * (A property of a module-level object rather than an exported `let`, so that reads from other
 * modules are plain property loads in every bundler/loader.)
 */
export const cursor = { pos: 0 };

const SPACE = 0x20;
const TAB = 0x09;
const NL = 0x0a;

/** Index of the first byte at or after `i` that is not a space or tab (stops at `end`). */
export function skipBlanks(buf: Uint8Array, i: number, end: number): number {
  while (i < end) {
    const c = buf[i]!;
    if (c !== SPACE && c !== TAB) break;
    i++;
  }
  return i;
}

/**
 * Index of the next '\n' at or after `i`, or `end`. Uses Buffer#indexOf (memchr): about 10×
 * faster than a byte loop on long files such as /proc/net/tcp.
 */
export function lineEnd(buf: Buffer, i: number, end: number): number {
  if (i >= end) return end;
  const j = buf.indexOf(NL, i);
  return j < 0 || j > end ? end : j;
}

/**
 * Parses an optionally negative decimal integer at `i`. Returns NaN (cursor.pos = i) when there are
 * no digits.
 */
export function parseDec(buf: Uint8Array, i: number, end: number): number {
  let neg = false;
  if (i < end && buf[i] === 0x2d) {
    neg = true;
    i++;
  }
  const start = i;
  let v = 0;
  while (i < end) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) break;
    v = v * 10 + d;
    i++;
  }
  cursor.pos = i;
  if (i === start) return NaN;
  return neg ? -v : v;
}

/** Value of one hex digit, or -1. */
export function hexDigit(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20; // fold to lower case
  if (l >= 0x61 && l <= 0x66) return l - 0x61 + 10;
  return -1;
}

/** Parses an unsigned hex integer at `i`; NaN when there are no hex digits. */
export function parseHex(buf: Uint8Array, i: number, end: number): number {
  const start = i;
  let v = 0;
  while (i < end) {
    const d = hexDigit(buf[i]!);
    if (d < 0) break;
    v = v * 16 + d;
    i++;
  }
  cursor.pos = i;
  return i === start ? NaN : v;
}

/** Skips a run of non-blank, non-newline bytes; returns its length (cursor.pos = its end). */
export function skipToken(buf: Uint8Array, i: number, end: number): number {
  const start = i;
  while (i < end) {
    const c = buf[i]!;
    if (c === SPACE || c === TAB || c === NL) break;
    i++;
  }
  cursor.pos = i;
  return i - start;
}

/** True when the ASCII `text` occurs in `buf` at `i` (and fits before `end`). */
export function startsWithAscii(buf: Uint8Array, i: number, end: number, text: string): boolean {
  const len = text.length;
  if (i + len > end) return false;
  for (let k = 0; k < len; k++) {
    if (buf[i + k] !== text.charCodeAt(k)) return false;
  }
  return true;
}

/**
 * Finds the line starting with `label` (e.g. "MemTotal:") in [0, end) and returns the index just
 * past the label, or -1.
 */
export function findLabel(buf: Buffer, end: number, label: string): number {
  let i = 0;
  while (i < end) {
    if (startsWithAscii(buf, i, end, label)) return i + label.length;
    i = lineEnd(buf, i, end) + 1;
  }
  return -1;
}

/** Parses the decimal after the line label `label` (blanks allowed); NaN if absent. */
export function labelledDec(buf: Buffer, end: number, label: string): number {
  const at = findLabel(buf, end, label);
  if (at < 0) return NaN;
  return parseDec(buf, skipBlanks(buf, at, end), end);
}
