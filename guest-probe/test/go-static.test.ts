// The Go reader's static half on real stripped binaries of Go 1.20–1.26, amd64 and arm64:
// version, pclntab, module data, the allgs decode, and the per-version tables (wait reasons,
// lockedm) checked against what each binary itself holds.
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeAllgs } from '../src/dumps/go/allgs.js';
import { GoBinary } from '../src/dumps/go/binary.js';
import { ElfFile, NotElfError } from '../src/dumps/go/elf.js';
import { LAYOUTS, UnsupportedGoVersionError, layoutFor } from '../src/dumps/go/layout.js';
import { u64 } from '../src/dumps/go/space.js';
import { NotGoBinaryError, readGoVersion } from '../src/dumps/go/version.js';
import { WAIT_REASONS } from '../src/dumps/go/waitreasons.js';
import { GO_BINARIES, requireBinary } from './go-binaries.js';

function sectionOf(bin: GoBinary, addr: number): string | undefined {
  return bin.elf.sections.find((s) => s.addr > 0 && addr >= s.addr && addr < s.addr + s.size)?.name;
}

/** waitReasonStrings as the binary has it: the string headers from the one whose entry 1 is "GC assist marking". */
function binaryWaitReasons(bin: GoBinary, count: number): string[] {
  const ro = bin.elf.section('.rodata')!;
  const rodata = bin.elf.sectionData(ro);
  const data = bin.elf.sectionData(bin.elf.section('.data')!);
  const first = Buffer.from('GC assist marking');
  const targets = new Set<number>();
  for (let i = rodata.indexOf(first); i >= 0; i = rodata.indexOf(first, i + 1)) targets.add(ro.addr + i);
  for (let p = 16; p + 16 <= data.length; p += 8) {
    if (!targets.has(u64(data, p)) || u64(data, p + 8) !== first.length) continue;
    if (u64(data, p - 16) !== 0 || u64(data, p - 8) !== 0) continue; // entry 0 is ""
    const out: string[] = [];
    for (let i = 0; i < count && p - 16 + 16 * i + 16 <= data.length; i++) {
      const q = p - 16 + 16 * i;
      const a = u64(data, q);
      const len = u64(data, q + 8);
      out.push(len === 0 ? '' : rodata.toString('latin1', a - ro.addr, a - ro.addr + len));
    }
    return out;
  }
  throw new Error(`${bin.elf.path}: no waitReasonStrings array found`);
}

/** The displacement of `gp.lockedm = gp.m` that lockOSThread (inlined into runtime.main) stores through the g register. */
function lockedmStore(bin: GoBinary): number | null {
  const f = bin.pclntab.funcByName('runtime.main')!;
  const code = bin.elf.readAt(f.entry, f.end - f.entry);
  if (bin.arch === 'amd64') {
    // mov reg, disp32(%r14): REX.W+B (0x49 or 0x4d), 0x89, ModRM mod=10 rm=110.
    for (let i = 0; i + 7 <= code.length; i++) {
      if ((code[i] === 0x49 || code[i] === 0x4d) && code[i + 1] === 0x89 && ((code[i + 2] ?? 0) & 0xc7) === 0x86)
        return code.readInt32LE(i + 3);
    }
    return null;
  }
  // str Xt, [x28, #imm] (g lives in R28): 0xf9000000 | imm12<<10 | 28<<5 | Rt.
  for (let i = 0; i + 4 <= code.length; i += 4) {
    const insn = code.readUInt32LE(i);
    if ((insn & 0xffc003e0) >>> 0 === (0xf9000000 | (28 << 5)) >>> 0) {
      const off = ((insn >>> 10) & 0xfff) * 8;
      if (off >= 128) return off; // g fields below 128 (stackguard, m, sched) are other stores
    }
  }
  return null;
}

describe.each(GO_BINARIES)('$go $arch ($pkg)', (b) => {
  it('reads version, pclntab, module data and allgs without symbols', () => {
    const bin = new GoBinary(requireBinary(b));
    try {
      expect(bin.elf.section('.symtab')).toBeUndefined();
      expect(bin.elf.sections.some((s) => s.name.startsWith('.debug') || s.name.startsWith('.zdebug'))).toBe(false);
      expect(bin.version.text).toBe(b.go);
      expect(bin.arch).toBe(b.arch);
      expect(bin.pclntab.quantum).toBe(b.arch === 'amd64' ? 1 : 4);
      expect(bin.pclntab.nfunc).toBeGreaterThan(5_000);

      const main = bin.pclntab.funcByName('runtime.main')!;
      expect(main).toBeDefined();
      expect(bin.findFunc(main.entry + 8)?.entry).toBe(main.entry);
      expect(bin.pclntab.fileLine(main, main.entry + 8).file).toBe('runtime/proc.go');
      expect(bin.pclntab.spDelta(main, main.entry)).toBe(0);
      const goexit = bin.pclntab.funcByName('runtime.goexit')!;
      expect(goexit.flag & 1).toBe(1); // TOPFRAME: where every goroutine's walk stops

      expect(bin.moduledata.text).toBe(bin.elf.section('.text')!.addr);
      expect(['.rodata', '.gopclntab']).toContain(sectionOf(bin, bin.moduledata.gofunc));

      const loc = decodeAllgs(bin)!;
      expect(loc).not.toBeNull();
      expect(loc.lenAddr).not.toBe(loc.ptrAddr);
      // allglen is a plain uintptr (no pointers: .noptrbss), allgptr a pointer (.bss).
      expect(sectionOf(bin, loc.lenAddr)).toBe('.noptrbss');
      expect(sectionOf(bin, loc.ptrAddr)).toBe('.bss');
    } finally {
      bin.close();
    }
  });

  it("has the version's wait reasons and lockedm offset", () => {
    const bin = new GoBinary(requireBinary(b));
    try {
      // A minor version's table is its longest patch release's: go1.23.1 predates the
      // "GC weak to strong wait" that go1.23.12 appends.
      const table = WAIT_REASONS[b.minor]!.slice(0, b.go === 'go1.23.1' ? 37 : undefined);
      expect(binaryWaitReasons(bin, table.length)).toEqual(table);
      expect(lockedmStore(bin)).toBe(layoutFor(b.minor, b.go).lockedm);
    } finally {
      bin.close();
    }
  });
});

describe('errors that say what is wrong', () => {
  it('refuses an ELF that is not Go, and a file that is not ELF', () => {
    const sh = new ElfFile('/bin/sh');
    try {
      expect(() => readGoVersion(sh)).toThrow(NotGoBinaryError);
      expect(() => readGoVersion(sh)).toThrow(/not a Go executable \(no \.gopclntab/);
    } finally {
      sh.close();
    }
    const text = path.join(os.tmpdir(), `go-static-${process.pid}.txt`);
    writeFileSync(text, 'hello, not an executable\n'.repeat(4));
    expect(() => new ElfFile(text)).toThrow(NotElfError);
  });

  it('names a Go version without a proven layout', () => {
    expect(() => layoutFor(18, 'go1.18.10')).toThrow(UnsupportedGoVersionError);
    expect(() => layoutFor(27, 'go1.27.0')).toThrow(/go1\.27\.0: no proven g layout for Go 1\.27 \(proven: 1\.19, .*1\.26\)/);
    expect(Object.keys(LAYOUTS).map(Number)).toEqual([19, 20, 21, 22, 23, 24, 25, 26]);
  });
});
