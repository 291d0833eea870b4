import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { withinDepth } from '../src/msgpack-depth.js';

/** The depth of a decoded value, counted the same way: the outermost container is 1, and an
 *  empty one holds nothing and is not counted. */
function depthOf(v: unknown): number {
  const items = Array.isArray(v) ? v : v !== null && typeof v === 'object' && !(v instanceof Uint8Array) ? Object.values(v) : null;
  return items && items.length > 0 ? 1 + Math.max(...items.map(depthOf)) : 0;
}

// Leaves of every width, whose payloads are full of 0x91 (a fixarray header): a walk that
// got a length wrong would read them as containers and find the value far deeper than it is.
// biome-ignore format: one line per family of encodings, as the comments say
const leaves: unknown[] = [
  0, 127, 200, 60_000, 4e9, Number.MAX_SAFE_INTEGER, -1, -100, -30_000, -2e9, -Number.MAX_SAFE_INTEGER, 1.5, null, true, false,
  'x', '\u0091'.repeat(15), '\u0091'.repeat(100), '\u0091'.repeat(40_000), // fixstr, str 8, 16, 32
  new Uint8Array(10).fill(0x91), new Uint8Array(300).fill(0x91), new Uint8Array(70_000).fill(0x91), // bin 8, 16, 32
  [], {},
];

/** Wraps `leaf` in `depth` containers, alternating maps and arrays, wide enough to need
 *  map 16 / array 16 headers on some levels. */
function nest(depth: number, leaf: unknown): unknown {
  let v = leaf;
  for (let d = 0; d < depth; d++) {
    const wide = d % 3 === 2;
    if (d % 2 === 0) v = wide ? [...new Array(20).fill(7), v] : [v, 'after'];
    else v = wide ? { ...Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, i])), v } : { v, w: -1 };
  }
  return v;
}

describe('withinDepth', () => {
  it('measures nesting exactly across every msgpack type and header width', () => {
    for (const leaf of leaves) {
      for (const depth of [1, 2, 5, 9]) {
        const v = nest(depth, leaf);
        const d = depthOf(v);
        expect(d).toBe(depth);
        const body = encode(v);
        expect(withinDepth(body, d), `${JSON.stringify(leaf)?.slice(0, 20)} at ${d}`).toBe(true);
        expect(withinDepth(body, d - 1), `${JSON.stringify(leaf)?.slice(0, 20)} at ${d} vs ${d - 1}`).toBe(false);
      }
    }
  });

  it('skips over float 32, ext and 32-bit container headers', () => {
    const float32 = [0xca, 0x91, 0x91, 0x91, 0x91];
    const fixext = [0xd4, 0x01, 0x91, 0xd8, 0x01, ...new Array(16).fill(0x91)];
    const ext8 = [0xc7, 0x03, 0x01, 0x91, 0x91, 0x91];
    const ext16 = [0xc8, 0x00, 0x02, 0x01, 0x91, 0x91];
    const ext32 = [0xc9, 0x00, 0x00, 0x00, 0x01, 0x01, 0x91];
    const items = [float32, fixext.slice(0, 3), fixext.slice(3), ext8, ext16, ext32];
    // array 32 of those six items, inside a map 32 of one entry: depth 2.
    const body = Buffer.from([0xdf, 0, 0, 0, 1, 0xa1, 0x61, 0xdd, 0, 0, 0, items.length, ...items.flat()]);
    expect(withinDepth(body, 2)).toBe(true);
    expect(withinDepth(body, 1)).toBe(false);
  });

  it('gives up at the first container past the limit', () => {
    const body = Buffer.alloc(1024 * 1024, 0x91); // a million one-element arrays, one inside the other
    expect(withinDepth(body, 16)).toBe(false);
    expect(withinDepth(body.subarray(0, 16), 16)).toBe(true); // truncated at the limit: left to the decoder
    expect(withinDepth(body.subarray(0, 17), 16)).toBe(false);
  });

  it('is not misled by an earlier walk, and takes limits deeper than any before', () => {
    // The walks share their per-level counts: one given up half-way leaves them full.
    const wide = encode(nest(9, 'x'));
    const deep = encode(nest(40, 1));
    for (let i = 0; i < 3; i++) {
      expect(withinDepth(Buffer.alloc(64, 0xdd), 8)).toBe(false); // array 32 headers: huge counts left behind
      expect(withinDepth(wide, 9)).toBe(true);
      expect(withinDepth(wide, 8)).toBe(false);
      expect(withinDepth(deep, 40)).toBe(true);
      expect(withinDepth(deep, 39)).toBe(false);
      expect(withinDepth(encode([[1], [2], [[3]]]), 3)).toBe(true);
      expect(withinDepth(encode([[1], [2], [[3]]]), 2)).toBe(false);
    }
  });

  it('leaves truncated and malformed input to the decoder', () => {
    expect(withinDepth(Buffer.from([0xdd, 0xff]), 4)).toBe(true); // a 32-bit length cut short
    expect(withinDepth(Buffer.from([0xdb, 0xff, 0xff, 0xff, 0xff, 0x91]), 0)).toBe(true); // a string longer than the body
    expect(withinDepth(Buffer.from([0xc1, 0xc1]), 0)).toBe(true);
    expect(withinDepth(Buffer.alloc(0), 0)).toBe(true);
  });
});
