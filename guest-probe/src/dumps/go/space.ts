// An address space to read from: the executable's file image (static analysis, tests) or a
// live process's memory (memory.ts). Addresses are runtime addresses, as plain numbers:
// user-space addresses on amd64 and arm64 stay below 2^48, well inside a double's 2^53.

import type { ElfFile } from './elf.js';

export interface AddressSpace {
  /** Exactly `len` bytes at `addr`; throws (an Error naming the address) when they do not read. */
  read(addr: number, len: number): Buffer;
}

/** The file's own bytes at their link-time addresses plus `bias` (0 unless PIE). */
export class FileSpace implements AddressSpace {
  constructor(
    private readonly elf: ElfFile,
    private readonly bias = 0,
  ) {}

  read(addr: number, len: number): Buffer {
    return this.elf.readAt(addr - this.bias, len);
  }
}

/** A 64-bit little-endian word as a number; values past 2^53 (never an address) come out inexact. */
export function u64(b: Buffer, off: number): number {
  return b.readUInt32LE(off) + b.readUInt32LE(off + 4) * 0x1_0000_0000;
}

/**
 * u64 through a DataView, for the words read per goroutine and per frame (g fields, stack
 * words, argument words). Buffer.readUInt32LE is JavaScript (a bounds check and four byte
 * loads); DataView.getUint32 is a builtin, fast before the reader's code is optimised too, which
 * is most of a probe's first dump.
 */
export function u64v(v: DataView, off: number): number {
  return v.getUint32(off, true) + v.getUint32(off + 4, true) * 0x1_0000_0000;
}

/** A DataView of exactly the bytes of `b`. */
export function viewOf(b: Buffer): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

export function hex(n: number): string {
  return `0x${n.toString(16)}`;
}
