// Where runtime.allglen and runtime.allgptr live, without symbols: runtime.forEachGRace
// (found by name in the pclntab) starts with atomicAllG(), which loads allglen and then
// allgptr, so the first two data addresses its code references are those two, in that order.
// On amd64 they are RIP-relative MOVs; on arm64 ADRP+ADD pairs feeding LDAR. The runtime
// publishes allgptr before allglen (allgadd), so a reader takes allglen first: every g below
// that length is then behind allgptr.
//
// When the decode fails (a future compiler that inlines forEachGRace away, say), the data
// and bss are scanned for a {ptr, len, cap} slice whose first entry is a g with goid 1, as
// jschwinger233/go-spy does: allgs itself, read under no lock. Notes say which way was used.

import type { GoBinary } from './binary.js';
import type { GLayout } from './layout.js';
import { type AddressSpace, hex, u64 } from './space.js';

export interface AllgsLocation {
  /** Address of runtime.allglen (uintptr). */
  lenAddr: number;
  /** Address of runtime.allgptr (**g); for the slice scan, of allgs' data pointer. */
  ptrAddr: number;
  how: 'forEachGRace' | 'allgs slice scan';
}

/** Absolute data addresses referenced by the code at `addr`, in instruction order. */
export function dataRefs(code: Buffer, addr: number, arch: 'amd64' | 'arm64'): number[] {
  return arch === 'amd64' ? amd64Refs(code, addr) : arm64Refs(code, addr);
}

// MOV r64, [rip+disp32] (REX.W 8B /r) and LEA r64, [rip+disp32] (REX.W 8D /r): ModRM mod=00,
// rm=101. The scan is bytewise; a false match would also have to land in a data section.
function amd64Refs(code: Buffer, addr: number): number[] {
  const out: number[] = [];
  for (let i = 0; i + 7 <= code.length; i++) {
    const rex = code[i] ?? 0;
    if ((rex & 0xf8) !== 0x48) continue;
    const op = code[i + 1];
    if (op !== 0x8b && op !== 0x8d) continue;
    if (((code[i + 2] ?? 0) & 0xc7) !== 0x05) continue;
    out.push(addr + i + 7 + code.readInt32LE(i + 3));
    i += 6;
  }
  return out;
}

// ADRP Xd, page; then within the next few instructions ADD Xn, Xd, #imm or LDR/STR [Xd, #imm].
function arm64Refs(code: Buffer, addr: number): number[] {
  const out: number[] = [];
  for (let i = 0; i + 4 <= code.length; i += 4) {
    const insn = code.readUInt32LE(i);
    if ((insn & 0x9f000000) >>> 0 !== 0x90000000) continue;
    const rd = insn & 31;
    const immlo = (insn >>> 29) & 3;
    const immhi = (insn >>> 5) & 0x7ffff;
    let imm = (immhi << 2) | immlo;
    if (imm & 0x100000) imm -= 0x200000;
    const page = Math.floor((addr + i) / 4096) * 4096 + imm * 4096;
    for (let j = i + 4; j < i + 16 && j + 4 <= code.length; j += 4) {
      const next = code.readUInt32LE(j);
      if (((next >>> 5) & 31) !== rd) continue;
      if ((next & 0xff800000) >>> 0 === 0x91000000) {
        const sh = (next >>> 22) & 1;
        out.push(page + ((next >>> 10) & 0xfff) * (sh ? 4096 : 1));
        break;
      }
      if ((next & 0xffc00000) >>> 0 === 0xf9400000 || (next & 0xffc00000) >>> 0 === 0xf9000000) {
        out.push(page + ((next >>> 10) & 0xfff) * 8);
        break;
      }
    }
  }
  return out;
}

/** Data sections (runtime addresses) a global variable can be in. */
function inData(bin: GoBinary, a: number): boolean {
  for (const name of ['.noptrdata', '.data', '.bss', '.noptrbss']) {
    const s = bin.elf.section(name);
    if (s && a >= s.addr + bin.bias && a < s.addr + bin.bias + s.size) return true;
  }
  return false;
}

/** The decode of forEachGRace; null when it does not give two data addresses. */
export function decodeAllgs(bin: GoBinary): AllgsLocation | null {
  const f = bin.pclntab.funcByName('runtime.forEachGRace');
  if (!f) return null;
  const code = bin.elf.readAt(f.entry - bin.bias, Math.min(f.end - f.entry, 512));
  const refs = dataRefs(code, f.entry, bin.arch).filter((a) => inData(bin, a));
  const distinct = [...new Set(refs)];
  const [lenAddr, ptrAddr] = distinct;
  if (lenAddr === undefined || ptrAddr === undefined) return null;
  return { lenAddr, ptrAddr, how: 'forEachGRace' };
}

/** go-spy's way: a slice header in .data/.bss whose first g has goid 1 and a sane stack. */
export function scanAllgs(bin: GoBinary, space: AddressSpace, layout: GLayout): AllgsLocation | null {
  for (const name of ['.bss', '.data', '.noptrbss', '.noptrdata']) {
    const s = bin.elf.section(name);
    if (!s) continue;
    const base = s.addr + bin.bias;
    let d: Buffer;
    try {
      d = space.read(base, s.size);
    } catch {
      continue;
    }
    for (let p = 0; p + 24 <= d.length; p += 8) {
      const ptr = u64(d, p);
      const len = u64(d, p + 8);
      const cap = u64(d, p + 16);
      if (ptr === 0 || ptr % 8 !== 0 || len === 0 || len > cap || cap > 50_000_000) continue;
      if (looksLikeMainG(space, ptr, layout)) {
        return { lenAddr: base + p + 8, ptrAddr: base + p, how: 'allgs slice scan' };
      }
    }
  }
  return null;
}

function looksLikeMainG(space: AddressSpace, arr: number, layout: GLayout): boolean {
  try {
    const g = u64(space.read(arr, 8), 0);
    if (g === 0 || g % 8 !== 0) return false;
    const b = space.read(g, layout.size);
    const lo = u64(b, 0);
    const hi = u64(b, 8);
    return u64(b, layout.goid) === 1 && hi > lo && (hi - lo) % 1024 === 0 && (b.readUInt32LE(layout.atomicstatus) & ~0x1000) <= 10;
  } catch {
    return false;
  }
}

export function describeAllgs(loc: AllgsLocation): string {
  return `allglen at ${hex(loc.lenAddr)}, allgptr at ${hex(loc.ptrAddr)} (from ${loc.how})`;
}
