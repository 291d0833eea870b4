// Bytes out, without strings in between: a 10,000-goroutine dump is 8 MiB of text made of
// a few hundred distinct pieces (function names, file:line, per pc) and millions of hex
// numbers. Building it as JavaScript strings cost more in garbage collection than the read
// itself, and the probe then copied the finished string into a Buffer to send it. Here the
// pieces are encoded once (utf8), numbers are written digit by digit, and the text ends up
// in chunks of the size the probe sends (proto DUMP_CHUNK_BYTES), never as one string.

/** A growable byte buffer: the text of one batch of goroutines before it is confirmed. */
export class ByteWriter {
  buf: Buffer;
  pos = 0;

  constructor(initial = 64 * 1024) {
    this.buf = Buffer.allocUnsafe(initial);
  }

  reset(): void {
    this.pos = 0;
  }

  /** Room for n more bytes. */
  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  bytes(b: Uint8Array): void {
    // TypedArray.set even for the pieces of a few dozen bytes: a loop here is faster only
    // once optimised, and the first dump of a probe runs it cold (a third slower in all).
    this.room(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  /** A string of ASCII characters (literals of this module's callers; anything else goes through utf8()). */
  ascii(s: string): void {
    this.room(s.length);
    const buf = this.buf;
    let p = this.pos;
    for (let i = 0; i < s.length; i++) buf[p++] = s.charCodeAt(i);
    this.pos = p;
  }

  /** "0x" and n in lower-case hex, as Go's print(hex(n)) (n a non-negative integer below 2^53). */
  hex(n: number): void {
    this.hex64(n | 0, Math.floor(n / 0x1_0000_0000) | 0);
  }

  /** hex(a[i]): an address given by where it is, so that it is not boxed on the way in (see args.ts writeArgs). */
  hexAt(a: Float64Array, i: number): void {
    const n = a[i]!;
    this.hex64(n | 0, Math.floor(n / 0x1_0000_0000) | 0);
  }

  /**
   * "0x" and the 64-bit word whose 32-bit halves are lo and hi, in hex. The halves are taken as
   * unsigned whatever their sign: pass them as int32 (x | 0, readInt32LE), which stay small
   * integers, where an unsigned half above 2^31 would be a boxed double on every call.
   */
  hex64(lo: number, hi: number): void {
    this.room(18);
    const buf = this.buf;
    let p = this.pos;
    buf[p++] = 48;
    buf[p++] = 120;
    if (hi !== 0) {
      for (let shift = nibbles(hi) * 4 - 4; shift >= 0; shift -= 4) buf[p++] = HEX[(hi >>> shift) & 15]!;
      // The low half, zero-padded to 8 digits.
      for (let shift = 28; shift >= 0; shift -= 4) buf[p++] = HEX[(lo >>> shift) & 15]!;
    } else {
      for (let shift = nibbles(lo) * 4 - 4; shift >= 0; shift -= 4) buf[p++] = HEX[(lo >>> shift) & 15]!;
    }
    this.pos = p;
  }

  /** n (a non-negative integer below 2^53) in decimal. */
  dec(n: number): void {
    this.room(16);
    if (n < 10) {
      this.buf[this.pos++] = 48 + n;
      return;
    }
    let len = 1;
    for (let t = n; t >= 10; t = Math.floor(t / 10)) len++;
    let p = this.pos + len;
    for (let t = n; p > this.pos; t = Math.floor(t / 10)) this.buf[--p] = 48 + (t % 10);
    this.pos += len;
  }
}

const HEX = Buffer.from('0123456789abcdef', 'latin1');

/** Hex digits of a 32-bit value (1 for 0). */
function nibbles(x: number): number {
  return x === 0 ? 1 : (35 - Math.clz32(x)) >> 2;
}

/** A piece of text encoded once, to be copied many times. */
export function utf8(s: string): Buffer {
  return Buffer.from(s, 'utf8');
}

/**
 * The finished text, in chunks of at most `chunkBytes`, filled in order. Kept whole, or, with
 * `onChunk`, streamed: each chunk is handed out once full (flush) and its buffer reused once
 * the handler's promise resolves, so a dump of any size holds a chunk or two, not its text.
 */
export class ChunkedText {
  private readonly kept: Buffer[] = [];
  /** Streaming: filled chunks not handed out yet. */
  private readonly full: Buffer[] = [];
  private cur: Buffer | null = null;
  private pos = 0;
  bytes = 0;

  /** @param spare streaming: buffers free for reuse (of chunkBytes each); handed-out ones go back there */
  constructor(
    private readonly chunkBytes: number,
    private readonly onChunk?: (chunk: Buffer) => Promise<void>,
    private readonly spare: Buffer[] = [],
  ) {}

  append(b: Uint8Array): void {
    let at = 0;
    while (at < b.length) {
      if (!this.cur || this.pos === this.cur.length) this.next();
      const cur = this.cur!;
      const n = Math.min(b.length - at, cur.length - this.pos);
      cur.set(at === 0 && n === b.length ? b : b.subarray(at, at + n), this.pos);
      this.pos += n;
      at += n;
    }
    this.bytes += b.length;
  }

  /** Streaming: hands out the chunks filled so far. */
  async flush(): Promise<void> {
    while (this.full.length > 0) {
      const chunk = this.full.shift()!;
      await this.onChunk!(chunk);
      this.spare.push(chunk);
    }
  }

  /** The rest of the text: handed out when streaming (and [] returned), else all of it. The last chunk is cut to what it holds. */
  async end(): Promise<Buffer[]> {
    const cur = this.cur;
    const last = cur?.subarray(0, this.pos);
    this.cur = null;
    if (!this.onChunk) {
      if (last) this.kept[this.kept.length - 1] = last;
      return this.kept;
    }
    await this.flush();
    if (last && last.length > 0) await this.onChunk(last);
    if (cur) this.spare.push(cur);
    return [];
  }

  private next(): void {
    if (this.onChunk) {
      if (this.cur) this.full.push(this.cur);
      this.cur = this.spare.pop() ?? Buffer.allocUnsafeSlow(this.chunkBytes);
    } else {
      this.cur = Buffer.allocUnsafeSlow(this.chunkBytes);
      this.kept.push(this.cur);
    }
    this.pos = 0;
  }
}
