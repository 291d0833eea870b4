import { describe, expect, it } from 'vitest';
import { MAX_LOG_LINE } from '@vsockdiag/proto';
import { LineSplitter, cutString } from '../src/logs/lines.js';

function collect(maxChars?: number) {
  const lines: Array<[string, boolean]> = [];
  const s = new LineSplitter((line, cut) => lines.push([line, cut]), maxChars);
  return { s, lines, texts: () => lines.map(([l]) => l) };
}

describe('LineSplitter', () => {
  it('splits lines, handles CRLF, flushes a final partial line on end()', () => {
    const { s, lines } = collect();
    s.feed(Buffer.from('one\r\ntwo\nthr'));
    s.feed(Buffer.from('ee\r'));
    s.feed(Buffer.from('\n\nlast'));
    expect(lines).toEqual([
      ['one', false],
      ['two', false],
      ['three', false],
      ['', false],
    ]);
    s.end();
    expect(lines.at(-1)).toEqual(['last', false]);
    expect(s.counters).toEqual({ lines: 5, cut: 0, bytes: 21 });
    // end() with nothing pending reports nothing; feeding afterwards works
    s.end();
    s.feed(Buffer.from('again\n'));
    expect(lines.at(-1)).toEqual(['again', false]);
    expect(s.counters.lines).toBe(6);
  });

  it('gives the same lines whatever the chunk boundaries, multi-byte UTF-8 included', () => {
    const text = 'héllo wörld\r\n€ 100\n😀 grin\ttab\nżółć\nplain\n';
    const bytes = Buffer.from(text, 'utf8');
    const expected = ['héllo wörld', '€ 100', '😀 grin\ttab', 'żółć', 'plain'];
    // one cut anywhere
    for (let i = 0; i <= bytes.length; i++) {
      const { s, texts } = collect();
      s.feed(bytes.subarray(0, i));
      s.feed(bytes.subarray(i));
      s.end();
      expect(texts(), `split at ${i}`).toEqual(expected);
    }
    // every byte on its own
    const { s, texts } = collect();
    for (let i = 0; i < bytes.length; i++) s.feed(bytes.subarray(i, i + 1));
    s.end();
    expect(texts()).toEqual(expected);
    expect(s.counters.bytes).toBe(bytes.length);
  });

  it('replaces invalid UTF-8 and control characters, keeps tabs', () => {
    const { s, texts } = collect();
    s.feed(Buffer.from([0x61, 0xff, 0xfe, 0x62, 0x0a])); // a, invalid, invalid, b
    s.feed(Buffer.from([0xe2, 0x82, 0x0a])); // truncated 3-byte sequence
    s.feed(Buffer.from('nul\0bell\x07esc\x1b[31mred\tdel\x7fcr\rmid\n'));
    s.feed(Buffer.from('c1:\u0085\u009b\n', 'utf8'));
    const out = texts();
    expect(out[0]).toBe('a\ufffd\ufffdb');
    expect(out[1]).toBe('\ufffd');
    expect(out[2]).toBe('nul\ufffdbell\ufffdesc\ufffd[31mred\tdel\ufffdcr\ufffdmid');
    expect(out[3]).toBe('c1:\ufffd\ufffd');
  });

  it('survives binary garbage', () => {
    const { s, lines } = collect();
    let seed = 12345;
    const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) % 256;
    const garbage = Buffer.alloc(1 << 20);
    for (let i = 0; i < garbage.length; i++) garbage[i] = rand();
    for (let i = 0; i < garbage.length; i += 4093) s.feed(garbage.subarray(i, i + 4093));
    s.end();
    const newlines = garbage.filter((b) => b === 0x0a).length;
    expect(lines.length).toBe(newlines + 1);
    for (const [line] of lines) {
      expect(line.length).toBeLessThanOrEqual(MAX_LOG_LINE);
      // biome-ignore lint/suspicious/noControlCharactersInRegex: asserts that none are left
      expect(line).not.toMatch(/[\x00-\x08\x0a-\x1f\x7f-\x9f]/);
      // well-formed UTF-16: no lone surrogates
      expect(line).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/);
    }
  });

  it('cuts a 10 MB line fed in 64 KiB chunks to one line, memory bounded', () => {
    const { s, lines } = collect();
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const before = process.memoryUsage().arrayBuffers;
    let peak = 0;
    for (let fed = 0; fed < 10 * 1024 * 1024; fed += chunk.length) {
      s.feed(chunk);
      peak = Math.max(peak, process.memoryUsage().arrayBuffers - before);
    }
    s.feed(Buffer.from('tail of the long line\nnext\n'));
    s.end();
    expect(lines).toEqual([
      ['x'.repeat(MAX_LOG_LINE), true],
      ['next', false],
    ]);
    expect(s.counters.cut).toBe(1);
    expect(s.counters.lines).toBe(2);
    // The splitter holds one fixed buffer (8 KiB); allow for allocator noise, far below 10 MB.
    expect(peak).toBeLessThan(1024 * 1024);
  });

  it('reports a cut line at once, before its newline arrives', () => {
    const { s, lines } = collect(10);
    s.feed(Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz0123456789'));
    expect(lines).toEqual([['0123456789', true]]);
    s.feed(Buffer.from('still the same line\nnew\n'));
    s.end();
    expect(lines).toEqual([
      ['0123456789', true],
      ['new', false],
    ]);
  });

  it('cuts by characters: multi-byte lines under the limit in chars stay whole', () => {
    const { s, lines } = collect(10);
    s.feed(Buffer.from('€€€€€€€€€€\n')); // 10 chars, 30 bytes
    s.feed(Buffer.from('€€€€€€€€€€€\n')); // 11 chars
    s.feed(Buffer.from('123456789😀\n')); // the pair would straddle the limit
    expect(lines).toEqual([
      ['€€€€€€€€€€', false],
      ['€€€€€€€€€€', true],
      ['123456789', true],
    ]);
  });

  it('cutString never splits a surrogate pair', () => {
    expect(cutString('ab😀', 3)).toBe('ab');
    expect(cutString('ab😀', 4)).toBe('ab😀');
    expect(cutString('abc', 5)).toBe('abc');
  });
});
