// One goroutine's stack, as the walk reads it: a parked goroutine's frames sit between its
// saved sp and stack.hi, usually well under a KiB, so the caller reads that window for a whole
// batch of goroutines at once (index.ts) and hands each goroutine its part; a walk that goes
// past it reads on from the process in CHUNK steps, into one scratch buffer that a whole
// dump shares (goroutines are walked one at a time). One reader is reused for every
// goroutine (reset), so 10,000 goroutines allocate no stack copies and no readers.

import { type AddressSpace, hex, u64v, viewOf } from './space.js';

const CHUNK = 64 * 1024;

export class StackOutOfBoundsError extends Error {}

export class StackReader {
  lo = 0;
  hi = 0;
  /** The bytes at [base, base + len), at `start` in this view (of the window, or of scratch). */
  view: DataView;
  private start = 0;
  private base = 0;
  private len = 0;
  /** Where reads past a window go (it grows for a deep walk); a previous reader's may be given. */
  scratch: Buffer;
  private scratchView: DataView;

  constructor(
    private readonly space: AddressSpace & { readInto?(buf: Buffer, addr: number): void },
    scratch?: Buffer,
  ) {
    this.scratch = scratch ?? Buffer.allocUnsafe(CHUNK);
    this.scratchView = viewOf(this.scratch);
    this.view = this.scratchView;
  }

  /** A new goroutine with stack [lo, hi), whose bytes [base, base + len) are at `start` in `window`. */
  reset(lo: number, hi: number, window: DataView, start: number, base: number, len: number): void {
    this.lo = lo;
    this.hi = hi;
    this.view = window;
    this.start = start;
    this.base = base;
    this.len = len;
  }

  // word() and offset() are called for every frame of every goroutine: their fast path (the
  // bytes are in the window, which lies inside [lo, hi)) is kept small enough to be inlined,
  // so a stack address (a double: above 2^31) is not boxed on each call.

  /** The 8-byte word at addr (inside [lo, hi)). */
  word(addr: number): number {
    const off = addr - this.base;
    if (off >= 0 && off + 8 <= this.len) return u64v(this.view, this.start + off);
    return this.wordPast(addr);
  }

  /** Where [addr, addr+len) is in view (read first if needed), or -1 when it is off the stack or does not read. */
  offset(addr: number, len: number): number {
    const off = addr - this.base;
    if (off >= 0 && off + len <= this.len) return this.start + off;
    return this.offsetPast(addr, len);
  }

  private wordPast(addr: number): number {
    // at() may move view: take the offset first.
    const at = this.at(addr, 8);
    return u64v(this.view, at);
  }

  private offsetPast(addr: number, len: number): number {
    try {
      return this.at(addr, len);
    } catch {
      return -1;
    }
  }

  /** Offset of [addr, addr+len) in view, reading it first if needed. */
  private at(addr: number, len: number): number {
    if (addr < this.lo || addr + len > this.hi) {
      throw new StackOutOfBoundsError(`stack read at ${hex(addr)} is outside the goroutine's stack [${hex(this.lo)}, ${hex(this.hi)})`);
    }
    if (addr < this.base || addr + len > this.base + this.len) {
      const start = Math.max(this.lo, addr - (addr % 8));
      const end = Math.min(this.hi, Math.max(addr + len, start + CHUNK));
      if (end - start > this.scratch.length) {
        this.scratch = Buffer.allocUnsafe(end - start);
        this.scratchView = viewOf(this.scratch);
      }
      const view = this.scratch.subarray(0, end - start);
      // Not read: the window is lost (an error from here stops this goroutine's walk).
      this.len = 0;
      if (this.space.readInto) this.space.readInto(view, start);
      else this.space.read(start, end - start).copy(view);
      this.view = this.scratchView;
      this.start = 0;
      this.base = start;
      this.len = end - start;
    }
    return this.start + addr - this.base;
  }
}
