// A live process's memory, read through /proc/<pid>/mem with pread, and many ranges at once
// with process_vm_readv (the addon's memRead): either way the kernel copies from the target's
// pages without stopping it or telling it (the target sees nothing). Both need ptrace-attach
// rights over the target; opening the file checks them up front. Errors are turned into ones
// that say what to change.

import { closeSync, openSync, readFileSync, readSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import { type NativeAddon, loadNative } from '../../native.js';
import type { ElfFile } from './elf.js';
import { type AddressSpace, hex } from './space.js';

/** The target is gone (ESRCH/ENOENT): it exited during the read. */
export class TargetExitedError extends Error {}
/** No right to read the target's memory. */
export class PtraceDeniedError extends Error {}
/** An address that is not mapped (EIO from /proc/pid/mem). */
export class UnreadableAddressError extends Error {
  constructor(
    readonly addr: number,
    readonly len: number,
  ) {
    super(`address ${hex(addr)} (+${len} bytes) does not read in the target (not mapped)`);
  }
}

export const PTRACE_HINT =
  "reading another process's memory needs ptrace-attach rights: run as root with CAP_SYS_PTRACE, and kernel.yama.ptrace_scope below 3 (sysctl kernel.yama.ptrace_scope)";

export class ProcessMemory implements AddressSpace {
  private fd: number;
  private readonly native: NativeAddon;
  /** Number of pread calls made (for the caller's notes and tests). */
  reads = 0;
  /** readMany calls, and the ranges they read. */
  batches = 0;
  ranges = 0;

  constructor(
    readonly pid: number,
    readonly procRoot = '/proc',
  ) {
    this.native = loadNative();
    try {
      this.fd = openSync(path.join(procRoot, String(pid), 'mem'), 'r');
    } catch (err) {
      throw translate(err, pid, path.join(procRoot, String(pid), 'mem'));
    }
  }

  /**
   * Reads `count` ranges (segs: [address, length] pairs) into dst, packed one after another;
   * got[i] is the bytes range i gave, less than its length where it does not read.
   * procRoot is not used here: process_vm_readv takes the pid in this process's namespace.
   */
  readMany(dst: Buffer, segs: Float64Array, count: number, got: Int32Array): void {
    if (count === 0) return;
    this.batches++;
    this.ranges += count;
    try {
      this.native.memRead(this.pid, dst, segs, count, got);
    } catch (err) {
      throw translate(err, this.pid);
    }
  }

  /**
   * Every g of `allgs` and its stack window in one native call (pause mode, the target
   * stopped): see NativeAddon.memSnapshot. The windows go into `out.stack` when they fit.
   * Counted as two batches.
   */
  snapshot(
    allgs: Buffer,
    count: number,
    gSize: number,
    fields: Int32Array,
    out: { addrs: Float64Array; hdr: Buffer; window: Float64Array; got: Int32Array; stack: Buffer },
    maxStackBytes: number,
  ): Buffer | null {
    this.batches += 2;
    this.ranges += 2 * count;
    try {
      return this.native.memSnapshot(
        this.pid,
        allgs,
        count,
        gSize,
        fields,
        out.addrs,
        out.hdr,
        out.window,
        out.got,
        maxStackBytes,
        out.stack,
      );
    } catch (err) {
      throw translate(err, this.pid);
    }
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  read(addr: number, len: number): Buffer {
    const buf = Buffer.allocUnsafe(len);
    this.readInto(buf, addr);
    return buf;
  }

  /** Fills `buf` from `addr`; throws UnreadableAddressError when the range is not all mapped. */
  readInto(buf: Buffer, addr: number): void {
    let got = 0;
    while (got < buf.length) {
      let n: number;
      try {
        this.reads++;
        n = readSync(this.fd, buf, got, buf.length - got, addr + got);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EIO' || code === 'EFAULT') throw new UnreadableAddressError(addr + got, buf.length - got);
        throw translate(err, this.pid);
      }
      // 0 bytes: the mm is gone (the process exited and was reaped meanwhile).
      if (n === 0) throw new TargetExitedError(`process ${this.pid} exited during the read`);
      got += n;
    }
  }
}

/** `what`: what was being read, for the permission error ("/proc/<pid>/exe", …). */
function translate(err: unknown, pid: number, what = `the memory of process ${pid}`): Error {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ESRCH') return new TargetExitedError(`process ${pid} is gone (it exited)`);
  if (code === 'EACCES' || code === 'EPERM') return new PtraceDeniedError(`cannot read ${what} (${code}): ${PTRACE_HINT}`);
  return err instanceof Error ? err : new Error(String(err));
}

/** The target's executable, as a path this process can open (works even if it was replaced on disk). */
export function exePath(pid: number, procRoot = '/proc'): string {
  const p = path.join(procRoot, String(pid), 'exe');
  try {
    readlinkSync(p);
  } catch (err) {
    throw translate(err, pid, p);
  }
  return p;
}

/**
 * Load bias of the executable (0 unless it is a PIE): where /proc/<pid>/maps has the
 * mapping of file offset 0 of the executable, minus the first PT_LOAD's page-aligned vaddr.
 */
export function loadBias(pid: number, elf: ElfFile, procRoot = '/proc'): number {
  if (!elf.pie) return 0;
  let exe: string;
  let maps: string;
  try {
    exe = readlinkSync(path.join(procRoot, String(pid), 'exe'));
    maps = readFileSync(path.join(procRoot, String(pid), 'maps'), 'latin1');
  } catch (err) {
    throw translate(err, pid, `/proc/${pid}/exe and maps`);
  }
  const first = elf.segments[0];
  if (!first) throw new Error(`${elf.path}: no PT_LOAD segment`);
  const align = first.align > 0 ? first.align : 4096;
  const base = Math.floor(first.vaddr / align) * align;
  for (const line of maps.split('\n')) {
    // start-end perms offset dev inode path
    const m = /^([0-9a-f]+)-[0-9a-f]+ \S+ ([0-9a-f]+) \S+ \d+\s+(.*)$/.exec(line);
    if (!m || (m[3] !== exe.replace(/ \(deleted\)$/, '') && m[3] !== exe)) continue;
    if (parseInt(m[2] ?? '1', 16) !== 0) continue;
    return parseInt(m[1] ?? '0', 16) - base;
  }
  throw new Error(`process ${pid}: no mapping of ${exe} at file offset 0 in /proc/${pid}/maps`);
}
