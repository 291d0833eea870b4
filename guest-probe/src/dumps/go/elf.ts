// ELF64 little-endian reader for a Go executable: header, program headers (to map a
// virtual address to a file offset and to find a PIE's load bias) and section headers (the
// Go sections survive `-s -w`; only .symtab and the DWARF go). Reads the file with pread,
// never maps it: the probe reads only the sections it needs.

import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

export type GoArch = 'amd64' | 'arm64';

const EM_X86_64 = 62;
const EM_AARCH64 = 183;
const PT_LOAD = 1;
const ET_DYN = 3;

export interface ElfSection {
  name: string;
  /** Link-time virtual address (0 for sections that are not loaded). */
  addr: number;
  offset: number;
  size: number;
  /** SHT_NOBITS (.bss, .noptrbss): nothing in the file. */
  nobits: boolean;
}

export interface ElfSegment {
  vaddr: number;
  offset: number;
  filesz: number;
  memsz: number;
  align: number;
}

export class NotElfError extends Error {}

/** An open ELF file. Call close() when done. */
export class ElfFile {
  readonly path: string;
  readonly arch: GoArch;
  /** ET_DYN: position independent, loaded at a bias (see loadBias in memory.ts). */
  readonly pie: boolean;
  readonly sections: ElfSection[];
  readonly segments: ElfSegment[];
  readonly fileSize: number;
  private fd: number;

  constructor(path: string) {
    this.path = path;
    this.fd = openSync(path, 'r');
    try {
      this.fileSize = fstatSync(this.fd).size;
      const h = this.read(0, 64);
      if (h.length < 64 || h.readUInt32BE(0) !== 0x7f454c46) throw new NotElfError(`${path} is not an ELF file`);
      if (h[4] !== 2 || h[5] !== 1) throw new NotElfError(`${path} is not a 64-bit little-endian ELF file (class ${h[4]}, data ${h[5]})`);
      const machine = h.readUInt16LE(18);
      if (machine === EM_X86_64) this.arch = 'amd64';
      else if (machine === EM_AARCH64) this.arch = 'arm64';
      else throw new NotElfError(`${path} is for ELF machine ${machine}; only x86-64 and aarch64 are read`);
      this.pie = h.readUInt16LE(16) === ET_DYN;
      this.segments = this.readSegments(h);
      this.sections = this.readSections(h);
    } catch (err) {
      closeSync(this.fd);
      throw err;
    }
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  /** Reads up to `len` bytes at file offset `pos` (shorter only at the end of the file), into `into` when it is large enough.
   *  Never allocates more than the file holds there, whatever a (hostile) length field says. */
  read(pos: number, len: number, into?: Buffer): Buffer {
    len = pos >= 0 && pos < this.fileSize && len > 0 ? Math.min(len, this.fileSize - pos) : 0;
    const buf = into && into.length >= len ? into.subarray(0, len) : Buffer.allocUnsafe(len);
    let got = 0;
    while (got < len) {
      const n = readSync(this.fd, buf, got, len - got, pos + got);
      if (n === 0) break;
      got += n;
    }
    return got === len ? buf : buf.subarray(0, got);
  }

  section(name: string): ElfSection | undefined {
    return this.sections.find((s) => s.name === name);
  }

  /**
   * A section the Go linker writes, by its name in an ordinary executable (".gopclntab"): in a
   * PIE the read-only sections that hold pointers go into RELRO and take a ".data.rel.ro"
   * prefix (".data.rel.ro.gopclntab"), as debug/elf readers of Go binaries look for too.
   */
  goSection(name: string): ElfSection | undefined {
    return this.section(name) ?? this.section(`.data.rel.ro${name}`);
  }

  /** The whole section's bytes (in `into` when it is large enough); throws if it has none in the file. */
  sectionData(s: ElfSection, into?: Buffer): Buffer {
    if (s.nobits) throw new Error(`${this.path}: section ${s.name} has no bytes in the file`);
    if (s.offset + s.size > this.fileSize) {
      throw new NotElfError(
        `${this.path}: section ${s.name} (${s.size} bytes at ${s.offset}) runs past the end of the file (${this.fileSize} bytes)`,
      );
    }
    return this.read(s.offset, s.size, into);
  }

  /** The file offset of link-time address `addr` (in some PT_LOAD's file part), or -1. */
  offsetOf(addr: number): number {
    for (const s of this.segments) {
      if (addr >= s.vaddr && addr < s.vaddr + s.filesz) return s.offset + (addr - s.vaddr);
    }
    return -1;
  }

  /** `len` bytes of the file image at link-time address `addr`; throws outside the file's segments. */
  readAt(addr: number, len: number): Buffer {
    const off = this.offsetOf(addr);
    if (off < 0 || this.offsetOf(addr + len - 1) < 0) {
      throw new Error(`${this.path}: address 0x${addr.toString(16)} (+${len}) is not in the file`);
    }
    return this.read(off, len);
  }

  /** A header table: `num` entries of `entsize` (at least `min`) bytes at `off`, all in the file. */
  private table(kind: string, off: number, entsize: number, num: number, min: number): Buffer {
    if (num === 0) return Buffer.alloc(0);
    if (entsize < min) throw new NotElfError(`${this.path}: ${kind} header entries of ${entsize} bytes (an ELF64 one has ${min})`);
    const table = this.read(off, entsize * num);
    if (table.length < entsize * num) {
      throw new NotElfError(`${this.path}: the ${kind} header table (${num} × ${entsize} bytes at ${off}) runs past the end of the file`);
    }
    return table;
  }

  private readSegments(h: Buffer): ElfSegment[] {
    const phoff = Number(h.readBigUInt64LE(32));
    const phentsize = h.readUInt16LE(54);
    const phnum = h.readUInt16LE(56);
    const table = this.table('program', phoff, phentsize, phnum, 56);
    const out: ElfSegment[] = [];
    for (let i = 0; i < phnum; i++) {
      const p = i * phentsize;
      if (table.readUInt32LE(p) !== PT_LOAD) continue;
      out.push({
        offset: Number(table.readBigUInt64LE(p + 8)),
        vaddr: Number(table.readBigUInt64LE(p + 16)),
        filesz: Number(table.readBigUInt64LE(p + 32)),
        memsz: Number(table.readBigUInt64LE(p + 40)),
        align: Number(table.readBigUInt64LE(p + 48)),
      });
    }
    return out;
  }

  private readSections(h: Buffer): ElfSection[] {
    const shoff = Number(h.readBigUInt64LE(40));
    const shentsize = h.readUInt16LE(58);
    const shnum = h.readUInt16LE(60);
    const shstrndx = h.readUInt16LE(62);
    if (shoff === 0 || shnum === 0) return [];
    const table = this.table('section', shoff, shentsize, shnum, 64);
    const raw = [];
    for (let i = 0; i < shnum; i++) {
      const p = i * shentsize;
      raw.push({
        nameOff: table.readUInt32LE(p),
        type: table.readUInt32LE(p + 4),
        addr: Number(table.readBigUInt64LE(p + 16)),
        offset: Number(table.readBigUInt64LE(p + 24)),
        size: Number(table.readBigUInt64LE(p + 32)),
      });
    }
    const strtab = raw[shstrndx];
    const names = strtab ? this.read(strtab.offset, strtab.size) : Buffer.alloc(0);
    return raw.map((r) => {
      const end = names.indexOf(0, r.nameOff);
      return {
        name: names.toString('latin1', r.nameOff, end < 0 ? names.length : end),
        addr: r.addr,
        offset: r.offset,
        size: r.size,
        nobits: r.type === 8 /* SHT_NOBITS */,
      };
    });
  }
}
