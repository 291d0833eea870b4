// The addon's checksum(): FNV-1a 64, which the launcher uses to check its code cache file.
import { expect, it } from 'vitest';
import { loadNative } from '../src/native.js';

const { checksum } = loadNative();

it('is FNV-1a 64 (published test vectors)', () => {
  expect(checksum(Buffer.alloc(0))).toBe('cbf29ce484222325');
  expect(checksum(Buffer.from('a'))).toBe('af63dc4c8601ec8c');
  expect(checksum(Buffer.from('foobar'))).toBe('85944171f73967e8');
});

it('reads exactly the bytes of a view: Buffer slices and typed arrays', () => {
  const big = Buffer.from('xxfoobaryy');
  expect(checksum(big.subarray(2, 8))).toBe(checksum(Buffer.from('foobar')));
  const bytes = Buffer.from('foobar');
  expect(checksum(new Uint16Array(bytes.buffer, bytes.byteOffset, 3))).toBe('85944171f73967e8');
  expect(checksum(new Uint8Array([0x61]))).toBe('af63dc4c8601ec8c');
});

it('tells one flipped bit apart', () => {
  const a = Buffer.alloc(4096, 7);
  const b = Buffer.from(a);
  b[2000] = b[2000]! ^ 1;
  expect(checksum(a)).not.toBe(checksum(b));
});

it('refuses anything that is not bytes', () => {
  expect(() => checksum('foobar' as never)).toThrow(TypeError);
  expect(() => (checksum as () => string)()).toThrow(/Buffer or TypedArray/);
});
