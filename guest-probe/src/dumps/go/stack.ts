// One goroutine's stack, read lazily in chunks: a parked goroutine's frames sit between its
// saved sp and stack.hi, usually a few KiB, so the first read (sp up to CHUNK bytes) holds
// the whole walk; deeper stacks cost one more pread per further CHUNK.

import { type AddressSpace, hex, u64 } from './space.js';

const CHUNK = 16 * 1024;

export class StackOutOfBoundsError extends Error {}

export class StackReader {
  private base = 0;
  private buf: Buffer = Buffer.alloc(0);

  constructor(
    private readonly space: AddressSpace,
    readonly lo: number,
    readonly hi: number,
  ) {}

  /** The 8-byte word at addr (inside [lo, hi)). */
  word(addr: number): number {
    return u64(this.bytes(addr, 8), 0);
  }

  /** As a bigint, for printing argument words whole. */
  bigWord(addr: number): bigint {
    return this.bytes(addr, 8).readBigUInt64LE(0);
  }

  bytes(addr: number, len: number): Buffer {
    if (addr < this.lo || addr + len > this.hi) {
      throw new StackOutOfBoundsError(`stack read at ${hex(addr)} is outside the goroutine's stack [${hex(this.lo)}, ${hex(this.hi)})`);
    }
    if (addr < this.base || addr + len > this.base + this.buf.length) {
      const start = Math.max(this.lo, addr - (addr % 8));
      const end = Math.min(this.hi, Math.max(addr + len, start + CHUNK));
      this.buf = this.space.read(start, end - start);
      this.base = start;
    }
    return this.buf.subarray(addr - this.base, addr - this.base + len);
  }
}
