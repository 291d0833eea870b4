// The addon's checksum() (a 64-bit hash a word at a time) and readSealed(), with which the launcher
// reads and checks its code cache file.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadNative } from '../src/native.js';

const { checksum } = loadNative();

// Worked out by a separate implementation (Python, from checksum.c's description): 64-bit
// little-endian words, then the tail byte by byte, then the length and the finaliser.
it('hashes words, then the tail, then the length', () => {
  expect(checksum(Buffer.alloc(0))).toBe('b8cb396de59eab6a');
  expect(checksum(Buffer.from('a'))).toBe('63f7b38fc5ba2510');
  expect(checksum(Buffer.from('foobar'))).toBe('ccaf14f872d88094');
  expect(checksum(Buffer.from('foobarba'))).toBe('a08a9ad97d84b06d');
  expect(checksum(Buffer.from('foobarbaz'))).toBe('7404d84922523b55');
});

it('reads exactly the bytes of a view: Buffer slices and typed arrays', () => {
  const big = Buffer.from('xxfoobaryy');
  expect(checksum(big.subarray(2, 8))).toBe(checksum(Buffer.from('foobar')));
  const bytes = Buffer.from('foobar');
  expect(checksum(new Uint16Array(bytes.buffer, bytes.byteOffset, 3))).toBe('ccaf14f872d88094');
  expect(checksum(new Uint8Array([0x61]))).toBe('63f7b38fc5ba2510');
  // A view that starts off a word boundary reads its own bytes, not the aligned ones.
  const odd = Buffer.from('xfoobarbaz');
  expect(checksum(odd.subarray(1))).toBe('7404d84922523b55');
});

// Each flip apart from every other: with a plain (h ^ w) * P, a flip of one word's top bit and one
// of the next word's bit 30 gave the same hash.
it('tells any one flipped bit apart, in the words and in the tail', () => {
  const a = Buffer.alloc(203, 7); // 25 words and a 3-byte tail
  const seen = new Set([checksum(a)]);
  for (let byte = 0; byte < a.length; byte++) {
    for (let bit = 0; bit < 8; bit++) {
      const b = Buffer.from(a);
      b[byte] = b[byte]! ^ (1 << bit);
      seen.add(checksum(b));
    }
  }
  expect(seen.size).toBe(1 + a.length * 8);
});

it('counts trailing zero bytes', () => {
  expect(checksum(Buffer.alloc(8))).not.toBe(checksum(Buffer.alloc(16)));
  expect(checksum(Buffer.alloc(1))).not.toBe(checksum(Buffer.alloc(0)));
});

it('refuses anything that is not bytes', () => {
  expect(() => checksum('foobar' as never)).toThrow(TypeError);
  expect(() => (checksum as () => string)()).toThrow(/Buffer or TypedArray/);
});

describe('readSealed', () => {
  const { readSealed } = loadNative();
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-sealed-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));
  const sealed = (payload: Buffer, magic = 'VDC2') => Buffer.concat([Buffer.from(magic + checksum(payload), 'latin1'), payload]);
  const file = (bytes: Buffer) => {
    const p = path.join(dir, 'f');
    fs.writeFileSync(p, bytes);
    return p;
  };

  it('gives the payload of a whole file', () => {
    const payload = Buffer.from(Array.from({ length: 70_001 }, (_, i) => (i * 31) & 0xff));
    expect(Buffer.compare(readSealed(file(sealed(payload)), 'VDC2') as Buffer, payload)).toBe(0);
    expect(readSealed(file(sealed(Buffer.alloc(0))), 'VDC2')).toEqual(Buffer.alloc(0));
  });

  it('says missing for no file, or one that is not a regular file', () => {
    expect(readSealed(path.join(dir, 'none'), 'VDC2')).toBe('missing');
    expect(readSealed(dir, 'VDC2')).toBe('missing');
  });

  it('says corrupt for another magic, a changed byte, a cut or a longer file', () => {
    const good = sealed(Buffer.from('cached data'));
    expect(readSealed(file(good), 'VDC1')).toBe('corrupt');
    const flipped = Buffer.from(good);
    flipped[good.length - 1] = flipped[good.length - 1]! ^ 0x10;
    expect(readSealed(file(flipped), 'VDC2')).toBe('corrupt');
    expect(readSealed(file(good.subarray(0, good.length - 1)), 'VDC2')).toBe('corrupt');
    expect(readSealed(file(Buffer.concat([good, Buffer.from([0])])), 'VDC2')).toBe('corrupt');
    expect(readSealed(file(good.subarray(0, 10)), 'VDC2')).toBe('corrupt'); // shorter than its header
    const badHex = Buffer.from(good);
    badHex[4] = 'Z'.charCodeAt(0);
    expect(readSealed(file(badHex), 'VDC2')).toBe('corrupt');
  });

  it('refuses arguments that are not a path and a short magic', () => {
    expect(() => readSealed(1 as never, 'VDC2')).toThrow(TypeError);
    expect(() => readSealed(path.join(dir, 'f'), '')).toThrow(/magic/);
    expect(() => readSealed(path.join(dir, 'f'), 'x'.repeat(16))).toThrow(/magic/);
  });
});
