// The Go runtime's own symbol table (.gopclntab), which `-s -w` keeps because tracebacks
// need it: function entries and names, and per function the pc-value tables that map a pc
// to its source file and line (pcfile, pcln), its frame's SP delta (pcsp) and the inlining
// state (PCDATA_InlTreeIndex). Layouts as runtime/symtab.go and cmd/link's pcln.go write
// them for Go 1.18 and later:
//
//   pcHeader  magic u32 (0xfffffff0: 1.18–1.19, 0xfffffff1: 1.20+), pad, pad, minLC u8,
//             ptrSize u8, nfunc, nfiles, textStart, then five offsets from the header:
//             funcnametab, cutab, filetab, pctab, pclntable (each pointer-sized)
//   pclntable functab[nfunc+1] {entryoff u32, funcoff u32} (entryoff from textStart),
//             then the _func records at pclntable+funcoff
//   _func     entryOff, nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset
//             (u32 each), startLine i32 (1.20+ only), funcID u8, flag u8, pad u8,
//             nfuncdata u8, then npcdata u32 pcdata offsets (into pctab), then nfuncdata
//             u32 funcdata offsets (from moduledata.gofunc; 0xffffffff is none)
//
// Older tables (1.2–1.17 magics) are refused with an error that names them.

export const PCDATA_InlTreeIndex = 2;
export const FUNCDATA_InlTree = 3;
export const FUNCDATA_ArgInfo = 5;
export const FUNCDATA_ArgLiveInfo = 6;
export const PCDATA_ArgLiveIndex = 3;

/** _func.flag bits (internal/abi FuncFlag). */
export const FuncFlagTopFrame = 1;
export const FuncFlagSPWrite = 2;

export interface Func {
  /** Index in the function table. */
  index: number;
  /** Absolute entry pc (textStart + entryOff). */
  entry: number;
  /** End pc (the next function's entry). */
  end: number;
  /** Offset of the _func record in the table's data. */
  off: number;
  nameOff: number;
  args: number;
  pcsp: number;
  pcfile: number;
  pcln: number;
  npcdata: number;
  cuOffset: number;
  startLine: number;
  funcID: number;
  flag: number;
  nfuncdata: number;
}

export class PclntabError extends Error {}

const MAGIC_118 = 0xfffffff0;
const MAGIC_120 = 0xfffffff1;
const OLD_MAGICS: ReadonlyMap<number, string> = new Map([
  [0xfffffffb, 'Go 1.2–1.15'],
  [0xfffffffa, 'Go 1.16–1.17'],
]);

export class Pclntab {
  readonly data: Buffer;
  /** '1.18' (1.18–1.19 layout) or '1.20' (1.20 and later). */
  readonly format: '1.18' | '1.20';
  readonly nfunc: number;
  readonly nfiles: number;
  /** pc quantum: 1 on amd64, 4 on arm64. */
  readonly quantum: number;
  readonly ptrSize: number;
  /** Absolute address of the first function's base (moduledata.text, with any load bias). */
  readonly textStart: number;
  private readonly funcnametab: number;
  private readonly cutab: number;
  private readonly filetab: number;
  private readonly pctab: number;
  private readonly pclntable: number;
  private readonly funcSize: number;
  private readonly fileCache = new Map<number, string>();

  /**
   * @param data the whole .gopclntab
   * @param textStart the runtime address of moduledata.text; defaults to the header's
   *   (which a PIE's file may hold as 0: it is filled in by a relocation at load)
   */
  constructor(data: Buffer, textStart?: number) {
    if (data.length < 72) throw new PclntabError(`.gopclntab is too short (${data.length} bytes)`);
    const magic = data.readUInt32LE(0);
    if (magic === MAGIC_118) this.format = '1.18';
    else if (magic === MAGIC_120) this.format = '1.20';
    else {
      const old = OLD_MAGICS.get(magic);
      throw new PclntabError(
        old
          ? `.gopclntab is in the ${old} format; only Go 1.18 and later are read`
          : `.gopclntab has an unknown magic 0x${magic.toString(16)}`,
      );
    }
    this.data = data;
    this.quantum = data[6] ?? 1;
    this.ptrSize = data[7] ?? 8;
    if (this.ptrSize !== 8) throw new PclntabError(`.gopclntab is for ${this.ptrSize}-byte pointers; only 64-bit targets are read`);
    const word = (i: number) => Number(data.readBigUInt64LE(8 + 8 * i));
    this.nfunc = word(0);
    this.nfiles = word(1);
    this.textStart = textStart ?? word(2);
    this.funcnametab = word(3);
    this.cutab = word(4);
    this.filetab = word(5);
    this.pctab = word(6);
    this.pclntable = word(7);
    this.funcSize = this.format === '1.18' ? 40 : 44;
    const ftabEnd = this.pclntable + 8 * (this.nfunc + 1);
    if (this.nfunc <= 0 || ftabEnd > data.length || this.funcnametab >= data.length || this.pctab >= data.length) {
      throw new PclntabError(`.gopclntab header is inconsistent (nfunc ${this.nfunc}, ${data.length} bytes)`);
    }
  }

  /** Entry of function i, absolute. i === nfunc gives the end of the last function. */
  entryOf(i: number): number {
    return this.textStart + this.u32(this.pclntable + 8 * i);
  }

  // The table comes from the target's binary: an offset in it may point anywhere, and a read
  // past its end is a damaged table, said as such (not a buffer's RangeError).
  private u32(at: number): number {
    if (!(at >= 0 && at + 4 <= this.data.length)) throw this.outside(at);
    return this.data.readUInt32LE(at);
  }

  private i32(at: number): number {
    if (!(at >= 0 && at + 4 <= this.data.length)) throw this.outside(at);
    return this.data.readInt32LE(at);
  }

  private outside(at: number): PclntabError {
    return new PclntabError(`.gopclntab is damaged: it points at offset ${at}, past its end (${this.data.length} bytes)`);
  }

  /** The function that contains pc, or undefined (binary search over the function table). */
  findFunc(pc: number): Func | undefined {
    if (pc < this.entryOf(0) || pc >= this.entryOf(this.nfunc)) return undefined;
    let lo = 0;
    let hi = this.nfunc - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.entryOf(mid) <= pc) lo = mid;
      else hi = mid - 1;
    }
    return this.func(lo);
  }

  func(i: number): Func {
    const d = this.data;
    const off = this.pclntable + this.u32(this.pclntable + 8 * i + 4);
    const u = (k: number) => this.u32(off + 4 * k);
    const tail = off + (this.format === '1.18' ? 36 : 40);
    return {
      index: i,
      entry: this.textStart + u(0),
      end: this.entryOf(i + 1),
      off,
      nameOff: this.i32(off + 4),
      args: this.i32(off + 8),
      pcsp: u(4),
      pcfile: u(5),
      pcln: u(6),
      npcdata: u(7),
      cuOffset: u(8),
      startLine: this.format === '1.18' ? 0 : this.i32(off + 36),
      funcID: d[tail] ?? 0,
      flag: d[tail + 1] ?? 0,
      nfuncdata: d[tail + 3] ?? 0,
    };
  }

  /** A NUL-terminated name from funcnametab. */
  nameAt(nameOff: number): string {
    const start = this.funcnametab + nameOff;
    const end = this.data.indexOf(0, start);
    return this.data.toString('utf8', start, end < 0 ? this.data.length : end);
  }

  name(f: Func): string {
    return this.nameAt(f.nameOff);
  }

  /**
   * The function named exactly `name` (first one, as the linker orders them). Compares the
   * name's bytes in place rather than decoding every name: a lookup or two per dump.
   */
  funcByName(name: string): Func | undefined {
    const want = Buffer.from(`${name}\0`, 'utf8');
    const d = this.data;
    for (let i = 0; i < this.nfunc; i++) {
      const off = this.u32(this.pclntable + 8 * i + 4);
      const start = this.funcnametab + this.i32(this.pclntable + off + 4);
      if (d[start] === want[0] && start + want.length <= d.length && d.compare(want, 0, want.length, start, start + want.length) === 0)
        return this.func(i);
    }
    return undefined;
  }

  /**
   * The value of pc-value table `off` at `pc` (runtime.pcvalue): a stream of (value delta,
   * pc delta) uvarint pairs from the entry, value zig-zag encoded, starting at -1. -1 when
   * the table is absent or pc is past its end.
   */
  pcvalue(f: Func, off: number, pc: number): number {
    if (off === 0) return -1;
    const d = this.data;
    let p = this.pctab + off;
    let curPC = f.entry;
    let val = -1;
    let first = true;
    for (;;) {
      // value delta
      let uv = 0;
      let shift = 0;
      let b: number;
      do {
        b = d[p++] ?? 0;
        uv += (b & 0x7f) * 2 ** shift;
        shift += 7;
      } while (b & 0x80);
      if (uv === 0 && !first) return -1;
      first = false;
      const delta = uv % 2 === 1 ? -((uv - 1) / 2) - 1 : uv / 2;
      // pc delta
      let pcd = 0;
      shift = 0;
      do {
        b = d[p++] ?? 0;
        pcd += (b & 0x7f) * 2 ** shift;
        shift += 7;
      } while (b & 0x80);
      curPC += pcd * this.quantum;
      val += delta;
      if (pc < curPC) return val;
      if (p >= d.length) return -1;
    }
  }

  /** PCDATA table `table` at pc, or -1. */
  pcdata(f: Func, table: number, pc: number): number {
    if (table >= f.npcdata) return -1;
    return this.pcvalue(f, this.u32(f.off + this.funcSize + 4 * table), pc);
  }

  /** FUNCDATA `i`'s offset from moduledata.gofunc, or null when the function has none. */
  funcdataOffset(f: Func, i: number): number | null {
    if (i >= f.nfuncdata) return null;
    const v = this.u32(f.off + this.funcSize + 4 * f.npcdata + 4 * i);
    return v === 0xffffffff ? null : v;
  }

  /** The SP delta of the frame at pc (bytes the function has pushed by then). */
  spDelta(f: Func, pc: number): number {
    return this.pcvalue(f, f.pcsp, pc);
  }

  /** Source file and line of pc within f, as the runtime's funcline prints them ("?", 0 if unknown). */
  fileLine(f: Func, pc: number): { file: string; line: number } {
    const fileno = this.pcvalue(f, f.pcfile, pc);
    const line = this.pcvalue(f, f.pcln, pc);
    if (fileno < 0 || line < 0) return { file: '?', line: 0 };
    return { file: this.fileName(f.cuOffset + fileno), line };
  }

  private fileName(cuIndex: number): string {
    let name = this.fileCache.get(cuIndex);
    if (name !== undefined) return name;
    const p = this.cutab + 4 * cuIndex;
    const off = p + 4 <= this.data.length ? this.data.readUInt32LE(p) : 0xffffffff;
    if (off === 0xffffffff) name = '?';
    else {
      const start = this.filetab + off;
      const end = this.data.indexOf(0, start);
      name = this.data.toString('utf8', start, end < 0 ? this.data.length : end);
    }
    this.fileCache.set(cuIndex, name);
    return name;
  }
}

/** How the runtime prints a function name (printFuncName): shapes of generics as "[...]", gopanic as "panic". */
export function printedFuncName(name: string): string {
  if (name === 'runtime.gopanic') return 'panic';
  const i = name.indexOf('[');
  if (i < 0) return name;
  const j = name.lastIndexOf(']');
  if (j <= i) return name;
  return `${name.slice(0, i)}[...]${name.slice(j + 1)}`;
}
