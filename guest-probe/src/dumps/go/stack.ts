// One goroutine's stack, read lazily: a parked goroutine's frames sit between its saved sp
// and stack.hi, usually a few KiB, so the first read (FIRST bytes from sp) mostly holds the
// whole walk; a deeper walk reads on in CHUNK steps. Reads go into one scratch buffer that a
// whole dump shares (goroutines are walked one at a time), so 10,000 goroutines do not
// allocate 10,000 stack copies.

import { type AddressSpace, hex, u64 } from './space.js';

const FIRST = 4 * 1024;
const CHUNK = 64 * 1024;

export class StackOutOfBoundsError extends Error {}

/** The scratch buffer; one per dump. */
export class StackScratch {
  buf = Buffer.allocUnsafe(CHUNK);
}

export class StackReader {
  private base = 0;
  private len = 0;
  private reads = 0;

  constructor(
    private readonly space: AddressSpace & { readInto?(buf: Buffer, addr: number): void },
    private readonly scratch: StackScratch,
    readonly lo: number,
    readonly hi: number,
  ) {}

  /** The 8-byte word at addr (inside [lo, hi)). */
  word(addr: number): number {
    const off = this.at(addr, 8);
    return u64(this.scratch.buf, off);
  }

  /** As a bigint, for printing argument words whole. */
  bigWord(addr: number): bigint {
    const off = this.at(addr, 8);
    return this.scratch.buf.readBigUInt64LE(off);
  }

  /** Offset of [addr, addr+len) in the scratch buffer, reading it first if needed. */
  private at(addr: number, len: number): number {
    if (addr < this.lo || addr + len > this.hi) {
      throw new StackOutOfBoundsError(`stack read at ${hex(addr)} is outside the goroutine's stack [${hex(this.lo)}, ${hex(this.hi)})`);
    }
    if (addr < this.base || addr + len > this.base + this.len) {
      const start = Math.max(this.lo, addr - (addr % 8));
      const want = this.reads++ === 0 ? FIRST : CHUNK;
      const end = Math.min(this.hi, Math.max(addr + len, start + want));
      if (end - start > this.scratch.buf.length) this.scratch.buf = Buffer.allocUnsafe(end - start);
      const view = this.scratch.buf.subarray(0, end - start);
      if (this.space.readInto) this.space.readInto(view, start);
      else this.space.read(start, end - start).copy(view);
      this.base = start;
      this.len = end - start;
    }
    return addr - this.base;
  }
}
