// Length-prefixed frames: a 4-byte big-endian body length, then the body. The length is
// checked against the limit before a single body byte is buffered, so a hostile peer
// cannot make us allocate more than one limit's worth per connection. The limit can change
// between frames: a receiver starts a connection at MAX_HELLO_FRAME_BYTES and raises it
// once the peer's hello is accepted.

import { ProtocolError } from './errors.js';
import { FRAME_HEADER_BYTES, MAX_FRAME_BYTES } from './limits.js';

export function frame(body: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + body.length);
  out.writeUInt32BE(body.length, 0);
  out.set(body, FRAME_HEADER_BYTES);
  return out;
}

/**
 * Reassembles frames from a byte stream split or merged at any boundary. `push` hands
 * every complete body to `onFrame` (in order) and throws a ProtocolError on a bad length
 * prefix; after a throw the decoder is unusable, as the stream position is lost.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private bodyLength = -1;
  private failed: ProtocolError | null = null;

  /** Largest body accepted from the next length prefix on. Raising it from inside `onFrame`
   *  applies to the very next frame, even one already in the same chunk. */
  maxFrameBytes: number;

  constructor(
    private readonly onFrame: (body: Buffer) => void,
    maxFrameBytes = MAX_FRAME_BYTES,
  ) {
    this.maxFrameBytes = maxFrameBytes;
  }

  /** Bytes held that do not yet form a whole frame. */
  get pending(): number {
    return this.buffered;
  }

  push(chunk: Buffer): void {
    if (this.failed) throw this.failed;
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    try {
      for (;;) {
        if (this.bodyLength < 0) {
          if (this.buffered < FRAME_HEADER_BYTES) return;
          const length = this.take(FRAME_HEADER_BYTES).readUInt32BE(0);
          if (length === 0) throw new ProtocolError('ERR_FRAME_EMPTY', 'frame length 0');
          if (length > this.maxFrameBytes) {
            throw new ProtocolError('ERR_FRAME_TOO_LARGE', `frame length ${length} exceeds ${this.maxFrameBytes}`);
          }
          this.bodyLength = length;
        }
        if (this.buffered < this.bodyLength) return;
        const body = this.take(this.bodyLength);
        this.bodyLength = -1;
        this.onFrame(body);
      }
    } catch (err) {
      if (err instanceof ProtocolError) this.failed = err;
      throw err;
    }
  }

  /** Call at end of stream: leftover bytes mean the peer stopped mid-frame. */
  end(): void {
    if (this.failed) return;
    if (this.buffered > 0) {
      this.failed = new ProtocolError('ERR_TRUNCATED', `stream ended with ${this.buffered} bytes of an unfinished frame`);
      throw this.failed;
    }
  }

  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0]!;
    if (first.length === n) {
      this.chunks.shift();
      return first;
    }
    if (first.length > n) {
      this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    // The body spans chunks; a peer that writes a byte at a time makes many. They are copied
    // in one pass and dropped in one splice: shifting them one by one would cost the square
    // of their number (a 1 MiB frame in 1-byte chunks: 10^12 element moves).
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    let used = 0;
    while (filled < n) {
      const c = this.chunks[used]!;
      const want = n - filled;
      if (c.length <= want) {
        out.set(c, filled);
        filled += c.length;
        used++;
      } else {
        out.set(c.subarray(0, want), filled);
        this.chunks[used] = c.subarray(want);
        filled += want;
      }
    }
    this.chunks.splice(0, used);
    return out;
  }
}
