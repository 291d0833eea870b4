// The Go reader's text writer (src/dumps/go/text.ts): numbers written digit by digit must
// print as Go prints them (hex as print(hex(n)), decimal), and the chunked text must come out
// whole and in order, kept or streamed through reused buffers.
import { describe, expect, it } from 'vitest';
import { ByteWriter, ChunkedText, utf8 } from '../src/dumps/go/text.js';

function written(fn: (w: ByteWriter) => void): string {
  const w = new ByteWriter(4);
  fn(w);
  return w.buf.toString('latin1', 0, w.pos);
}

describe('ByteWriter', () => {
  it('writes hex and decimal numbers as toString does, growing as it goes', () => {
    const values = [0, 1, 9, 10, 15, 16, 255, 256, 0xffff_ffff, 2 ** 32, 2 ** 32 + 1, 0xc000_1234_56, 0x7fff_ffff_f000, 2 ** 53 - 1];
    for (const n of values) {
      expect(written((w) => w.hex(n))).toBe(`0x${n.toString(16)}`);
      expect(written((w) => w.dec(n))).toBe(String(n));
    }
    for (const [lo, hi] of [
      [0, 0],
      [0x1234, 0],
      [0, 1],
      [0x0000_00ab, 0xffff_ffff],
      [0xdead_beef, 0x8000_0000],
    ] as const) {
      expect(written((w) => w.hex64(lo, hi))).toBe(`0x${((BigInt(hi) << 32n) | BigInt(lo)).toString(16)}`);
    }
    expect(
      written((w) => {
        w.ascii('goroutine ');
        w.dec(7);
        w.bytes(utf8(' [chan receive]:\n'));
      }),
    ).toBe('goroutine 7 [chan receive]:\n');
  });
});

describe('ChunkedText', () => {
  const pieces = Array.from({ length: 500 }, (_, i) => utf8(`piece ${i} ${'x'.repeat(i % 37)}\n`));
  const whole = Buffer.concat(pieces);

  it('kept: chunks of at most chunkBytes, the last cut to what it holds', async () => {
    const t = new ChunkedText(1000);
    for (const p of pieces) t.append(p);
    const chunks = await t.end();
    expect(chunks.slice(0, -1).every((c) => c.length === 1000)).toBe(true);
    expect(chunks.at(-1)!.length).toBeLessThanOrEqual(1000);
    expect(Buffer.concat(chunks).equals(whole)).toBe(true);
    expect(t.bytes).toBe(whole.length);
  });

  it('streamed: each full chunk handed out at flush, the rest at the end, through reused buffers', async () => {
    const out: Buffer[] = [];
    const buffers = new Set<ArrayBufferLike>();
    const t = new ChunkedText(1000, async (c) => {
      out.push(Buffer.from(c));
      buffers.add(c.buffer);
    });
    for (const [i, p] of pieces.entries()) {
      t.append(p);
      if (i % 10 === 0) await t.flush();
    }
    expect(await t.end()).toEqual([]);
    expect(Buffer.concat(out).equals(whole)).toBe(true);
    expect(out.length).toBeGreaterThan(10);
    expect(buffers.size).toBeLessThanOrEqual(3);
  });
});
