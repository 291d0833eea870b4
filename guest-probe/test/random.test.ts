// The addon's randomHex(): the probe's instance id, read from /dev/urandom without node:fs.
import { expect, it } from 'vitest';
import { loadNative } from '../src/native.js';

const { randomHex } = loadNative();

it('gives n bytes as 2n lower-case hex digits, different each time', () => {
  for (const n of [1, 8, 64]) expect(randomHex(n)).toMatch(new RegExp(`^[0-9a-f]{${2 * n}}$`));
  const seen = new Set(Array.from({ length: 200 }, () => randomHex(8)));
  expect(seen.size).toBe(200);
});

it('uses every digit: the bytes are not a fixed pattern', () => {
  const digits = new Set(Array.from({ length: 50 }, () => randomHex(64)).join(''));
  expect(digits.size).toBe(16);
});

it('refuses a count that is not an integer from 1 to 64', () => {
  for (const bad of [0, 65, 1.5, -1, Number.NaN, '8' as never]) expect(() => randomHex(bad)).toThrow(RangeError);
  expect(() => (randomHex as () => string)()).toThrow(/1 to 64/);
});
