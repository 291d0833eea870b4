// A batch of goroutines read in two process_vm_readv rounds: every g of the batch, then, for
// each one that has a stack to walk, the window from where its walk starts (its saved sp)
// to the top of its stack (capped). The walk and the printing then run on these bytes. One
// Snapshot is reused for every batch of a dump (its buffers only grow).

import { G_STATUS, type GLayout } from './layout.js';
import type { ProcessMemory } from './memory.js';
import { u64v, viewOf } from './space.js';

/** Stack window bytes per goroutine reserved for pause mode: a parked goroutine's window was
 *  ~300 bytes in the 10,000-goroutine fake envd; more is read into a new buffer. */
export const RESERVED_WINDOW_BYTES = 512;

/** snapshot() marks in `window`: the g did not read, is dead, or runs (no stack to walk). */
export const NO_G = -3;
export const DEAD = -2;
export const NO_STACK = -1;

export class Snapshot {
  count = 0;
  /** The g addresses. */
  addrs = new Float64Array(0);
  /** count g's of layout.size bytes, one after another. */
  hdr = Buffer.alloc(0);
  hdrView = viewOf(this.hdr);
  /** Per g: where its stack window starts in `stack`, or NO_G, DEAD, NO_STACK. */
  window = new Float64Array(0);
  /** Per g with a window: the bytes of it that read. */
  got = new Int32Array(0);
  stack: Buffer = Buffer.alloc(0);
  stackView = viewOf(this.stack);
  private segs = new Float64Array(0);
  private hdrGot = new Int32Array(0);
  private stackSegs = new Float64Array(0);
  private stackGot = new Int32Array(0);

  /** Room for n goroutines. */
  private size(n: number, gSize: number): void {
    if (this.addrs.length >= n && this.hdr.length >= n * gSize) return;
    this.addrs = new Float64Array(n);
    this.hdr = Buffer.allocUnsafe(n * gSize);
    this.hdrView = viewOf(this.hdr);
    this.window = new Float64Array(n);
    this.got = new Int32Array(n);
    this.segs = new Float64Array(2 * n);
    this.hdrGot = new Int32Array(n);
    this.stackSegs = new Float64Array(2 * n);
    this.stackGot = new Int32Array(n);
  }

  /**
   * Reads the g's at `allgs[from, from + count)` (allgs: the array of g pointers) and their
   * stack windows of at most `windowCap` bytes. Returns false, having read only the g's,
   * when the windows would take more than `maxStackBytes` in all. windowCap 0: the g's alone
   * (a batch read again to confirm it), every live one marked NO_STACK.
   */
  read(mem: ProcessMemory, l: GLayout, allgs: Buffer, from: number, count: number, windowCap: number, maxStackBytes = Infinity): boolean {
    this.size(count, l.size);
    this.count = count;
    const { addrs, segs, hdr, hdrGot, window, stackSegs } = this;
    const hv = this.hdrView;
    const av = viewOf(allgs);
    for (let k = 0; k < count; k++) {
      addrs[k] = u64v(av, 8 * (from + k));
      segs[2 * k] = addrs[k]!;
      segs[2 * k + 1] = l.size;
    }
    mem.readMany(hdr, segs, count, hdrGot);
    let total = 0;
    let m = 0;
    for (let k = 0; k < count; k++) {
      if (hdrGot[k]! < l.size) {
        window[k] = NO_G;
        continue;
      }
      const o = k * l.size;
      const status = hv.getUint32(o + l.atomicstatus, true) & ~G_STATUS.scan;
      if (status === G_STATUS.dead) {
        window[k] = DEAD;
        continue;
      }
      // Running, or a confirming read (no windows): no stack to read.
      if (status === G_STATUS.running || windowCap === 0) {
        window[k] = NO_STACK;
        continue;
      }
      const sp = startSp(hv, o, l);
      const lo = u64v(hv, o + l.stackLo);
      const hi = u64v(hv, o + l.stackHi);
      // A start outside the stack gets no window: the walk reads (and fails) on its own.
      const len = sp >= lo && sp < hi ? Math.min(hi - sp, windowCap) : 0;
      window[k] = total;
      stackSegs[2 * m] = sp;
      stackSegs[2 * m + 1] = len;
      m++;
      total += len;
    }
    if (total > maxStackBytes) return false;
    if (m === 0) return true;
    if (this.stack.length < total) {
      this.stack = Buffer.allocUnsafe(Math.max(total, 2 * this.stack.length));
      this.stackView = viewOf(this.stack);
    }
    mem.readMany(this.stack, stackSegs, m, this.stackGot);
    for (let k = 0, j = 0; k < count; k++) if (window[k]! >= 0) this.got[k] = this.stackGot[j++]!;
    return true;
  }

  /**
   * Room for n goroutines and their stack windows, made before the target is stopped, and
   * written to: a fresh buffer of megabytes is fresh pages, which the kernel would otherwise
   * fault in during the copy, while the target waits (memread.c, memSnapshot).
   */
  reserve(n: number, gSize: number): void {
    this.size(n, gSize);
    this.hdr.fill(0);
    const windows = n * RESERVED_WINDOW_BYTES;
    if (this.stack.length < windows) {
      this.stack = Buffer.allocUnsafe(windows);
      this.stackView = viewOf(this.stack);
    }
    this.stack.fill(0);
  }

  /**
   * Pause mode, the target stopped: g's [0, count) of `allgs` and their whole stack windows
   * in one native call (ProcessMemory.snapshot: no JavaScript per goroutine while the target
   * waits). Returns false, having read only the g's, when the windows would take more than
   * `maxStackBytes`.
   */
  readAll(mem: ProcessMemory, l: GLayout, allgs: Buffer, count: number, maxStackBytes: number): boolean {
    this.size(count, l.size);
    this.count = count;
    const fields = new Int32Array([l.atomicstatus, l.stackLo, l.stackHi, l.schedSp, l.syscallsp]);
    const stack = mem.snapshot(allgs, count, l.size, fields, this, maxStackBytes);
    if (!stack) return false;
    this.stack = stack;
    this.stackView = viewOf(stack);
    return true;
  }

  /** Whether g k read again (in `again`, at its index there) has the same schedule: it did not run meanwhile. */
  same(k: number, again: Snapshot, at: number, l: GLayout): boolean {
    return sameSchedule(l, this.hdrView, k * l.size, again.hdrView, at * l.size);
  }
}

/** Where a walk starts: the syscall's sp while in a syscall, else the saved sched.sp. */
export function startSp(b: DataView, o: number, l: GLayout): number {
  const syscallsp = u64v(b, o + l.syscallsp);
  return syscallsp !== 0 ? syscallsp : u64v(b, o + l.schedSp);
}

const scheduleFields = new WeakMap<GLayout, number[]>();

/** Fields that change when a goroutine runs or its stack moves. */
export function sameSchedule(l: GLayout, a: DataView, ao: number, b: DataView, bo: number): boolean {
  let offs = scheduleFields.get(l);
  if (!offs) scheduleFields.set(l, (offs = [l.stackLo, l.stackHi, l.schedSp, l.schedPc, l.syscallsp, l.syscallpc]));
  for (const off of offs) {
    if (a.getUint32(ao + off, true) !== b.getUint32(bo + off, true) || a.getUint32(ao + off + 4, true) !== b.getUint32(bo + off + 4, true))
      return false;
  }
  return a.getUint32(ao + l.atomicstatus, true) === b.getUint32(bo + l.atomicstatus, true);
}
