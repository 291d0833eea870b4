// The addon's memRead (native/src/memread.c): many ranges of a process's memory in few
// process_vm_readv calls, neighbours merged, an unmapped range costing only itself. Read from
// this very process, against what /proc/self/mem says the same addresses hold.
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadNative } from '../src/native.js';

const native = loadNative();

interface Mapping {
  start: number;
  end: number;
}

/** Read-only mappings of this process (64 KiB or more), and one of them that a gap follows. */
function mappings(): { readable: Mapping[]; beforeGap: Mapping } {
  const maps = readFileSync('/proc/self/maps', 'latin1').trim().split('\n');
  const all = maps.map((l) => {
    const [range, perms, , , , name] = l.split(/\s+/);
    const [s, e] = range!.split('-').map((x) => parseInt(x, 16));
    return { start: s!, end: e!, perms: perms!, name: name ?? '' };
  });
  // Read-only ones: their bytes do not change between the two reads.
  const readable = all.filter((m) => m.perms.startsWith('r-') && !m.name.startsWith('[v') && m.end - m.start >= 65536);
  const beforeGap = all.find((m, i) => readable.includes(m) && (all[i + 1]?.start ?? Infinity) > m.end)!;
  return { readable, beforeGap };
}

function viaProcMem(addr: number, len: number): Buffer {
  const fd = openSync('/proc/self/mem', 'r');
  try {
    const b = Buffer.alloc(len);
    expect(readSync(fd, b, 0, len, addr)).toBe(len);
    return b;
  } finally {
    closeSync(fd);
  }
}

function read(pid: number, ranges: [number, number][]): { dst: Buffer; got: number[] } {
  const segs = new Float64Array(ranges.flat());
  const total = ranges.reduce((n, [, l]) => n + l, 0);
  const dst = Buffer.alloc(total, 0xee);
  const got = new Int32Array(ranges.length);
  native.memRead(pid, dst, segs, ranges.length, got);
  return { dst, got: [...got] };
}

describe('memRead', () => {
  it('reads ranges packed one after another: neighbours (merged), far apart, more than IOV_MAX of them', () => {
    const { readable } = mappings();
    const m = readable[0]!;
    // 3,000 ranges of 40 bytes every 56 (gaps the merge fills), then some far apart.
    const ranges: [number, number][] = [];
    for (let i = 0; i < 3000; i++) ranges.push([m.start + 56 * i, 40]);
    for (const r of readable.slice(1, 6)) ranges.push([r.start + 100, 300]);
    ranges.push([m.start + 8, 0]);
    const { dst, got } = read(process.pid, ranges);
    expect(got).toEqual(ranges.map(([, l]) => l));
    let at = 0;
    for (const [addr, len] of ranges) {
      expect(dst.subarray(at, at + len).equals(viaProcMem(addr, len)), `range at 0x${addr.toString(16)}`).toBe(true);
      at += len;
    }
  });

  it('an unmapped range reads 0 bytes, a range running off its mapping reads up to the end; the others read whole', () => {
    const { readable, beforeGap } = mappings();
    const m = readable[0]!;
    const ranges: [number, number][] = [
      [m.start, 64],
      [0x1000, 64], // below mmap_min_addr: never mapped
      [m.start + 64, 64], // a neighbour of the first, after the fault
      [beforeGap.end - 16, 64], // runs into the gap after its mapping
      [m.start + 128, 32],
      // Neighbours read as one, the second running off the mapping: each read alone then.
      [beforeGap.end - 200, 100],
      [beforeGap.end - 16, 64],
      [m.start + 256, 8],
    ];
    const { dst, got } = read(process.pid, ranges);
    expect(got).toEqual([64, 0, 64, 16, 32, 100, 16, 8]);
    expect(dst.subarray(288, 388).equals(viaProcMem(beforeGap.end - 200, 100))).toBe(true);
    expect(dst.subarray(388, 404).equals(viaProcMem(beforeGap.end - 16, 16))).toBe(true);
    expect(dst.subarray(452, 460).equals(viaProcMem(m.start + 256, 8))).toBe(true);
    expect(dst.subarray(0, 64).equals(viaProcMem(m.start, 64))).toBe(true);
    expect(dst.subarray(64, 128).equals(Buffer.alloc(64, 0xee))).toBe(true); // left as it was
    expect(dst.subarray(128, 192).equals(viaProcMem(m.start + 64, 64))).toBe(true);
    expect(dst.subarray(192, 208).equals(viaProcMem(beforeGap.end - 16, 16))).toBe(true);
    expect(dst.subarray(256, 288).equals(viaProcMem(m.start + 128, 32))).toBe(true);
  });

  it('names what went wrong: a process that is gone (ESRCH), bad arguments', async () => {
    const child = spawn('true');
    await new Promise((r) => child.once('exit', r));
    expect(() => read(child.pid!, [[0x1000, 8]])).toThrow(expect.objectContaining({ code: 'ESRCH' }));
    const got = new Int32Array(1);
    expect(() => native.memRead(process.pid, Buffer.alloc(4), new Float64Array([0x1000, 8]), 1, got)).toThrow(/do not fit in dst/);
    expect(() => native.memRead(process.pid, Buffer.alloc(8), new Float64Array([4096.5, 8]), 1, got)).toThrow(RangeError);
    expect(() => native.memRead(process.pid, Buffer.alloc(8), new Float64Array([0x1000]), 1, got)).toThrow(TypeError);
  });
});
