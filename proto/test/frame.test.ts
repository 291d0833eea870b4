import { describe, expect, it } from 'vitest';
import { FrameDecoder, frame } from '../src/frame.js';
import { ProtocolError } from '../src/errors.js';

function collect(maxFrame?: number) {
  const frames: Buffer[] = [];
  const decoder = new FrameDecoder((b) => frames.push(Buffer.from(b)), maxFrame);
  return { frames, decoder };
}

const bodies = [Buffer.from('a'), Buffer.from('hello world'), Buffer.alloc(300, 7), Buffer.from([0, 1, 2, 3, 4])];
const stream = Buffer.concat(bodies.map((b) => frame(b)));

describe('FrameDecoder', () => {
  it('reassembles frames split at every byte boundary', () => {
    for (let cut = 1; cut < stream.length; cut++) {
      const { frames, decoder } = collect();
      decoder.push(stream.subarray(0, cut));
      decoder.push(stream.subarray(cut));
      expect(frames).toEqual(bodies);
      expect(decoder.pending).toBe(0);
    }
  });

  it('handles one byte at a time and everything merged in one chunk', () => {
    const one = collect();
    for (const byte of stream) one.decoder.push(Buffer.from([byte]));
    expect(one.frames).toEqual(bodies);
    const merged = collect();
    merged.decoder.push(stream);
    expect(merged.frames).toEqual(bodies);
  });

  it('splits at random boundaries (property check)', () => {
    let seed = 42;
    const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
    for (let round = 0; round < 200; round++) {
      const { frames, decoder } = collect();
      let at = 0;
      while (at < stream.length) {
        const n = 1 + Math.floor(rand() * 40);
        decoder.push(stream.subarray(at, at + n));
        at += n;
      }
      expect(frames).toEqual(bodies);
    }
  });

  it('rejects an oversized length prefix before the body arrives', () => {
    const { frames, decoder } = collect(1024);
    const header = Buffer.alloc(4);
    header.writeUInt32BE(1025);
    expect(() => decoder.push(header)).toThrowError(expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE' }));
    expect(frames).toHaveLength(0);
    // The stream position is lost: the decoder stays failed.
    expect(() => decoder.push(frame(Buffer.from('x')))).toThrow(ProtocolError);
  });

  it('applies a limit raised from inside onFrame to the next frame of the same chunk', () => {
    const frames: Buffer[] = [];
    const decoder: FrameDecoder = new FrameDecoder((b) => {
      frames.push(Buffer.from(b));
      decoder.maxFrameBytes = 1024; // e.g. after a valid hello
    }, 16);
    decoder.push(Buffer.concat([frame(Buffer.from('hello')), frame(Buffer.alloc(1000, 1))]));
    expect(frames.map((f) => f.length)).toEqual([5, 1000]);
  });

  it('checks the lower limit of a connection that has not been raised yet', () => {
    const { frames, decoder } = collect(16);
    const header = Buffer.alloc(4);
    header.writeUInt32BE(17);
    expect(() => decoder.push(header)).toThrowError(expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE' }));
    expect(frames).toHaveLength(0);
    expect(decoder.pending).toBe(0);
  });

  it('rejects a 4 GiB length prefix with the default limit', () => {
    const { decoder } = collect();
    expect(() => decoder.push(Buffer.from([0xff, 0xff, 0xff, 0xff]))).toThrowError(
      expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE' }),
    );
  });

  it('rejects a zero length', () => {
    const { decoder } = collect();
    expect(() => decoder.push(Buffer.alloc(4))).toThrowError(expect.objectContaining({ code: 'ERR_FRAME_EMPTY' }));
  });

  it('reports a stream truncated mid-frame at end()', () => {
    const { frames, decoder } = collect();
    decoder.push(stream.subarray(0, stream.length - 3));
    expect(() => decoder.end()).toThrowError(expect.objectContaining({ code: 'ERR_TRUNCATED' }));
    expect(frames).toEqual(bodies.slice(0, -1));
  });

  it('end() on a clean boundary is fine', () => {
    const { decoder } = collect();
    decoder.push(stream);
    expect(() => decoder.end()).not.toThrow();
  });
});
