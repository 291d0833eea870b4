// runtime.firstmoduledata, found without symbols: it starts with a pointer to the
// pclntab's header, and sits in .go.module (Go 1.26) or .noptrdata (earlier); a PIE's
// .gopclntab is .data.rel.ro.gopclntab (ElfFile.goSection). Only the fields
// the reader needs: text (the base of every function's entry offset; the 1.26 pclntab header
// no longer carries it) and gofunc (the base of FUNCDATA offsets, for the inline tree).
//
// Field offsets (runtime/symtab.go, 64-bit): pcHeader 0, six slices 8–151, findfunctab 152,
// minpc 160, maxpc 168, text 176, etext 184, noptrdata…enoptrbss 192–255, then Go 1.20 added
// covctrs/ecovctrs (256, 264) before end, gcdata, gcbss, types, etypes, rodata, gofunc: so
// gofunc is at 304 in 1.18–1.19 and at 320 from 1.20 (checked on every binary in
// guest-probe/test/go-static.test.ts, by text == .text and gofunc inside the read-only data).

import type { ElfFile } from './elf.js';
import { type AddressSpace, hex, u64 } from './space.js';

export interface ModuleData {
  addr: number;
  text: number;
  etext: number;
  gofunc: number;
}

const TEXT_OFF = 176;
const SIZE = 336;

export function findModuleData(elf: ElfFile, space: AddressSpace, bias: number, goMinor: number): ModuleData {
  const pcln = elf.goSection('.gopclntab');
  const textSec = elf.section('.text');
  if (!pcln || !textSec) throw new Error(`${elf.path}: no .gopclntab or .text section`);
  const want = pcln.addr + bias;
  const gofuncOff = goMinor >= 20 ? 320 : 304;
  for (const name of ['.go.module', '.noptrdata', '.data']) {
    const s = elf.goSection(name);
    if (!s || s.nobits || s.size < SIZE) continue;
    // From memory, not the file: in a PIE the file holds these pointers unrelocated.
    const d = space.read(s.addr + bias, s.size);
    // Candidates by a native search for the pointer's bytes, not a word-by-word loop (run
    // once per dump, interpreted: tens of thousands of words).
    const needle = Buffer.alloc(8);
    needle.writeUIntLE(want % 2 ** 48, 0, 6);
    needle.writeUInt16LE(Math.floor(want / 2 ** 48), 6);
    for (let p = d.indexOf(needle); p >= 0 && p + SIZE <= d.length; p = d.indexOf(needle, p + 1)) {
      if (p % 8 !== 0) continue;
      const text = u64(d, p + TEXT_OFF);
      const gofunc = u64(d, p + gofuncOff);
      if (text !== textSec.addr + bias) continue;
      return { addr: s.addr + bias + p, text, etext: u64(d, p + TEXT_OFF + 8), gofunc };
    }
  }
  throw new Error(
    `${elf.path}: runtime.firstmoduledata not found (no pointer to the pclntab at ${hex(want)} followed by the text address)`,
  );
}
