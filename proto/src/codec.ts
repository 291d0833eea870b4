// Messages ⇄ frames. msgpack bodies, decoded with hard limits, then validated against the
// schema of what the *other* side may send.

import { Decoder, Encoder } from '@msgpack/msgpack';
import { ProtocolError } from './errors.js';
import { frame } from './frame.js';
import { DUMP_CHUNK_BYTES, MAX_EVENTS_PER_BATCH, MAX_FIELDS, MAX_LOG_LINES_PER_BATCH, MAX_NESTING_DEPTH, MAX_TEXT } from './limits.js';
import { collectorMessageSchema, probeMessageSchema, type CollectorMessage, type ProbeMessage } from './messages.js';
import { withinDepth } from './msgpack-depth.js';
import type { Schema } from './schema.js';

const encoder = new Encoder({ ignoreUndefined: true });

// The decoder refuses, before building it, anything no schema could accept: the longest
// string a schema allows is MAX_TEXT UTF-16 units (3 UTF-8 bytes each at most), the largest
// binary a dump chunk, the longest array a batch, the largest map MAX_FIELDS keys (objects
// have fewer), and no extension types at all. The schema then checks the exact bounds.
const decoder = new Decoder({
  maxStrLength: 3 * MAX_TEXT,
  maxBinLength: DUMP_CHUNK_BYTES,
  maxArrayLength: Math.max(MAX_EVENTS_PER_BATCH, MAX_LOG_LINES_PER_BATCH),
  maxMapLength: MAX_FIELDS,
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
