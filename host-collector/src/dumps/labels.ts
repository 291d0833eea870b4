// pprof labels in goroutine headers: Go 1.26 prints them with GODEBUG=tracebacklabels=1, and
// Go 1.27 by default for modules at `go 1.27` (golang CL 694119, golang/go#76349). After the
// state bracket, runtime.goroutineheader (src/runtime/traceback.go) prints
//
//   goroutine 18 gp=0xc000102000 m=nil [chan receive] {worker: mmds, route: "GET /init"}:
//
// " {", then "key: value" pairs joined by ", ", then "}". A key or value is printed bare when
// it holds only [A-Za-z0-9./_] (possibly nothing: an empty value prints as nothing), else
// quoted by printquoted: \n \r \t \\ \" escaped, printable ASCII as is, other runes below 127
// as \xNN, up to U+FFFF as \uNNNN, above as \UNNNNNNNN, a byte that is not UTF-8 as \xNN.
//
// The scanner here reads one such block in one pass (no backtracking). Labels come from the
// guest: a key such as "__proto__" must stay a key, so label sets are objects without a
// prototype; printed back (formatLabels), anything outside printable ASCII is escaped again.

import { isSpace, skipSpace } from './lines.js';

/** A goroutine's pprof labels: key → value (in the header's order, but for integer-like keys, which JavaScript puts first). */
export type Labels = Record<string, string>;

const isHexDigit = (c: number): boolean => (c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);

/** A bare token's characters: what is not whitespace and not one of " : , { }. */
function isBare(c: number): boolean {
  return !isSpace(c) && c !== 34 && c !== 58 && c !== 44 && c !== 123 && c !== 125;
}

/** A code point from an escape; what is not one (a byte that was not UTF-8, past U+10FFFF) becomes U+FFFD, as the dump's bytes do. */
function codePoint(hex: string, byte: boolean): string {
  const n = parseInt(hex, 16);
  if (byte && n >= 0x80) return '\ufffd';
  if (n > 0x10ffff || (n >= 0xd800 && n <= 0xdfff)) return '\ufffd';
  return String.fromCodePoint(n);
}

/** A quoted token starting at the '"' at `at` and ending before `end`: its text and the index after the closing '"'. */
function quotedAt(line: string, at: number, end: number): { text: string; next: number } | undefined {
  let text = '';
  let run = at + 1;
  for (let i = at + 1; i < end; i++) {
    const c = line.charCodeAt(i);
    if (c === 34 /* " */) return { text: text + line.slice(run, i), next: i + 1 };
    if (c !== 92 /* \ */) continue;
    text += line.slice(run, i);
    const e = line.charCodeAt(i + 1);
    const digits = e === 120 /* x */ ? 2 : e === 117 /* u */ ? 4 : e === 85 /* U */ ? 8 : 0;
    if (digits > 0) {
      const hex = line.slice(i + 2, i + 2 + digits);
      if (hex.length !== digits || i + 2 + digits > end) return undefined;
      for (let k = 0; k < digits; k++) if (!isHexDigit(hex.charCodeAt(k))) return undefined;
      text += codePoint(hex, digits === 2);
      i += 1 + digits;
    } else {
      const simple = e === 110 ? '\n' : e === 114 ? '\r' : e === 116 ? '\t' : e === 92 ? '\\' : e === 34 ? '"' : undefined;
      if (simple === undefined || i + 1 >= end) return undefined;
      text += simple;
      i += 1;
    }
    run = i + 1;
  }
  return undefined;
}

/** A bare or quoted token at `at` (before `end`). */
function tokenAt(line: string, at: number, end: number): { text: string; next: number } | undefined {
  if (line.charCodeAt(at) === 34) return quotedAt(line, at, end);
  let i = at;
  while (i < end && isBare(line.charCodeAt(i))) i++;
  return { text: line.slice(at, i), next: i };
}

/**
 * The labels block "{k: v, …}" whose "{" is at `open` and whose "}" is the last character
 * before `end`; undefined unless the block is exactly that. Whitespace around the separators
 * is allowed. When a key repeats, the first value stands (a label set has one per key).
 */
export function parseLabelsBlock(line: string, open: number, end: number): Labels | undefined {
  if (line.charCodeAt(open) !== 123 /* { */ || line.charCodeAt(end - 1) !== 125 /* } */ || end - 1 <= open) return undefined;
  const labels: Labels = Object.create(null) as Labels;
  const close = end - 1;
  let p = skipSpace(line, open + 1);
  if (p === close) return labels;
  for (;;) {
    const key = tokenAt(line, p, close);
    if (!key) return undefined;
    p = skipSpace(line, key.next);
    if (line.charCodeAt(p) !== 58 /* : */) return undefined;
    const value = tokenAt(line, skipSpace(line, p + 1), close);
    if (!value) return undefined;
    if (!Object.hasOwn(labels, key.text)) labels[key.text] = value.text;
    p = skipSpace(line, value.next);
    if (p === close) return labels;
    if (line.charCodeAt(p) !== 44 /* , */) return undefined;
    p = skipSpace(line, p + 1);
  }
}

/** Whether Go prints the string bare (tracebackStringNeedsQuoting is false). */
function printsBare(s: string): boolean {
  return /^[A-Za-z0-9./_]*$/.test(s);
}

/** The string as Go's printquoted writes it: only printable ASCII unescaped. */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const r = ch.codePointAt(0)!;
    if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\\' || ch === '"') out += `\\${ch}`;
    else if (r >= 0x20 && r <= 0x7e) out += ch;
    else if (r < 0x7f) out += `\\x${r.toString(16).padStart(2, '0')}`;
    else if (r < 0x10000) out += `\\u${r.toString(16).padStart(4, '0')}`;
    else out += `\\U${r.toString(16).padStart(8, '0')}`;
  }
  return `${out}"`;
}

/** "{k: v, k2: "v 2"}" as Go prints it; safe for a terminal whatever the guest sent. */
export function formatLabels(labels: Labels): string {
  const q = (s: string) => (printsBare(s) ? s : goQuote(s));
  return `{${Object.keys(labels)
    .map((k) => `${q(k)}: ${q(labels[k]!)}`)
    .join(', ')}}`;
}

/** The identity of a label set, whatever order its keys were printed in. */
export function labelSetKey(labels: Labels): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}\u0001${labels[k]}`)
    .join('\u0000');
}

/** A copy without a prototype (safe against a "__proto__" key), keys in the same order. */
export function copyLabels(labels: Labels): Labels {
  const out: Labels = Object.create(null) as Labels;
  for (const k of Object.keys(labels)) out[k] = labels[k]!;
  return out;
}
