// Messages ⇄ frames. msgpack bodies, decoded with hard limits, then validated against the
// schema of what the *other* side may send.

import { Decoder, Encoder } from '@msgpack/msgpack';
import { ProtocolError } from './errors.js';
import { frame } from './frame.js';
import { MAX_FRAME_BYTES, MAX_NESTING_DEPTH } from './limits.js';
import { collectorMessageSchema, probeMessageSchema, type CollectorMessage, type ProbeMessage } from './messages.js';
import { withinDepth } from './msgpack-depth.js';
import type { Schema } from './schema.js';

const encoder = new Encoder({ ignoreUndefined: true });

const decoder = new Decoder({
  maxStrLength: MAX_FRAME_BYTES,
  maxBinLength: MAX_FRAME_BYTES,
  maxArrayLength: 65_536,
  maxMapLength: 4_096,
  maxExtLength: 0,
});

export function encodeMessage(message: ProbeMessage | CollectorMessage): Buffer {
  // encodeSharedRef avoids a copy: frame() copies the bytes into the framed buffer.
  return frame(encoder.encodeSharedRef(message));
}

function decodeWith<T>(schema: Schema<T>, body: Uint8Array): T {
  // The decoder has no depth limit of its own (see msgpack-depth.ts).
  if (!withinDepth(body, MAX_NESTING_DEPTH)) throw new ProtocolError('ERR_MSGPACK', `nested deeper than ${MAX_NESTING_DEPTH}`);
  let value: unknown;
  try {
    value = decoder.decode(body);
  } catch (err) {
    throw new ProtocolError('ERR_MSGPACK', `bad msgpack: ${(err as Error).message.slice(0, 200)}`);
  }
  return schema.parse(value);
}

/** For the collector: decode what a probe sent. */
export const decodeProbeMessage = (body: Uint8Array): ProbeMessage => decodeWith(probeMessageSchema, body);
/** For the probe: decode what a collector sent. */
export const decodeCollectorMessage = (body: Uint8Array): CollectorMessage => decodeWith(collectorMessageSchema, body);
