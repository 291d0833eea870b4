// A Go executable opened for symbolising: its ELF, Go version, pclntab (rebased to where the
// process has it) and module data. Also the source frames of one pc, inlined calls expanded
// innermost first, as the runtime's inlineUnwinder does.

import { ElfFile, type GoArch } from './elf.js';
import { findModuleData, type ModuleData } from './moduledata.js';
import { FUNCDATA_InlTree, type Func, PCDATA_InlTreeIndex, Pclntab } from './pclntab.js';
import { type AddressSpace, FileSpace } from './space.js';
import { type GoVersion, readGoVersion } from './version.js';

export interface SourceFrame {
  /** The function's name as stored ("main.(*T).m", "pkg.F[go.shape.int]"). */
  name: string;
  file: string;
  line: number;
  /** An inlined call: Go prints its arguments as "...", and no "+0x" offset. */
  inlined: boolean;
  /** internal/abi FuncID of the (possibly inlined) function. */
  funcID: number;
  /** The pc its file and line are of: for the physical frame, the call site after the inlined calls were unwound. */
  pc: number;
}

/** What a walk needs about one pc, computed once per distinct pc (goroutines share most). */
export interface PcInfo {
  /** The pc itself (a return address, or the exact pc of the innermost frame). */
  pc: number;
  f: Func;
  name: string;
  /** pcsp at pc (-1: none). */
  spDelta: number;
  /** The source frames at the symbolised pc (pc-1 unless the frame was entered by a trap). */
  frames: SourceFrame[];
  symPC: number;
}

export class GoBinary {
  readonly elf: ElfFile;
  readonly version: GoVersion;
  readonly arch: GoArch;
  readonly pclntab: Pclntab;
  readonly moduledata: ModuleData;
  /** Runtime address minus link-time address (non-zero only for a PIE). */
  readonly bias: number;
  private readonly inlCache = new Map<number, Buffer>();
  private readonly rodataCache = new Map<number, Buffer>();
  private readonly pcCache = new Map<number, PcInfo>();

  /**
   * @param space where the module data is read: the live process (its pointers are
   *   relocated there) or, for static analysis, the file itself (the default)
   * @param pclntabInto a buffer to read the pclntab into, when it is large enough (a
   *   previous read's: see index.ts ReadBuffers)
   */
  constructor(path: string, opts: { bias?: number; space?: AddressSpace; pclntabInto?: Buffer } = {}) {
    this.elf = new ElfFile(path);
    try {
      this.version = readGoVersion(this.elf);
      this.arch = this.elf.arch;
      this.bias = opts.bias ?? 0;
      const space = opts.space ?? new FileSpace(this.elf, this.bias);
      this.moduledata = findModuleData(this.elf, space, this.bias, this.version.minor);
      const pcln = this.elf.goSection('.gopclntab');
      if (!pcln) throw new Error(`${path}: no .gopclntab`);
      this.pclntab = new Pclntab(this.elf.sectionData(pcln, opts.pclntabInto), this.moduledata.text);
    } catch (err) {
      this.elf.close();
      throw err;
    }
  }

  close(): void {
    this.elf.close();
  }

  findFunc(pc: number): Func | undefined {
    return this.pclntab.findFunc(pc);
  }

  /** Cached pc facts; undefined when pc is in no function. */
  pcInfo(pc: number, trap: boolean): PcInfo | undefined {
    const key = trap ? -pc : pc;
    const hit = this.pcCache.get(key);
    if (hit) return hit;
    const f = this.findFunc(pc);
    if (!f) return undefined;
    const symPC = !trap && pc > f.entry ? pc - 1 : pc;
    const info = { pc, f, name: this.funcName(f), spDelta: this.pclntab.spDelta(f, pc), frames: this.sourceFrames(f, symPC), symPC };
    this.pcCache.set(key, info);
    return info;
  }

  funcName(f: Func): string {
    return this.pclntab.name(f);
  }

  /**
   * The source frames at `pc` inside f, innermost first: each inlined call (from the
   * FUNCDATA_InlTree entry that PCDATA_InlTreeIndex selects, then its parent's pc), and
   * last f itself. `pc` is the pc to symbolise (a return address minus one, or an exact pc).
   */
  sourceFrames(f: Func, pc: number): SourceFrame[] {
    const out: SourceFrame[] = [];
    const tab = this.pclntab;
    const inlOff = tab.funcdataOffset(f, FUNCDATA_InlTree);
    let p = pc;
    // The tree is finite and parentPc always leads outwards; the bound only guards a corrupt table.
    for (let depth = 0; inlOff !== null && depth < 1000; depth++) {
      const ix = tab.pcdata(f, PCDATA_InlTreeIndex, p);
      if (ix < 0) break;
      const e = this.inlinedCall(this.moduledata.gofunc + inlOff, ix);
      const { file, line } = tab.fileLine(f, p);
      out.push({ name: tab.nameAt(e.nameOff), file, line, inlined: true, funcID: e.funcID, pc: p });
      p = f.entry + e.parentPc;
    }
    const { file, line } = tab.fileLine(f, p);
    out.push({ name: tab.name(f), file, line, inlined: false, funcID: f.funcID, pc: p });
    return out;
  }

  /** Read-only data (FUNCDATA) at runtime address `addr`, from the file; shorter at the file's end. */
  readRodata(addr: number, len: number): Buffer {
    let b = this.rodataCache.get(addr);
    if (!b) {
      const off = this.elf.offsetOf(addr - this.bias);
      if (off < 0) throw new Error(`${this.elf.path}: FUNCDATA address 0x${addr.toString(16)} is not in the file`);
      b = this.elf.read(off, len);
      this.rodataCache.set(addr, b);
    }
    return b;
  }

  /** One runtime.inlinedCall: 1.18–1.19 {parent i16, funcID u8, _, file i32, line i32, func_ i32, parentPc i32}; 1.20+ {funcID u8, _[3], nameOff i32, parentPc i32, startLine i32}. */
  private inlinedCall(base: number, ix: number): { funcID: number; nameOff: number; parentPc: number } {
    const old = this.pclntab.format === '1.18';
    const size = old ? 20 : 16;
    const addr = base + ix * size;
    let b = this.inlCache.get(addr);
    if (!b) {
      b = this.elf.readAt(addr - this.bias, size);
      this.inlCache.set(addr, b);
    }
    return old
      ? { funcID: b[2] ?? 0, nameOff: b.readInt32LE(12), parentPc: b.readInt32LE(16) }
      : { funcID: b[0] ?? 0, nameOff: b.readInt32LE(4), parentPc: b.readInt32LE(8) };
  }
}
