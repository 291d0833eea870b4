// The Go version a binary was built with: from .go.buildinfo when it has one (what `go
// version FILE` reads), else from the runtime.buildVersion string, which every Go binary
// carries (some builds, e.g. esbuild's from 0.27 on, have no .go.buildinfo section).

import type { ElfFile } from './elf.js';

export interface GoVersion {
  /** As the toolchain names itself: "go1.26.5", "go1.20.4", "go1.23rc1". */
  text: string;
  major: number;
  minor: number;
  patch: number;
  /** Where it was read: '.go.buildinfo' or 'runtime.buildVersion'. */
  source: string;
}

export class NotGoBinaryError extends Error {}

const BUILDINFO_MAGIC = Buffer.from('\xff Go buildinf:', 'latin1');
const VERSION_RE = /^go1\.(\d+)(?:\.(\d+))?((?:rc|beta)\d+)?$/;

export function parseGoVersion(text: string, source: string): GoVersion | null {
  const m = VERSION_RE.exec(text);
  if (!m) return null;
  return { text, major: 1, minor: Number(m[1]), patch: Number(m[2] ?? 0), source };
}

/** Reads the Go version; throws NotGoBinaryError when the file is not a Go executable. */
export function readGoVersion(elf: ElfFile): GoVersion {
  if (!elf.goSection('.gopclntab')) {
    throw new NotGoBinaryError(`${elf.path} is not a Go executable (no .gopclntab section)`);
  }
  return fromBuildinfo(elf) ?? fromBuildVersion(elf) ?? noVersion(elf);
}

function noVersion(elf: ElfFile): never {
  throw new NotGoBinaryError(`${elf.path} has a .gopclntab but no Go version string (neither .go.buildinfo nor runtime.buildVersion)`);
}

function fromBuildinfo(elf: ElfFile): GoVersion | null {
  const s = elf.section('.go.buildinfo');
  if (!s || s.nobits || s.size < 32) return null;
  const data = elf.read(s.offset, Math.min(s.size, 4096));
  if (!data.subarray(0, 14).equals(BUILDINFO_MAGIC)) return null;
  const ptrSize = data[14] ?? 8;
  const flags = data[15] ?? 0;
  let text: string | null;
  if (flags & 2) {
    // Go 1.18+: the strings follow the header inline, each as uvarint length + bytes.
    text = uvarintString(data, 32);
  } else {
    // Older: pointers to string headers in the data.
    const hdr = readPtr(data, 16, ptrSize, (flags & 1) !== 0);
    text = hdr ? goString(elf, hdr, ptrSize) : null;
  }
  return text ? parseGoVersion(text, '.go.buildinfo') : null;
}

function uvarintString(b: Buffer, pos: number): string | null {
  let len = 0;
  let shift = 0;
  for (;;) {
    const c = b[pos++];
    if (c === undefined || shift > 28) return null;
    len |= (c & 0x7f) << shift;
    if (c < 0x80) break;
    shift += 7;
  }
  if (pos + len > b.length) return null;
  return b.toString('latin1', pos, pos + len);
}

function readPtr(b: Buffer, pos: number, ptrSize: number, bigEndian: boolean): number {
  if (ptrSize === 8) return Number(bigEndian ? b.readBigUInt64BE(pos) : b.readBigUInt64LE(pos));
  return bigEndian ? b.readUInt32BE(pos) : b.readUInt32LE(pos);
}

function goString(elf: ElfFile, hdrAddr: number, ptrSize: number): string | null {
  try {
    const h = elf.readAt(hdrAddr, 2 * ptrSize);
    const ptr = readPtr(h, 0, ptrSize, false);
    const len = readPtr(h, ptrSize, ptrSize, false);
    if (len <= 0 || len > 64) return null;
    return elf.readAt(ptr, len).toString('latin1');
  } catch {
    return null;
  }
}

/**
 * runtime.buildVersion: a Go string variable, so its bytes ("go1.26.5") sit in .rodata and
 * its header {ptr, len} in a data section. Other "go1.N" texts occur (in error messages,
 * inside longer strings); only one is the target of a header whose length is exactly the
 * version's.
 */
function fromBuildVersion(elf: ElfFile): GoVersion | null {
  const rodata = elf.section('.rodata');
  if (!rodata || rodata.nobits) return null;
  const bytes = elf.sectionData(rodata);
  const wanted = new Map<number, string>(); // address → candidate text
  const re = /go1\.\d+(?:\.\d+)?(?:(?:rc|beta)\d+)?/g;
  const text = bytes.toString('latin1');
  for (let m = re.exec(text); m; m = re.exec(text)) wanted.set(rodata.addr + m.index, m[0]);
  if (wanted.size === 0) return null;
  const found: string[] = [];
  for (const name of ['.go.module', '.noptrdata', '.data']) {
    const s = elf.section(name);
    if (!s || s.nobits) continue;
    const d = elf.sectionData(s);
    for (let p = 0; p + 16 <= d.length; p += 8) {
      const lo = d.readUInt32LE(p);
      const cand = wanted.get(lo + d.readUInt32LE(p + 4) * 0x1_0000_0000);
      if (cand === undefined) continue;
      const len = Number(d.readBigUInt64LE(p + 8));
      // The header's length must be the version's whole text (prefix matches like "go1.2"
      // of "go1.26.5" are other strings).
      if (len === cand.length) found.push(cand);
      else if (len > 0 && len < cand.length) {
        const cut = cand.slice(0, len);
        if (VERSION_RE.test(cut)) found.push(cut);
      }
    }
  }
  // The most specific one (go1.26.5 over go1.26, which the runtime keeps for other uses).
  found.sort((a, b) => b.length - a.length);
  for (const t of found) {
    const v = parseGoVersion(t, 'runtime.buildVersion');
    if (v) return v;
  }
  return null;
}
