// Which kind of dump a text is: a probe threads dump (threads.ts), a Go traceback
// (goroutines.ts), or neither. Pure.

export type DumpKind = 'goroutines' | 'threads' | 'unknown';

// The threads header must be the first non-blank, non-comment line.
const THREADS_HEADER_RE = /^threads of pid \d+ \(/;
// A goroutine header anywhere, at the start of a line or after a log prefix (journal).
const GOROUTINE_HEADER_RE = /(?:^|\s)goroutine \d+(?:\s+[A-Za-z]+=\S*)*\s*\[[^\]\n]*\]:[ \t\r]*$/m;

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
  return GOROUTINE_HEADER_RE.test(text) ? 'goroutines' : 'unknown';
}
