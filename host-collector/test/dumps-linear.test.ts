// The dump parsers' line scanners (issue 11, hole 2): the regular expressions they replace
// backtracked quadratically (a 20 KB line cost 240–390 ms each; 110 KB of "goroutine 1 a=[[[…"
// froze the collector). Here: the scanners give what the old expressions gave, on random lines
// built from the pieces that matter (the old expressions are kept below as the reference, run
// only on short lines); 1 MB hostile lines, each of the shapes that made an expression
// backtrack, take well under a second; and lines over the cap are counted, not read.
import { describe, expect, it } from 'vitest';
import { analyzeDump } from '../src/dumps/analyze.js';
import { detectDumpKind } from '../src/dumps/detect.js';
import { holdsGoroutineHeader, parseFileLine, parseGoroutineHeader, parseGoroutines } from '../src/dumps/goroutines.js';
import { MAX_DUMP_LINE_CHARS, firstLineTerminator, isBlank, lastLineTerminator, splitLines } from '../src/dumps/lines.js';
import { parseStackLine, parseTaskLine, parseThreads, parseThreadsHeader } from '../src/dumps/threads.js';

// The expressions as they were (host-collector/src/dumps before the fix).
const OLD = {
  goroutineHeader: /^goroutine (\d+)((?:\s+[A-Za-z]+=\S*)*)\s*\[([^\]]*)\]:?\s*$/,
  fileLine: /^\s+(.+?):(\d+)(?:\s+\+0x[0-9a-fA-F]+)?(?:\s+.*)?$/,
  threadsHeader: /^threads of pid (\d+) \((.*)\)(?:\s+arch=(\S+))?\s*$/,
  task: /^task (\d+) \((.*)\) state=(\S+)(?:\s+wchan=(\S*))?(?:\s+syscall=(\S*))?(.*)$/,
  stack: /^\s*\[<[0-9a-fA-Fx]*>\]\s+(\S.*?)\s*$/,
};

// What the scanners added since (issue 12) do, as expressions: the reference they are held to.
const ESCAPE = String.raw`\\(?:[nrt\\"]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})`;
const TOKEN = String.raw`(?:"(?:[^"\\]|${ESCAPE})*"|[^\s":,{}]*)`;
const PAIR = String.raw`${TOKEN}\s*:\s*${TOKEN}\s*`;
const NEW = {
  // A header with pprof labels after the state bracket (Go 1.26 opt-in, 1.27 default).
  labelledHeader: new RegExp(
    String.raw`^goroutine (\d+)(?:\s+[A-Za-z]+=[^\s[]*)*\s*\[([^\]]*)\]\s*\{\s*(?:${PAIR}(?:,\s*${PAIR})*)?\}:?\s*$`,
  ),
  // A line holding a header: it ends in ":" and "goroutine N" starts one at its start or after whitespace.
  detectHeader: (line: string) => /:[ \t\r]*$/.test(line) && /(?:^|\s)goroutine \d+(?:\s*\[|\s+[A-Za-z]+=)/.test(line),
};

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** `count` random lines of up to `max` pieces, half of them starting with `lead`. */
function randomLines(seed: number, lead: string, pieces: readonly string[], count = 20_000, max = 14): string[] {
  const rand = rng(seed);
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    let line = rand() < 0.5 ? lead : '';
    const n = Math.floor(rand() * max);
    for (let j = 0; j < n; j++) line += pieces[Math.floor(rand() * pieces.length)];
    out.push(line);
  }
  return out;
}

// Line terminators the parsers can meet inside a line (lines are split at \n and \r\n only),
// and a no-break space (whitespace to \s, not to a plain " " test).
const ODD = ['\r', '\u2028', '\u2029', '\u00a0'];

describe('the scanners give what the old expressions gave', () => {
  it('goroutine headers', () => {
    const pieces = ['1', '12', ' ', '\t', 'a', 'gp', '=', '0x1', '[', ']', ':', 'x', ',', ' [running]:', 'm=nil', 'goroutine ', ...ODD];
    for (const line of randomLines(1, 'goroutine ', pieces)) {
      const m = OLD.goroutineHeader.exec(line);
      expect(parseGoroutineHeader(line), JSON.stringify(line)).toEqual(m ? { id: Number(m[1]), inner: m[3] } : undefined);
    }
  });

  it('goroutine headers with labels', () => {
    const pieces = [
      '1',
      ' ',
      '\t',
      'a',
      ' gp=0x1',
      ' m=nil',
      '=',
      '[',
      ']',
      ' [running] {',
      '[x] {',
      ' {',
      '{',
      '}',
      ':',
      'k: v',
      ': ',
      ',',
      ', ',
      '"',
      '"a b"',
      '"\\x41"',
      '\\',
      '\\"',
      '\\x41',
      '\\u00e9',
      '\\U0001f600',
      '\\q',
      '\\x4',
      'k',
      ...ODD,
    ];
    const lines = randomLines(7, 'goroutine 1', pieces, 30_000, 10).map((l, i) => (i % 3 === 0 ? l : `${l}}${i % 3 === 1 ? ':' : ''}`));
    let matched = 0;
    for (const line of lines) {
      const m = NEW.labelledHeader.exec(line);
      if (m) matched++;
      const got = parseGoroutineHeader(line);
      // Lines that end in "]" are the old form (the test above); the rest must match the labelled form exactly.
      if (/\]:?\s*$/.test(line)) continue;
      expect(got && { id: got.id, inner: got.inner }, JSON.stringify(line)).toEqual(m ? { id: Number(m[1]), inner: m[2] } : undefined);
      if (got) expect(got.labels, JSON.stringify(line)).toBeDefined();
    }
    expect(matched).toBeGreaterThan(50); // the pieces do make headers
  });

  it('goroutine headers anywhere in a line (detection)', () => {
    const pieces = [
      '1',
      ' ',
      '\t',
      'a',
      'b=',
      '=',
      '[',
      ']',
      ':',
      'x',
      '{',
      '}',
      'goroutine ',
      'goroutine 3',
      'envd[1]: ',
      ']:',
      ' [running]:',
      ...ODD,
    ];
    for (const line of randomLines(2, 'goroutine ', pieces)) {
      expect(holdsGoroutineHeader(line), JSON.stringify(line)).toBe(NEW.detectHeader(line));
      expect(holdsGoroutineHeader(`log: ${line} `), JSON.stringify(line)).toBe(NEW.detectHeader(`log: ${line} `));
    }
  });

  it('file lines', () => {
    const pieces = ['\t', ' ', '/p', 'a', 'C', ':', '1', '12', '+0x', '1d', 'g', ' fp=0x1', '+', ...ODD];
    for (const line of randomLines(3, '\t', pieces)) {
      const m = OLD.fileLine.exec(line);
      expect(parseFileLine(line), JSON.stringify(line)).toEqual(m ? { file: m[1], line: Number(m[2]) } : undefined);
    }
  });

  it('lines, blank lines and the line-terminator scans (their fast paths)', () => {
    const pieces = ['a', ' ', '\t', '\n', '\r\n', '\r', ':', ...ODD];
    for (const text of randomLines(9, '', pieces, 2_000, 30)) {
      expect(splitLines(text), JSON.stringify(text)).toEqual(text.split(/\r?\n/));
      for (const line of text.split('\n')) {
        expect(isBlank(line)).toBe(line.trim() === '');
        expect(lastLineTerminator(line)).toBe(Math.max(...[...line].map((c, i) => (/[\n\r\u2028\u2029]/.test(c) ? i : -1)), -1));
        const from = Math.floor(line.length / 2);
        const first = [...line].findIndex((c, i) => i >= from && /[\n\r\u2028\u2029]/.test(c));
        expect(firstLineTerminator(line, from)).toBe(first < 0 ? line.length : first);
      }
    }
  });

  it('threads headers', () => {
    const pieces = ['1', ' (', '(', ')', ' ', '\t', 'arch=', 'x86_64', 'a', ') arch=', ...ODD];
    for (const line of randomLines(4, 'threads of pid ', pieces)) {
      const m = OLD.threadsHeader.exec(line);
      const want = m ? { pid: Number(m[1]), comm: m[2], ...(m[3] !== undefined ? { arch: m[3] } : {}) } : undefined;
      expect(parseThreadsHeader(line), JSON.stringify(line)).toEqual(want);
    }
  });

  it('task lines', () => {
    const pieces = [
      '1',
      ' (',
      ')',
      ') state=',
      ' state=',
      'S',
      ' ',
      '\t',
      ' wchan=',
      'wchan=',
      ' syscall=',
      '202',
      '0x1',
      'futex',
      'x',
      ...ODD,
    ];
    for (const line of randomLines(5, 'task 1 (', pieces, 30_000, 16)) {
      const m = OLD.task.exec(line);
      const want = m
        ? {
            tid: Number(m[1]),
            comm: m[2],
            state: m[3],
            ...(m[4] !== undefined ? { wchan: m[4] } : {}),
            ...(m[5] !== undefined ? { syscall: m[5] } : {}),
            rest: m[6],
          }
        : undefined;
      expect(parseTaskLine(line), JSON.stringify(line)).toEqual(want);
    }
  });

  it('kernel stack lines', () => {
    const pieces = [' ', '\t', '[<', '0', 'x', 'f', '>]', 'futex_wait', '+0x60/0x90', 'a b', ...ODD];
    for (const line of randomLines(6, '  [<0>] ', pieces)) {
      const m = OLD.stack.exec(line);
      expect(parseStackLine(line), JSON.stringify(line)).toBe(m ? m[1] : undefined);
    }
  });
});

/** Milliseconds `f` takes. */
function timed(f: () => unknown): number {
  const t0 = performance.now();
  f();
  return performance.now() - t0;
}

// Quadratic on a 1 MB line would be minutes; linear is milliseconds. The bound is generous
// for a loaded 2-core machine.
const BOUND_MS = 2000;
const MB = 1_000_000;

describe('1 MB hostile lines take well under a second', () => {
  const cases: Array<[string, () => unknown]> = [
    ['header: goroutine 1 a=[[[…', () => parseGoroutineHeader(`goroutine 1 a=${'['.repeat(MB)}`)],
    ['header: goroutine 1 a=[[[…]:', () => parseGoroutineHeader(`goroutine 1 a=${'['.repeat(MB)}]:`)],
    ['header: items a=[ … then ]:', () => parseGoroutineHeader(`goroutine 1${' a=['.repeat(MB / 4)}]:`)],
    ['header: whitespace before ]', () => parseGoroutineHeader(`goroutine 1 [${' '.repeat(MB)}x]`)],
    ['labels: goroutine 1 [x] {a: b, a: b, … }:', () => parseGoroutineHeader(`goroutine 1 [x] {${'a: b, '.repeat(MB / 6)}a: b}:`)],
    ['labels: one quoted value of a million escapes', () => parseGoroutineHeader(`goroutine 1 [x] {a: "${'\\"'.repeat(MB / 2)}"}`)],
    ['labels: a: " × 250,000 (never closed)', () => parseGoroutineHeader(`goroutine 1 [x] {${'a: "'.repeat(MB / 4)}}`)],
    ['labels: items a= × 330,000 and no [', () => parseGoroutineHeader(`goroutine 1${' a='.repeat(MB / 3)}}`)],
    ['labels: [ then a million ] { …', () => parseGoroutineHeader(`goroutine 1 [${'] {'.repeat(MB / 3)}}`)],
    ['detect: goroutine 1 a=[[[…]:', () => holdsGoroutineHeader(`goroutine 1 a=${'['.repeat(MB)}]:`)],
    ['detect: " goroutine 1 aaa…" × 1,000 then :', () => holdsGoroutineHeader(`${` goroutine 1 ${'a'.repeat(1000)}`.repeat(MB / 1000)}:`)],
    ['detect: " goroutine 1" × 90,000 then [x]:', () => holdsGoroutineHeader(`${' goroutine 1'.repeat(MB / 12)} [x]:`)],
    ['detect: " goroutine 1 a=[" × 70,000 then ]:', () => holdsGoroutineHeader(`${' goroutine 1 a=['.repeat(MB / 15)}]:`)],
    ['file: \\t a:1 a:1 …', () => parseFileLine(`\t${'a:1 '.repeat(MB / 4)}`)],
    ['file: \\t a:1x a:1x …', () => parseFileLine(`\t${'a:1x'.repeat(MB / 4)}`)],
    ['file: indent of a million tabs', () => parseFileLine(`${'\t'.repeat(MB)}x`)],
    ['file: :1 +0x1 and a line separator', () => parseFileLine(`\t${'a:1 +0x1 '.repeat(MB / 9)}\u2028`)],
    ['stack: [<0>] a, spaces, b', () => parseStackLine(`  [<0>] a${' '.repeat(MB)}b`)],
    ['stack: [< and a million x', () => parseStackLine(`  [<${'x'.repeat(MB)}`)],
    ['stack: [<0>] and a line separator', () => parseStackLine(`  [<0>] ${'a '.repeat(MB / 2)}\u2028b`)],
    ['threads header: ( ) ) ) …', () => parseThreadsHeader(`threads of pid 1 (${')'.repeat(MB)}x`)],
    ['threads header: ) arch=x × …', () => parseThreadsHeader(`threads of pid 1 (${') arch=x'.repeat(MB / 8)}) y`)],
    ['task: ) state=x × … and a line separator', () => parseTaskLine(`task 1 (${') state=x'.repeat(MB / 8)}\u2028`)],
    ['task: ) state= × …', () => parseTaskLine(`task 1 (${') state= '.repeat(MB / 9)}`)],
    ['task: wchan= syscall= × …', () => parseTaskLine(`task 1 (a) state=S${' wchan=a syscall=1'.repeat(MB / 18)}\u2028`)],
  ];
  for (const [name, f] of cases) {
    it(name, () => {
      expect(timed(f)).toBeLessThan(BOUND_MS);
    });
  }
});

describe('the line cap', () => {
  it('lines over MAX_DUMP_LINE_CHARS are counted and not read; dumps of lines just under it stay fast', () => {
    const longLine = `\t${'x'.repeat(MAX_DUMP_LINE_CHARS)}`;
    const long = `goroutine 1 a=${'['.repeat(MAX_DUMP_LINE_CHARS)}]:`;
    const goroutines = `goroutine 7 [running]:\nmain.main()\n${longLine}\n\n${long}`;
    const g = parseGoroutines(goroutines);
    expect(g.longLines).toBe(2);
    expect(g.skippedLines).toBe(1); // the frame's file line
    // A header too long to read still makes a goroutine, marked, with its text cut.
    expect(g.goroutines.map((x) => x.id)).toEqual([7, 1]);
    expect(g.headers).toBe(2);
    expect(g.goroutines[1]).toMatchObject({ unparsed: true, state: '?', headerLine: 5 });
    expect(g.goroutines[1]!.header!.length).toBeLessThan(1000);
    expect(g.truncated).toBe(true); // goroutine 1 has no stack
    expect(detectDumpKind(long)).toBe('unknown');
    const a = analyzeDump(goroutines);
    expect(a.kind === 'goroutines' && a.longLines).toBe(2);
    expect(a.kind === 'goroutines' && a.unparsedHeaders).toEqual([{ line: 5, id: 1, text: long.slice(0, 200) }]);

    const threads = `threads of pid 1 (envd) arch=x86_64\ntask 1 (envd) state=S wchan=0 syscall=running\n  [<0>] ${'x'.repeat(MAX_DUMP_LINE_CHARS)}\n`;
    const t = parseThreads(threads);
    expect(t.tasks).toHaveLength(1);
    expect(t.tasks[0]!.stack).toEqual([]);
    expect(t.tasks[0]!.notes).toBeUndefined();
    expect(t.longLines).toBe(1);
    const b = analyzeDump(threads);
    expect(b.kind === 'threads' && b.threads.longLines).toBe(1);

    // About 1 MB of hostile lines each just under the cap, through detection, parsing and grouping.
    const under = MAX_DUMP_LINE_CHARS - 100;
    const shapes = [
      `goroutine 1 a=${'['.repeat(under)}`,
      `\t${'a:1x'.repeat(under / 4)}`,
      `created by ${'a'.repeat(under / 2)}${' '.repeat(under / 2)}x`,
      `Jan  2 15:04:05 ${'h'.repeat(under / 2)} ${'e'.repeat(under / 2)}[`,
      `${' goroutine 1 a=['.repeat(under / 15)}]:`,
    ];
    const hostileGo = Array.from({ length: 16 }, (_, i) => shapes[i % shapes.length]).join('\n');
    expect(timed(() => analyzeDump(`goroutine 1 [running]:\n${hostileGo}`))).toBeLessThan(BOUND_MS);
    const taskShapes = [
      `task 1 (${') state=x'.repeat(under / 8)}\u2028`,
      `  [<0>] a${' '.repeat(under)}b`,
      `task 2 (a) state=S${' wchan=a syscall=1'.repeat(under / 18)}\u2028`,
    ];
    const hostileThreads = Array.from({ length: 16 }, (_, i) => taskShapes[i % taskShapes.length]).join('\n');
    expect(timed(() => analyzeDump(`threads of pid 1 (${')'.repeat(under)}x\n${hostileThreads}`))).toBeLessThan(BOUND_MS);
  });
});
