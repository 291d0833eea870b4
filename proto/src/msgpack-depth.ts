// How deep a msgpack body nests, found by walking its headers before anything is decoded.
// @msgpack/msgpack has length limits but no depth limit, and a 1 MiB frame of one-element
// arrays inside each other costs its decoder about 0.7 s of building arrays that the schema
// then throws away. This walk allocates nothing, skips over strings and binaries in one
// step, and gives up at the first container past the limit, so such a frame costs a few
// bytes' worth of work. Malformed or truncated input is left for the decoder to report.

let left = new Float64Array(16);

/** True when no array or map in `body` sits deeper than `maxDepth` (the outermost is 1; an
 *  empty one holds nothing, costs nothing, and is not counted). */
export function withinDepth(body: Uint8Array, maxDepth: number): boolean {
  // Items still to read in each open container (a map of n entries holds 2n items). One
  // array for every call: the collector walks thousands of bodies a second, and a fresh
  // typed array each time cost more than the walk of a small body. Slots are written before
  // they are read, so what an earlier call left in them does not matter.
  if (left.length < maxDepth) left = new Float64Array(maxDepth);
  let depth = 0;
  let pos = 0;
  while (pos < body.length) {
    const h = body[pos]!;
    let size = 1;
    let items = 0;
    if (h < 0x80 || h >= 0xe0)
      size = 1; // fixint
    else if (h < 0x90)
      items = (h & 0x0f) * 2; // fixmap
    else if (h < 0xa0)
      items = h & 0x0f; // fixarray
    else if (h < 0xc0)
      size = 1 + (h & 0x1f); // fixstr
    else {
      switch (h) {
        case 0xc4: // bin 8
        case 0xd9: // str 8
          size = 2 + u(body, pos + 1, 1);
          break;
        case 0xc5: // bin 16
        case 0xda: // str 16
          size = 3 + u(body, pos + 1, 2);
          break;
        case 0xc6: // bin 32
        case 0xdb: // str 32
          size = 5 + u(body, pos + 1, 4);
          break;
        case 0xc7: // ext 8: length, type, data
          size = 3 + u(body, pos + 1, 1);
          break;
        case 0xc8: // ext 16
          size = 4 + u(body, pos + 1, 2);
          break;
        case 0xc9: // ext 32
          size = 6 + u(body, pos + 1, 4);
          break;
        case 0xcc: // uint 8
        case 0xd0: // int 8
          size = 2;
          break;
        case 0xcd: // uint 16
        case 0xd1: // int 16
          size = 3;
          break;
        case 0xca: // float 32
        case 0xce: // uint 32
        case 0xd2: // int 32
          size = 5;
          break;
        case 0xcb: // float 64
        case 0xcf: // uint 64
        case 0xd3: // int 64
          size = 9;
          break;
        case 0xd4: // fixext 1, 2, 4, 8, 16: type byte, then the data
          size = 3;
          break;
        case 0xd5:
          size = 4;
          break;
        case 0xd6:
          size = 6;
          break;
        case 0xd7:
          size = 10;
          break;
        case 0xd8:
          size = 18;
          break;
        case 0xdc: // array 16
          size = 3;
          items = u(body, pos + 1, 2);
          break;
        case 0xdd: // array 32
          size = 5;
          items = u(body, pos + 1, 4);
          break;
        case 0xde: // map 16
          size = 3;
          items = 2 * u(body, pos + 1, 2);
          break;
        case 0xdf: // map 32
          size = 5;
          items = 2 * u(body, pos + 1, 4);
          break;
        default: // nil, booleans, and 0xc1 (never valid: the decoder says so)
          size = 1;
      }
    }
    pos += size;
    if (items > 0) {
      if (depth === maxDepth) return false;
      left[depth++] = items;
      continue;
    }
    // A whole value was read: it is one item of the container around it, and a container
    // whose last item it was is itself a whole value of the one around that.
    while (depth > 0 && --left[depth - 1]! === 0) depth--;
    if (depth === 0) return true;
  }
  return true; // truncated: not deeper than the limit so far, and the decoder will refuse it
}

/** A big-endian unsigned integer of `n` bytes at `at`; NaN past the end (which ends the walk). */
function u(b: Uint8Array, at: number, n: 1 | 2 | 4): number {
  if (at + n > b.length) return Number.NaN;
  let v = 0;
  for (let i = 0; i < n; i++) v = v * 256 + b[at + i]!;
  return v;
}
