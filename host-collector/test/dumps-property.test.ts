// Property tests for the traceback parsers (goroutines.ts, threads.ts), which read dump text
// the guest wrote: real dumps cut, spliced, garbled and padded, and token soup. Whatever the
// text, a parse returns (never throws), in bounded time, with no more goroutines or tasks
// than the text has headers, and the same answer twice. Seeded (test/support/prng.ts).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Prng } from '../../test/support/prng.js';
import { parseGoroutines } from '../src/dumps/goroutines.js';
import { parseThreads } from '../src/dumps/threads.js';

const SEED = 777;
const here = path.dirname(fileURLToPath(import.meta.url));
const fixture = (name: string) => fs.readFileSync(path.join(here, 'fixtures/dumps', name), 'utf8');
const GO = fixture('fake-envd-go1.19-sigquit-cgroup-hang.txt');
const THREADS = fixture('threads-fake-envd-x86_64-1.txt') + fixture('threads-fake-envd-x86_64-2.txt');

const TOKENS = [
  'goroutine ',
  '1',
  '18446744073709551615',
  ' [',
  ']',
  ':',
  'running',
  'chan receive, 5 minutes',
  ' {',
  '}',
  '"k": "v"',
  '\\"',
  'created by ',
  ' in goroutine ',
  '\t',
  '/usr/lib/go/src/runtime/proc.go:',
  ' +0x',
  'ff',
  'main.main()',
  '(0x1, 0x2)',
  '...additional frames elided...',
  'task ',
  'threads of pid ',
  ' (envd)',
  ' state=S',
  ' wchan=futex_wait',
  ' syscall=202 0x1 0x2',
  ' arch=x86_64',
  '[<0>] ',
  'do_syscall_64+0x5b/0x80',
  '\n',
  '\r\n',
  ' ',
  '\u0000',
  '<img src=x onerror=alert(1)>',
  '\u{1f600}',
];

/** A dump-like text: a real dump mutated line-wise and char-wise, or token soup. */
function text(r: Prng, base: string, other: string): string {
  if (r.chance(0.2)) return Array.from({ length: r.int(0, 3000) }, () => r.pick(TOKENS)).join('');
  let lines = base.split('\n');
  const otherLines = other.split('\n');
  for (let k = r.int(1, 12); k > 0; k--) {
    const i = r.int(0, lines.length - 1);
    switch (r.int(0, 6)) {
      case 0:
        lines.splice(i, r.int(1, 5));
        break;
      case 1:
        lines.splice(i, 0, ...lines.slice(i, i + r.int(1, 20)));
        break;
      case 2:
        lines.splice(i, 0, r.pick(otherLines));
        break;
      case 3: {
        const l = lines[i] ?? '';
        const at = r.int(0, l.length);
        lines[i] = l.slice(0, at) + r.pick(TOKENS) + l.slice(at + r.int(0, 3));
        break;
      }
      case 4:
        lines[i] = r.pick(TOKENS).repeat(r.int(1, r.chance(0.1) ? 200_000 : 200));
        break;
      case 5:
        lines = lines.slice(0, i);
        break;
      default:
        lines[i] = (lines[i] ?? '').replace(/\s+/g, r.pick(['', ' ', '\t', '  ']));
    }
  }
  const out = lines.join(r.chance(0.2) ? '\r\n' : '\n');
  return r.chance(0.2) ? out.slice(0, r.int(0, out.length)) : out;
}

const count = (t: string, re: RegExp) => t.match(re)?.length ?? 0;

describe('traceback parsers on hostile text', () => {
  it('parseGoroutines: returns, quickly, no more goroutines than headers, the same twice', () => {
    const r = new Prng(SEED);
    expect(parseGoroutines(GO).goroutines.length).toBeGreaterThan(5);
    for (let run = 0; run < 400; run++) {
      const t = text(r, GO, THREADS);
      const t0 = performance.now();
      const d = parseGoroutines(t);
      expect(performance.now() - t0, `run ${run} (seed ${SEED}), ${t.length} chars`).toBeLessThan(3000);
      expect(d.goroutines.length).toBeLessThanOrEqual(count(t, /goroutine /g));
      for (const g of d.goroutines) expect(Number.isFinite(g.id)).toBe(true);
      expect(parseGoroutines(t)).toEqual(d);
    }
  }, 120_000);

  it('parseThreads: returns, quickly, no more tasks than task lines, the same twice', () => {
    const r = new Prng(SEED + 1);
    expect(parseThreads(THREADS).tasks.length).toBeGreaterThan(3);
    for (let run = 0; run < 400; run++) {
      const t = text(r, THREADS, GO);
      const t0 = performance.now();
      const d = parseThreads(t);
      expect(performance.now() - t0, `run ${run} (seed ${SEED + 1}), ${t.length} chars`).toBeLessThan(3000);
      expect(d.tasks.length).toBeLessThanOrEqual(count(t, /task /g));
      expect(parseThreads(t)).toEqual(d);
    }
  }, 120_000);
});
