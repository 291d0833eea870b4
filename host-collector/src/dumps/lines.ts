// What the dump parsers share about lines: the length cap, and the character classes their
// hand-written scanners use in place of regular expressions.
//
// The line formats used to be matched with regular expressions whose quantifiers could split
// one run of text in many ways, so a hostile line cost time quadratic in its length (a guest
// answering its dump with 110 KB of "goroutine 1 a=[[[…" froze the collector for seconds).
// The scanners read each line a bounded number of times and give the same captures as those
// expressions did (test/dumps-linear.test.ts compares them on random lines).

/**
 * Lines longer than this (in UTF-16 code units, 64 Ki) are not parsed: they are counted in
 * `skippedLines` and in `longLines`. No Go traceback or probe threads-dump line comes near it
 * (Go prints at most ten argument words per frame; comm is 15 bytes).
 */
export const MAX_DUMP_LINE_CHARS = 64 * 1024;

/** The characters JavaScript's \s matches (WhiteSpace and LineTerminator), as String.trim uses them. */
export function isSpace(c: number): boolean {
  return (
    c === 32 ||
    (c >= 9 && c <= 13) ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  );
}

/**
 * The characters a regular expression's "." does not match. A lone CR, LS or PS can sit inside
 * a line (lines are split at "\n" and "\r\n"); the scanners treat them as the expressions did.
 */
export function isLineTerminator(c: number): boolean {
  return c === 10 || c === 13 || c === 0x2028 || c === 0x2029;
}

export function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

// The two scans below run on every line of a dump (180,000 for 10,000 goroutines): indexOf
// and lastIndexOf search natively, several times faster than a loop over charCodeAt.

/** Index of the first line terminator at or after `from`, or `line.length`. */
export function firstLineTerminator(line: string, from: number): number {
  let first = line.length;
  for (const t of LINE_TERMINATORS) {
    const i = line.indexOf(t, from);
    if (i >= 0 && i < first) first = i;
  }
  return first;
}

/** Index of the last line terminator in `line`, or -1. */
export function lastLineTerminator(line: string): number {
  let last = -1;
  for (const t of LINE_TERMINATORS) last = Math.max(last, line.lastIndexOf(t));
  return last;
}

const LINE_TERMINATORS = ['\n', '\r', '\u2028', '\u2029'] as const;

/** Whether the line is empty or all whitespace (as line.trim() === '', without the copy trim makes). */
export function isBlank(line: string): boolean {
  return skipSpace(line, 0) === line.length;
}

/**
 * The text's lines, split at "\n" and "\r\n" (as text.split(/\r?\n/)): a plain split on "\n"
 * when the text holds no "\r", which is several times faster than the expression.
 */
export function splitLines(text: string): string[] {
  return text.includes('\r') ? text.split(/\r?\n/) : text.split('\n');
}

/** End of the run of whitespace starting at `from`. */
export function skipSpace(line: string, from: number): number {
  let i = from;
  while (i < line.length && isSpace(line.charCodeAt(i))) i++;
  return i;
}

/** End of the run of non-whitespace starting at `from`. */
export function skipNonSpace(line: string, from: number): number {
  let i = from;
  while (i < line.length && !isSpace(line.charCodeAt(i))) i++;
  return i;
}

/** Length of `line` without trailing whitespace (as trimEnd). */
export function trimmedEnd(line: string): number {
  let e = line.length;
  while (e > 0 && isSpace(line.charCodeAt(e - 1))) e--;
  return e;
}
