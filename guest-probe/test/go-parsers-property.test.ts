// Property tests for the live goroutine reader's parsers of guest-controlled bytes: the
// target's ELF headers and its .gopclntab. Whatever the bytes (mutated fields, flipped bytes,
// truncations), a parse either works or throws the reader's own error, with a message that
// says what is wrong; never a bare RangeError from a buffer read, a hang, or an allocation
// the size of a lying length field. Seeded (test/support/prng.ts): a failure names its seed.
import { closeSync, copyFileSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Prng } from '../../test/support/prng.js';
import { ElfFile } from '../src/dumps/go/elf.js';
import { Pclntab, PclntabError } from '../src/dumps/go/pclntab.js';
import { GO_BINARIES, requireBinary } from './go-binaries.js';

const SEED = 1201;
const binary = requireBinary(GO_BINARIES.find((b) => b.arch === 'amd64' && b.go === 'go1.22.5')!);
let dir = '';
let copy = '';
let original: Buffer;

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'vd-goprop-'));
  copy = path.join(dir, 'target');
  copyFileSync(binary, copy);
  original = readFileSync(binary);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A throw from the reader: its own message, not a buffer's range check. */
function expectClear(err: unknown, what: string): void {
  expect(err, what).toBeInstanceOf(Error);
  const e = err as Error & { code?: string };
  expect(e.name, `${what}: ${e.message}`).not.toBe('RangeError');
  expect(e.code ?? '', `${what}: ${e.message}`).not.toMatch(/^ERR_(OUT_OF_RANGE|BUFFER_OUT_OF_BOUNDS|INVALID_ARG_VALUE)$/);
}

/** The sections the reader reads (binary.ts, moduledata.ts, version.ts). */
const READ = ['.gopclntab', '.text', '.go.buildinfo', '.noptrdata', '.data', '.rodata'];

/** Opens `file` and reads the sections the reader would; returns the bytes read. */
function parseElf(file: string, size: number): number {
  const elf = new ElfFile(file);
  try {
    let bytes = 0;
    for (const name of READ) {
      const s = elf.section(name);
      if (!s || s.nobits) continue;
      try {
        bytes += elf.sectionData(s).length;
      } catch (err) {
        expectClear(err, `section ${s.name}`);
      }
    }
    expect(bytes).toBeLessThanOrEqual(size * READ.length);
    return bytes;
  } finally {
    elf.close();
  }
}

describe('ElfFile on hostile bytes', () => {
  it('mutated header fields and section headers: a section table or a clear error', () => {
    const r = new Prng(SEED);
    const h = original.subarray(0, 64);
    const shoff = Number(h.readBigUInt64LE(40));
    const shnum = h.readUInt16LE(60);
    // Header fields (offset, width) a hostile binary may lie in.
    const fields: Array<[number, 2 | 4 | 8]> = [
      [32, 8], // phoff
      [40, 8], // shoff
      [54, 2], // phentsize
      [56, 2], // phnum
      [58, 2], // shentsize
      [60, 2], // shnum
      [62, 2], // shstrndx
    ];
    const extremes = [0n, 1n, 0xffffn, 0xffffffffn, 0xffffffffffffffffn, BigInt(original.length), BigInt(original.length - 1)];
    const fd = openSync(copy, 'r+');
    try {
      for (let i = 0; i < 150; i++) {
        const patches: Array<[number, Buffer]> = [];
        const n = r.int(1, 3);
        for (let k = 0; k < n; k++) {
          const roll = r.float();
          if (roll < 0.5) {
            const [at, width] = r.pick(fields);
            const v = r.chance(0.5) ? r.pick(extremes) : BigInt(r.u32()) * BigInt(r.int(1, 1 << 20));
            const b = Buffer.alloc(8);
            b.writeBigUInt64LE(v & 0xffffffffffffffffn);
            patches.push([at, b.subarray(0, width)]);
          } else {
            // A section header's offset or size (each 8 bytes at +24 and +32 of its 64).
            const at = shoff + 64 * r.int(0, shnum - 1) + r.pick([24, 32, 0, 4]);
            patches.push([at, r.bytes(r.pick([4, 8]))]);
          }
        }
        for (const [at, b] of patches) writeSync(fd, b, 0, b.length, at);
        const t0 = performance.now();
        try {
          parseElf(copy, original.length);
        } catch (err) {
          expectClear(err, `case ${i} (seed ${SEED})`);
        } finally {
          for (const [at, b] of patches) writeSync(fd, original, at, b.length, at);
        }
        expect(performance.now() - t0, `case ${i}`).toBeLessThan(5000);
      }
    } finally {
      closeSync(fd);
    }
  }, 120_000);

  it('truncated anywhere: a section table or a clear error', () => {
    const r = new Prng(SEED + 1);
    const file = path.join(dir, 'cut');
    for (let i = 0; i < 60; i++) {
      const len = r.chance(0.7) ? r.int(0, 64 * 1024) : r.int(0, original.length);
      writeFileSync(file, original.subarray(0, len));
      try {
        parseElf(file, len);
      } catch (err) {
        expectClear(err, `cut at ${len}`);
      }
    }
  }, 60_000);
});

describe('Pclntab on hostile bytes', () => {
  let data: Buffer;
  let textStart = 0;
  beforeAll(() => {
    const elf = new ElfFile(binary);
    try {
      data = Buffer.from(elf.sectionData(elf.section('.gopclntab')!));
      textStart = elf.section('.text')!.addr;
    } finally {
      elf.close();
    }
  });

  /** What the goroutine reader asks of a table: lookups at pcs, names, lines, SP deltas. */
  function exercise(t: Pclntab, r: Prng): void {
    t.funcByName('main.main');
    for (let k = 0; k < 20; k++) {
      const f = k % 2 ? t.findFunc(textStart + r.int(0, 8 * 1024 * 1024)) : t.func(r.int(0, t.nfunc - 1));
      if (!f) continue;
      t.name(f);
      const pc = f.entry + r.int(0, Math.max(0, f.end - f.entry));
      t.fileLine(f, pc);
      t.spDelta(f, pc);
      t.pcdata(f, r.int(0, 4), pc);
      t.funcdataOffset(f, r.int(0, 6));
    }
  }

  it('the real table answers every lookup', () => {
    const t = new Pclntab(data, textStart);
    exercise(t, new Prng(SEED));
    expect(t.funcByName('main.main')).toBeDefined();
  });

  it('mutated, flipped and truncated tables: answers or a PclntabError, quickly', () => {
    const r = new Prng(SEED + 2);
    for (let i = 0; i < 300; i++) {
      let d: Buffer;
      const roll = r.float();
      if (roll < 0.2) d = data.subarray(0, r.int(0, data.length));
      else {
        d = Buffer.from(data);
        if (roll < 0.6) {
          // A header word: nfunc, nfiles, textStart, or one of the five table offsets.
          const b = Buffer.alloc(8);
          b.writeBigUInt64LE(BigInt(r.u32()) * BigInt(r.chance(0.5) ? 1 : r.int(1, 1 << 16)));
          b.copy(d, 8 + 8 * r.int(0, 7));
        } else {
          // Bytes anywhere: the function table, the _func records, the pc-value streams.
          for (let k = r.int(1, 64); k > 0; k--) d[r.int(0, d.length - 1)] = r.u32() & 0xff;
        }
      }
      const t0 = performance.now();
      try {
        exercise(new Pclntab(d, textStart), new Prng(i));
      } catch (err) {
        expect(err, `case ${i} (seed ${SEED + 2}): ${(err as Error).message}`).toBeInstanceOf(PclntabError);
      }
      expect(performance.now() - t0, `case ${i}`).toBeLessThan(5000);
    }
  }, 60_000);
});
