// Which kind of dump a text is: a probe threads dump (threads.ts), a Go traceback
// (goroutines.ts), or neither. Pure.

import { holdsGoroutineHeader } from './goroutines.js';
import { MAX_DUMP_LINE_CHARS } from './lines.js';

export type DumpKind = 'goroutines' | 'threads' | 'unknown';

// The threads header must be the first non-blank, non-comment line.
const THREADS_HEADER_RE = /^threads of pid \d+ \(/;

export function detectDumpKind(text: string): DumpKind {
  if (typeof text !== 'string' || text.length === 0) return 'unknown';
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    const line = text.slice(start, end).trim();
    if (line !== '' && !line.startsWith('#')) {
      if (THREADS_HEADER_RE.test(line)) return 'threads';
      break;
    }
    start = end + 1;
  }
  return hasGoroutineHeader(text) ? 'goroutines' : 'unknown';
}

/**
 * A goroutine header on some line, at its start or after a log prefix (journal), the line
 * ending in ":" (holdsGoroutineHeader). Lines longer than MAX_DUMP_LINE_CHARS are not looked
 * at (the parser does not read them either).
 */
function hasGoroutineHeader(text: string): boolean {
  // From one "goroutine " to the next line holding one: each line is read once.
  for (let at = text.indexOf('goroutine '); at >= 0; ) {
    const start = text.lastIndexOf('\n', at) + 1;
    let end = text.indexOf('\n', at);
    if (end < 0) end = text.length;
    // The parser's lines end before "\r\n" too.
    const length = end - start - (text.charCodeAt(end - 1) === 13 ? 1 : 0);
    if (length <= MAX_DUMP_LINE_CHARS && holdsGoroutineHeader(text.slice(start, end))) return true;
    at = text.indexOf('goroutine ', end);
  }
  return false;
}
