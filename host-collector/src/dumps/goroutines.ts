// Go traceback parser: the text a Go program prints on SIGQUIT, on an unrecovered
// panic or fatal error, from runtime/debug.Stack / runtime.Stack(all), or from
// /debug/pprof/goroutine?debug=2. Pure: text in, structure out.
//
// Formats understood (Go 1.17 to today, see src/runtime/traceback.go):
//
//   goroutine 18 [chan receive, 5 minutes]:              header; wait shown only when >= 1 minute
//   goroutine 7 [select, locked to thread]:
//   goroutine 1 gp=0xc000002380 m=0 mp=0x5d0f80 [running]:   newer SIGQUIT/crash headers
//   goroutine 12 gp=0xc000007a40 m=nil [chan receive]:
//   goroutine 3 [GC sweep wait (scan)]:                   " (scan)" is transient and dropped
//   goroutine 9 gp=0x… m=nil [chan receive (leaked)]:      state flags (Go 1.26+): leaked, durable
//   goroutine 5 [select, synctest bubble 2]:               other items: kept in notes
//   goroutine 18 [chan receive] {worker: mmds, id: "a b"}:  pprof labels (Go 1.26 opt-in, 1.27 default; labels.ts)
//   main.(*cgroupManager).acquireRoot(0xc0000a6000, {0x5c4e20, 0x6})   function line; args
//   	/path/file.go:123 +0x1d fp=0x… sp=0x… pc=0x…       file line (tab); +0x… and fp/sp/pc optional
//   main.foo(...)  main.bar(0x5?, ?)                      inlined / inexact / unknown arguments
//   ...additional frames elided...   ...12 frames elided...
//   created by main.main in goroutine 1                   (Go 1.21+) then its file line
//   created by main.main                                  (older) then its file line
//   	goroutine running on other thread; stack unavailable
//
// Lines longer than MAX_DUMP_LINE_CHARS (lines.ts) are not read: they count as skipped,
// and in `longLines`.
//
// Everything else (the "SIGQUIT: quit" / "PC=0x… m=0 sigcode=0" preamble, register dumps
// such as "rax    0xca", "panic: …", "fatal error: …", "runtime stack:" sections, the
// program's own log lines) is recognised and ignored, or counted in skippedLines.
// Lines from `journalctl -o short` / `short-iso` keep their prefix stripped.
//
// The parser never throws: a truncated dump gives the goroutines up to the cut (the
// last frame possibly without file and line, and `truncated: true`), garbage gives
// { goroutines: [], skippedLines: N, headers: 0 }. The raw text is kept by the caller.
//
// No goroutine is dropped silently. A line that starts a goroutine ("goroutine N" followed by
// "[", a key=value item, or nothing: startsGoroutineHeader) but whose header is not
// understood (a format this parser does not know, a labels block it cannot read, a line over
// the cap, a header cut short) still makes a goroutine: `unparsed: true`, state "?", its
// header text and line number kept, its frames read as usual. Apart from the parse, one
// linear scan counts those lines (`headers`), so a goroutine lost by the parser itself shows
// as `headers` > `goroutines.length`.

import { parseLabelsBlock, type Labels } from './labels.js';
import {
  firstLineTerminator,
  isBlank,
  isDigit,
  isLineTerminator,
  isSpace,
  lastLineTerminator,
  MAX_DUMP_LINE_CHARS,
  skipSpace,
  splitLines,
  trimmedEnd,
} from './lines.js';

export interface Frame {
  /** Fully qualified function name as printed, e.g. "main.(*cgroupManager).acquireRoot", "net/http.(*conn).serve", "panic". */
  func: string;
  /** Import path of the function's package, e.g. "main", "net/http", "github.com/x/y"; "runtime" for "panic"; "" when unknown. */
  pkg: string;
  /** Source file as printed ("" when the dump was cut before the file line). */
  file: string;
  /** Line number (0 when unknown). */
  line: number;
  /** The argument text between the parentheses, as printed ("0xc000104000?, {0x6c3198?, 0x6}", "...", ""). */
  args?: string;
}

export interface CreatedBy extends Frame {
  /** The creating goroutine, from "created by X in goroutine N" (Go 1.21+). */
  goroutine?: number;
}

export interface Goroutine {
  id: number;
  /** The wait reason or status as printed: "running", "chan receive", "sync.Mutex.Lock", "IO wait", … */
  state: string;
  /** "N minutes" from the header; absent when the goroutine waited less than a minute (Go omits it). */
  waitMinutes?: number;
  lockedToThread: boolean;
  /** Innermost frame first. */
  frames: Frame[];
  createdBy?: CreatedBy;
  /** Go left frames out ("...additional frames elided..." or "...N frames elided..."). */
  elided: boolean;
  /** "goroutine running on other thread; stack unavailable". */
  stackUnavailable?: boolean;
  /** Header items other than the state, wait and lock (e.g. "synctest bubble 3"), in order. */
  notes?: string[];
  /** pprof labels printed after the state (Go 1.26 with GODEBUG=tracebacklabels=1, Go 1.27 by default). */
  labels?: Labels;
  /** "(leaked)" after the state: the goroutine leak profile (Go 1.26+) found it blocked on something unreachable. */
  leaked?: true;
  /** "(durable)" after the state (or ending the wait reason): durably blocked inside a synctest bubble. */
  durable?: true;
  /** The header was not understood: `state` is "?", `header` holds its text (cut), its frames were read as usual. */
  unparsed?: true;
  /** An unparsed goroutine's header line, cut to HEADER_EXCERPT_CHARS. */
  header?: string;
  /** An unparsed goroutine's line number in the text (1-based). */
  headerLine?: number;
}

export interface GoroutineDump {
  goroutines: Goroutine[];
  /** Lines that start a goroutine, counted apart from the parse (see the top of this file). */
  headers: number;
  /** Non-blank lines that were neither part of a traceback nor known preamble (log lines, garbage). */
  skippedLines: number;
  /** The text stops inside a goroutine: a function line without its file line, a line cut short, or a header with no stack. */
  truncated?: boolean;
  /** The first "SIGQUIT: quit", "panic: …" or "fatal error: …" line, when present. */
  reason?: string;
  /** Lines longer than MAX_DUMP_LINE_CHARS, not read (also counted in skippedLines). */
  longLines?: number;
}

// ---- line patterns ----

// The header and file lines are scanned by hand (headerAt, parseFileLine): as regular
// expressions they backtracked quadratically on hostile lines (see lines.ts). The patterns
// left here cannot split a run of text in more than one way, or are anchored with a bounded
// amount of backtracking at each position, so they run in linear time.
const CREATED_RE = /^created by (\S+?)(?:\s+in goroutine (\d+))?\s*$/;
const ELIDED_RE = /^\.\.\.(?:additional|\d+) frames elided\.\.\.\s*$/;
const UNAVAILABLE_RE = /^\s*goroutine running on other thread; stack unavailable\s*$/;
const REASON_RE = /^(?:SIGQUIT: quit|SIG[A-Z]+: .*|panic: .*|fatal error: .*)$/;
// Known preamble / trailer lines that carry no goroutine: signal details, registers,
// "runtime stack:", "exit status 2", "[signal SIGSEGV: …]", "goroutine N [running]:"'s
// "runtime: …" diagnostics.
const PREAMBLE_RE =
  /^(?:SIG[A-Z]+: .*|PC=0x[0-9a-fA-F]+.*|signal arrived during .*|\[signal .*|panic: .*|\s*\[recovered\].*|fatal error: .*|runtime: .*|runtime stack:|exit status \d+|[a-z][a-z0-9]{1,5}\s+0x[0-9a-fA-F]+|created by .*)$/;
const JOURNAL_PREFIXES = [
  // journalctl -o short: "Jan  2 15:04:05 host envd[123]: "
  /^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s:[]+(?:\[\d+\])?: ?/,
  // journalctl -o short-iso / short-precise variants: "2024-01-02T15:04:05+0000 host envd[123]: "
  /^\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)? \S+ [^\s:[]+(?:\[\d+\])?: ?/,
];

/** How much of an unparsed goroutine's header is kept. */
export const HEADER_EXCERPT_CHARS = 200;

const isLetter = (c: number): boolean => (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
const isHex = (c: number): boolean => isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);

/**
 * The id and the opening "[" of a goroutine header (the line starts with "goroutine ") whose
 * state bracket closes at `close`; `lastClose` is the last "]" before `close` (the
 * state holds none). The pattern this replaces was
 * goroutine (\d+)(?:\s+[A-Za-z]+=\S*)*\s*\[([^\]]*)\] : between the id and the bracket only
 * whitespace-separated key=value items ("gp=0xc000002380 m=nil"), and of the "[" that allows
 * the last one wins (a value may itself hold "[").
 */
function headerAt(line: string, close: number, lastClose: number): { id: number; open: number } | undefined {
  const digits = 'goroutine '.length;
  let i = digits;
  while (i < close && isDigit(line.charCodeAt(i))) i++;
  if (i === digits) return undefined;
  let open = -1;
  // What position k follows: 0 the id, 1 whitespace, 2 an item's key, 3 an item's "=" or value.
  let after = 0;
  for (let k = i; k < close; k++) {
    const c = line.charCodeAt(k);
    if (c === 91 /* [ */ && k > lastClose && after !== 2) open = k;
    if (isSpace(c)) {
      if (after === 2) break;
      after = 1;
    } else if (after === 1 && isLetter(c)) after = 2;
    else if (after === 2 && c === 61 /* = */) after = 3;
    else if (!(after === 3 || (after === 2 && isLetter(c)))) break;
  }
  return open < 0 ? undefined : { id: Number(line.slice(digits, i)), open };
}

/**
 * Where the id of a goroutine header starting at `from` ends, or -1: "goroutine N" followed by
 * "[" (after whitespace or not), by whitespace and a key=value item ("gp=0x…"), or by nothing
 * but whitespace (a header cut short). Prose such as "goroutine 5 exited" is not one.
 */
function headerIdEnd(line: string, from: number): number {
  if (!line.startsWith('goroutine ', from)) return -1;
  const digits = from + 'goroutine '.length;
  let i = digits;
  while (i < line.length && isDigit(line.charCodeAt(i))) i++;
  if (i === digits) return -1;
  const w = skipSpace(line, i);
  if (w === line.length || line.charCodeAt(w) === 91 /* [ */) return i;
  if (w === i) return -1;
  let k = w;
  while (k < line.length && isLetter(line.charCodeAt(k))) k++;
  return k > w && line.charCodeAt(k) === 61 /* = */ ? i : -1;
}

/** Whether a line starts a goroutine, understood or not (see the top of this file). */
export function startsGoroutineHeader(line: string): boolean {
  return headerIdEnd(line, 0) >= 0;
}

/**
 * "goroutine 18 gp=0x… m=nil [chan receive, 5 minutes]:" (the ":" optional): the id, the
 * bracket's text and, after it, the labels block if there is one.
 */
export function parseGoroutineHeader(line: string): { id: number; inner: string; labels?: Labels } | undefined {
  if (!line.startsWith('goroutine ')) return undefined;
  let end = trimmedEnd(line);
  if (line.charCodeAt(end - 1) === 58 /* : */) end--;
  const last = line.charCodeAt(end - 1);
  if (last === 125 /* } */) return labelledHeader(line, end);
  if (last !== 93 /* ] */) return undefined;
  const close = end - 1;
  const h = headerAt(line, close, line.lastIndexOf(']', close - 1));
  return h && { id: h.id, inner: line.slice(h.open + 1, close) };
}

/**
 * A header with labels, "goroutine N ITEMS [STATE] {LABELS}", the "}" at end - 1. Read left to
 * right, as
 * ^goroutine (\d+)(?:\s+[A-Za-z]+=[^\s[]*)*\s*\[([^\]]*)\]\s*\{LABELS\}
 * would: an item's value holds no "[" (Go prints gp=0x…, m=N or nil, mp=0x…), the state holds
 * no "]" (no Go status or wait reason does), and what follows is the labels block (labels.ts),
 * whose quoted values may hold any of "[]{}:,".
 */
function labelledHeader(line: string, end: number): { id: number; inner: string; labels: Labels } | undefined {
  const digits = 'goroutine '.length;
  let k = digits;
  while (k < end && isDigit(line.charCodeAt(k))) k++;
  if (k === digits) return undefined;
  const id = Number(line.slice(digits, k));
  for (;;) {
    const w = skipSpace(line, k);
    if (line.charCodeAt(w) === 91 /* [ */) {
      k = w;
      break;
    }
    if (w === k || w >= end) return undefined;
    let e = w;
    while (e < end && isLetter(line.charCodeAt(e))) e++;
    if (e === w || line.charCodeAt(e) !== 61 /* = */) return undefined;
    e++;
    while (e < end && !isSpace(line.charCodeAt(e)) && line.charCodeAt(e) !== 91) e++;
    k = e;
  }
  const close = line.indexOf(']', k + 1);
  if (close < 0 || close >= end) return undefined;
  const labels = parseLabelsBlock(line, skipSpace(line, close + 1), end);
  return labels && { id, inner: line.slice(k + 1, close), labels };
}

/**
 * Whether a line holds a goroutine header: it ends in ":" and, at its start or after
 * whitespace (a log prefix such as the journal's), "goroutine N" starts one
 * (startsGoroutineHeader). That takes labelled headers, and headers of a format this parser
 * does not know, for a dump too. Each candidate's look ends at the first character that is
 * not a digit, whitespace or letter, so the line is read a bounded number of times.
 */
export function holdsGoroutineHeader(line: string): boolean {
  let end = line.length;
  for (let c = line.charCodeAt(end - 1); c === 32 || c === 9 || c === 13; c = line.charCodeAt(end - 1)) end--;
  if (line.charCodeAt(end - 1) !== 58 /* : */) return false;
  for (let s = line.indexOf('goroutine '); s >= 0; s = line.indexOf('goroutine ', s + 1)) {
    if (s > 0 && !isSpace(line.charCodeAt(s - 1))) continue;
    if (headerIdEnd(line, s) >= 0) return true;
  }
  return false;
}

/**
 * "\t/path/file.go:123 +0x1d fp=… sp=… pc=…": the file and the line, as
 * ^\s+(.+?):(\d+)(?:\s+\+0x[0-9a-fA-F]+)?(?:\s+.*)?$ gave them: the first ":" after the
 * indent that is followed by a line number and then whitespace or the end.
 */
export function parseFileLine(line: string): { file: string; line: number } | undefined {
  return fileLineOf(line, false);
}

/** parseFileLine; `plain`: the line is known to hold no line terminator (its text holds none). */
function fileLineOf(line: string, plain: boolean): { file: string; line: number } | undefined {
  const start = skipSpace(line, 0);
  if (start === 0) return undefined;
  // The file name holds no line terminator (it was ".+?").
  const fileEnd = plain ? line.length : firstLineTerminator(line, start);
  // Where the last one is matters only after the indent: none there, none to look for.
  const lastLT = fileEnd === line.length ? -1 : lastLineTerminator(line);
  for (let c = line.indexOf(':', start + 1); c >= 0 && c < fileEnd; c = line.indexOf(':', c + 1)) {
    const n = lineNumberAt(line, c, lastLT);
    if (n !== undefined) return { file: line.slice(start, c), line: n };
  }
  // "\t\t:12": the expression gave back one character of the indent as the file name.
  if (start >= 2 && line.charCodeAt(start) === 58 && !isLineTerminator(line.charCodeAt(start - 1))) {
    const n = lineNumberAt(line, start, lastLT);
    if (n !== undefined) return { file: line.slice(start - 1, start), line: n };
  }
  return undefined;
}

/**
 * The number after the ":" at `colon`, if what follows it is (whitespace "+0xPC")? and then
 * (whitespace and anything)? up to the end, where "anything" holds no line terminator. The
 * digits, spaces and hex read here hold no ":", so each colon's look stops before the next.
 */
function lineNumberAt(line: string, colon: number, lastLT: number): number | undefined {
  const d0 = colon + 1;
  let d = d0;
  // Summed as it is read (no string): exact up to 15 digits, Number() of the digits beyond.
  let n = 0;
  for (let c = line.charCodeAt(d); d < line.length && isDigit(c); c = line.charCodeAt(++d)) n = n * 10 + (c - 48);
  if (d === d0) return undefined;
  if (d - d0 > 15) n = Number(line.slice(d0, d));
  if (d === line.length) return n;
  if (!isSpace(line.charCodeAt(d))) return undefined;
  const w = skipSpace(line, d);
  if (lastLT < w) return n;
  if (!line.startsWith('+0x', w)) return undefined;
  let h = w + 3;
  while (h < line.length && isHex(line.charCodeAt(h))) h++;
  if (h === w + 3) return undefined;
  if (h === line.length) return n;
  if (!isSpace(line.charCodeAt(h))) return undefined;
  return lastLT < skipSpace(line, h) ? n : undefined;
}

/** Splits "pkg/path.Func" the way the Go runtime's funcpkgpath does: up to the first dot after the last slash. */
export function packageOf(func: string): string {
  if (func === 'panic' || func === 'goexit') return 'runtime';
  // Generic instantiations print as F[...]; the brackets never hold a slash in a traceback,
  // but stay safe and only look before them.
  const bracket = func.indexOf('[');
  const head = bracket >= 0 ? func.slice(0, bracket) : func;
  const slash = head.lastIndexOf('/');
  const dot = head.indexOf('.', slash + 1);
  if (dot < 0) return '';
  // The linker escapes dots in the last path element ("gopkg.in/yaml%2ev3").
  const pkg = head.slice(0, dot);
  return pkg.includes('%') ? pkg.replace(/%2e/gi, '.') : pkg;
}

/** Where the "(" of a function line's arguments is ("pkg.Func(args)"), or -1: the name is still to be checked for whitespace. */
function funcLineOpen(line: string): number {
  if (line.length < 3 || line.charCodeAt(line.length - 1) !== 41 /* ) */) return -1;
  const first = line.charCodeAt(0);
  if (first === 32 || first === 9) return -1;
  // Walk back from the final ")" to its matching "(", so receivers like (*T) stay in the name.
  let depth = 0;
  let open = -1;
  for (let i = line.length - 1; i >= 0; i--) {
    const c = line.charCodeAt(i);
    if (c === 41) depth++;
    else if (c === 40) {
      depth--;
      if (depth === 0) {
        open = i;
        break;
      }
    }
  }
  return open <= 0 ? -1 : open;
}

type HeaderState = Pick<Goroutine, 'state' | 'waitMinutes' | 'lockedToThread' | 'notes' | 'leaked' | 'durable'>;

// Flags the runtime appends to the state (goroutineheader: " (leaked)", " (scan)",
// " (durable)", in that order). "(scan)" only says the GC was scanning the stack at that
// instant: dropped. Parentheses that belong to the wait reason ("chan receive (nil chan)",
// "GC worker (idle)") are kept.
const STATE_FLAGS = [' (scan)', ' (leaked)', ' (durable)'] as const;

function parseHeaderState(inner: string): HeaderState {
  const parts = inner.split(', ');
  let state = (parts[0] ?? '').trim();
  const out: HeaderState = { state: '?', lockedToThread: false };
  for (let again = true; again; ) {
    again = false;
    for (const flag of STATE_FLAGS) {
      if (!state.endsWith(flag)) continue;
      state = state.slice(0, -flag.length);
      if (flag === ' (leaked)') out.leaked = true;
      else if (flag === ' (durable)') out.durable = true;
      again = true;
    }
  }
  out.state = state || '?';
  for (const raw of parts.slice(1)) {
    const p = raw.trim();
    const m = /^(\d+) minutes?$/.exec(p);
    if (m) out.waitMinutes = Number(m[1]);
    else if (p === 'locked to thread') out.lockedToThread = true;
    else if (p) (out.notes ??= []).push(p);
  }
  return out;
}

/** A goroutine whose header line `text` (line `lineNo`) starts one but was not understood. */
function unparsedGoroutine(text: string, lineNo: number): Goroutine {
  const id = Number(/^goroutine (\d+)/.exec(text.slice(0, 40))?.[1] ?? NaN);
  return {
    id,
    state: '?',
    lockedToThread: false,
    frames: [],
    elided: false,
    unparsed: true,
    header: text.slice(0, HEADER_EXCERPT_CHARS),
    headerLine: lineNo,
  };
}

function stripJournalPrefix(lines: string[]): string[] {
  // Only when the dump itself is prefixed: some header carries a prefix and none is bare.
  let prefixed = false;
  for (const line of lines) {
    if (line.length > MAX_DUMP_LINE_CHARS) continue;
    if (startsGoroutineHeader(line)) return lines;
    if (!prefixed && line.includes('goroutine ')) {
      for (const re of JOURNAL_PREFIXES) {
        const m = re.exec(line);
        if (m && startsGoroutineHeader(line.slice(m[0].length))) prefixed = true;
      }
    }
  }
  if (!prefixed) return lines;
  return lines.map((line) => {
    if (line.length > MAX_DUMP_LINE_CHARS) return line;
    for (const re of JOURNAL_PREFIXES) {
      const m = re.exec(line);
      if (m) return line.slice(m[0].length);
    }
    return line;
  });
}

/**
 * What the frames of one parse share: each distinct function name (with its package) and file
 * is kept once. A 10,000-goroutine dump names a few hundred of each in 100,000 frames; shared,
 * the frames hold no string of their own but their arguments, the package is worked out once
 * per name, and the groupings hash each name once.
 */
class Names {
  private readonly funcs = new Map<string, { func: string; pkg: string }>();
  private readonly files = new Map<string, string>();

  /** The function line's name, or undefined when it holds whitespace (then it is not a function line). */
  func(line: string, open: number): { func: string; pkg: string } | undefined {
    const name = line.slice(0, open);
    let f = this.funcs.get(name);
    if (f) return f;
    if (/\s/.test(name)) return undefined;
    f = { func: name, pkg: packageOf(name) };
    this.funcs.set(name, f);
    return f;
  }

  file(name: string): string {
    const f = this.files.get(name);
    if (f !== undefined) return f;
    this.files.set(name, name);
    return name;
  }
}

/** Parses a Go goroutine dump as far as it goes. Never throws. */
export function parseGoroutines(text: string): GoroutineDump {
  const dump: GoroutineDump = { goroutines: [], skippedLines: 0, headers: 0 };
  if (typeof text !== 'string' || text.length === 0) return dump;
  try {
    parseInto(dump, text);
  } catch {
    // Defensive only: the parser does not throw on any input we know of; keep what we have.
  }
  return dump;
}

function parseInto(dump: GoroutineDump, text: string): void {
  const lines = stripJournalPrefix(splitLines(text));
  // The count the parse is checked against: a scan of its own, sharing nothing but the test.
  for (const line of lines) if (line.charCodeAt(0) === 103 /* g */ && startsGoroutineHeader(line)) dump.headers++;

  let cur: Goroutine | undefined;
  // A function line (or "created by") whose file line has not come yet.
  let pending: Frame | undefined;
  // Inside a "runtime stack:" section: frames that belong to no goroutine.
  let systemStack = false;
  // The line just read was not understood while inside a goroutine (at the end of the
  // text: a line cut in the middle, e.g. "main.(*T).f(0xc0".
  let lastSkipped = false;
  const names = new Names();
  // No line holds a line terminator: the file lines' scan need not look for one.
  const plain = text.indexOf('\r') < 0 && text.indexOf('\u2028') < 0 && text.indexOf('\u2029') < 0;
  const states = new Map<string, HeaderState>();

  const startGoroutine = (g: Goroutine) => {
    cur = g;
    dump.goroutines.push(g);
    pending = undefined;
    systemStack = false;
  };

  for (let n = 0; n < lines.length; n++) {
    const line = lines[n]!;
    lastSkipped = false;
    if (line.length > MAX_DUMP_LINE_CHARS) {
      dump.longLines = (dump.longLines ?? 0) + 1;
      // Too long to read, but a goroutine all the same: its frames follow.
      if (line.charCodeAt(0) === 103 /* g */ && startsGoroutineHeader(line)) {
        startGoroutine(unparsedGoroutine(line, n + 1));
        continue;
      }
      dump.skippedLines++;
      lastSkipped = cur !== undefined;
      continue;
    }
    if (isBlank(line)) {
      // Go separates goroutines with a blank line.
      cur = undefined;
      pending = undefined;
      systemStack = false;
      continue;
    }

    if (line.charCodeAt(0) === 103 /* g */) {
      const h = parseGoroutineHeader(line);
      if (h) {
        let st = states.get(h.inner);
        if (!st) states.set(h.inner, (st = parseHeaderState(h.inner)));
        const g: Goroutine = { id: h.id, ...st, frames: [], elided: false };
        if (st.notes) g.notes = st.notes.slice();
        if (h.labels) g.labels = h.labels;
        startGoroutine(g);
        continue;
      }
      if (startsGoroutineHeader(line)) {
        startGoroutine(unparsedGoroutine(line, n + 1));
        continue;
      }
    }

    const indented = line.charCodeAt(0) === 9 || line.charCodeAt(0) === 32;
    if (indented) {
      if (cur && line.charCodeAt(skipSpace(line, 0)) === 103 /* g */ && UNAVAILABLE_RE.test(line)) {
        cur.stackUnavailable = true;
        continue;
      }
      const f = fileLineOf(line, plain);
      if (f && pending) {
        pending.file = names.file(f.file);
        pending.line = f.line;
        pending = undefined;
        continue;
      }
      if (f && systemStack) continue;
      // "\tpanic: boom" under "panic: boom [recovered]", and similar preamble.
      if (!cur && PREAMBLE_RE.test(line.trim())) continue;
      dump.skippedLines++;
      lastSkipped = cur !== undefined;
      continue;
    }

    if (cur) {
      if (line.startsWith('created by ')) {
        const c = CREATED_RE.exec(line);
        if (c) {
          const { func, pkg } = names.func(c[1]!, c[1]!.length)!;
          const createdBy: CreatedBy = { func, pkg, file: '', line: 0 };
          if (c[2] !== undefined) createdBy.goroutine = Number(c[2]);
          cur.createdBy = createdBy;
          pending = createdBy;
          continue;
        }
      }
      if (line.charCodeAt(0) === 46 /* . */ && ELIDED_RE.test(line)) {
        cur.elided = true;
        pending = undefined;
        continue;
      }
      const open = funcLineOpen(line);
      const fn = open < 0 ? undefined : names.func(line, open);
      if (fn) {
        const frame: Frame = { func: fn.func, pkg: fn.pkg, file: '', line: 0, args: line.slice(open + 1, -1) };
        cur.frames.push(frame);
        pending = frame;
        continue;
      }
    } else {
      if (line === 'runtime stack:') {
        systemStack = true;
        continue;
      }
      // The runtime's own stack (after a fatal error) belongs to no goroutine: its function
      // lines are recognised and passed over, not counted as skipped.
      if (systemStack) {
        const open = funcLineOpen(line);
        if (open >= 0 && names.func(line, open)) continue;
      }
    }

    if (dump.reason === undefined && REASON_RE.test(line)) dump.reason = line.trim();
    if (PREAMBLE_RE.test(line)) continue;
    dump.skippedLines++;
    lastSkipped = cur !== undefined;
  }

  const last = dump.goroutines[dump.goroutines.length - 1];
  if (last && cur === last) {
    if (pending || lastSkipped || (last.frames.length === 0 && !last.stackUnavailable)) dump.truncated = true;
  }
}
