// Property tests for the frame decoder (frame.ts), which reads guest-controlled bytes first:
// seeded (test/support/prng.ts), so a failure names its seed.
import { describe, expect, it } from 'vitest';
import { Prng } from '../../test/support/prng.js';
import { ProtocolError } from '../src/errors.js';
import { FrameDecoder, frame } from '../src/frame.js';
import { FRAME_HEADER_BYTES } from '../src/limits.js';

const SEED = 4242;

/** `stream` cut into chunks of random sizes (one byte up to `max`). */
function chunks(r: Prng, stream: Buffer, max: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < stream.length; ) {
    const n = r.int(1, max);
    out.push(stream.subarray(at, at + n));
    at += n;
  }
  return out;
}

describe('FrameDecoder properties', () => {
  it('gives back exactly the bodies framed, in order, however the stream is split', () => {
    const r = new Prng(SEED);
    for (let run = 0; run < 150; run++) {
      const bodies = Array.from({ length: r.int(1, 30) }, () => r.bytes(r.chance(0.05) ? r.int(4096, 70_000) : r.int(1, 300)));
      const got: Buffer[] = [];
      const d = new FrameDecoder((b) => got.push(Buffer.from(b)), 80_000);
      for (const c of chunks(r, Buffer.concat(bodies.map(frame)), r.pick([1, 3, 7, 64, 4096, 65_536]))) d.push(c);
      d.end();
      // Compared as bytes (a deep equality walks a Buffer's every index as a key).
      expect(got.length, `run ${run} (seed ${SEED})`).toBe(bodies.length);
      got.forEach((b, i) => expect(b.equals(bodies[i]!), `run ${run} body ${i} (seed ${SEED})`).toBe(true));
      expect(d.pending).toBe(0);
    }
  }, 60_000);

  it('on any bytes: frames within the limit or a ProtocolError, never more buffered than one frame', () => {
    const r = new Prng(SEED + 1);
    for (let run = 0; run < 250; run++) {
      const limit = r.pick([16, 1024, 65_536]);
      // Random bytes, or frames with some length prefixes or bytes changed.
      let stream: Buffer;
      if (r.chance(0.5)) stream = r.bytes(r.int(0, 20_000));
      else {
        stream = Buffer.concat(Array.from({ length: r.int(1, 20) }, () => frame(r.bytes(r.int(1, limit)))));
        for (let k = r.int(1, 4); k > 0; k--) stream[r.int(0, stream.length - 1)] = r.u32() & 0xff;
      }
      const lengths: number[] = [];
      const d = new FrameDecoder((b) => lengths.push(b.length), limit);
      let failed: unknown = null;
      for (const c of chunks(r, stream, 512)) {
        try {
          d.push(c);
        } catch (err) {
          failed = err;
          break;
        }
        // Complete frames are handed on: what stays is part of one frame, never past the limit.
        expect(d.pending, `run ${run}`).toBeLessThan(FRAME_HEADER_BYTES + limit);
      }
      for (const n of lengths) expect(n).toBeGreaterThan(0);
      for (const n of lengths) expect(n).toBeLessThanOrEqual(limit);
      if (failed) {
        expect(failed).toBeInstanceOf(ProtocolError);
        expect(['ERR_FRAME_TOO_LARGE', 'ERR_FRAME_EMPTY']).toContain((failed as ProtocolError).code);
        // After a failure the stream position is lost: every later push fails the same way.
        expect(() => d.push(Buffer.from([0, 0, 0, 1, 0]))).toThrow(failed as Error);
      } else if (d.pending > 0) {
        expect(() => d.end()).toThrowError(expect.objectContaining({ code: 'ERR_TRUNCATED' }));
      } else expect(() => d.end()).not.toThrow();
    }
  }, 60_000);

  it('refuses a length prefix over the limit before buffering its body', () => {
    const r = new Prng(SEED + 2);
    for (let run = 0; run < 200; run++) {
      const limit = r.int(1, 1 << 20);
      const header = Buffer.alloc(FRAME_HEADER_BYTES);
      header.writeUInt32BE(r.int(limit + 1, 0xffffffff));
      const d = new FrameDecoder(() => {}, limit);
      expect(() => d.push(Buffer.concat([header, r.bytes(r.int(0, 100))]))).toThrowError(
        expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE' }),
      );
    }
  });
});

describe('FrameDecoder: a peer that writes a byte at a time', () => {
  // The attack: before the fix a 64 KiB hello sent a byte at a time stalled the collector's
  // event loop for 19 s on this machine (each byte's chunk shifted off the array in turn).
  it('a 1 MiB frame in 1-byte chunks costs linear time, not quadratic', () => {
    const body = Buffer.alloc(1024 * 1024, 7);
    const framed = frame(body);
    let got = 0;
    const d = new FrameDecoder((b) => (got = b.length), 1024 * 1024);
    const t0 = performance.now();
    for (let i = 0; i < framed.length; i++) d.push(framed.subarray(i, i + 1));
    expect(got).toBe(body.length);
    // Linear: well under a second even on a loaded machine (quadratic took hours).
    expect(performance.now() - t0).toBeLessThan(5000);
  }, 30_000);
});
