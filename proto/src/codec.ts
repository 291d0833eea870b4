// Messages ⇄ frames. msgpack bodies, decoded with hard limits, then validated against the
// schema of what the *other* side may send.

import { Decoder, Encoder } from '@msgpack/msgpack';
import { ProtocolError } from './errors.js';
import { frame } from './frame.js';
import {
  DUMP_CHUNK_BYTES,
  FRAME_HEADER_BYTES,
  MAX_EVENTS_PER_BATCH,
  MAX_FIELDS,
  MAX_LOG_LINES_PER_BATCH,
  MAX_NESTING_DEPTH,
  MAX_TEXT,
} from './limits.js';
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
  if (message.type === 'heartbeat') return heartbeatFrame(message);
  // encodeSharedRef avoids a copy: frame() copies the bytes into the framed buffer.
  return frame(encoder.encodeSharedRef(message));
}

// Heartbeats, in bytes made here. A settled probe and its collector exchange little else (one
// each way a second), and the probe runs its code in V8's interpreter (guest-probe/src/
// v8-flags.ts), where msgpack's general encoder and decoder took 0.16–0.24 ms a message: a
// sixth of a quiet second's work (test/bench/FINDINGS.md). The bytes are the msgpack a general
// encoder writes (the number always as a float 64), and a heartbeat decoded here still goes
// through the schema.
const FLOAT64 = 0xcb;
let heartbeats: { collector: Uint8Array; collectorFrame: Buffer; probeHead: Uint8Array } | undefined;

/** Made on first use, not on the probe's way to its hello. */
function heartbeatBytes(): NonNullable<typeof heartbeats> {
  if (heartbeats) return heartbeats;
  const collector = encoder.encode({ type: 'heartbeat' });
  // {type: 'heartbeat', sinceBootMs: <float 64>} up to the number.
  const probe = encoder.encode({ type: 'heartbeat', sinceBootMs: 0.5 });
  heartbeats = { collector, collectorFrame: frame(collector), probeHead: probe.slice(0, probe.length - 9) };
  return heartbeats;
}

function heartbeatFrame(m: { type: 'heartbeat'; sinceBootMs?: number }): Buffer {
  const { collectorFrame, probeHead } = heartbeatBytes();
  if (m.sinceBootMs === undefined) return collectorFrame;
  const bytes = probeHead.length + 9;
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + bytes);
  out.writeUInt32BE(bytes, 0);
  out.set(probeHead, FRAME_HEADER_BYTES);
  out[FRAME_HEADER_BYTES + probeHead.length] = FLOAT64;
  out.writeDoubleBE(m.sinceBootMs, FRAME_HEADER_BYTES + probeHead.length + 1);
  return out;
}

function sameBytes(a: Uint8Array, b: Uint8Array, length: number): boolean {
  for (let i = 0; i < length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A heartbeat in the bytes above, as the object msgpack would decode it to; else null. */
function heartbeatIn(body: Uint8Array): { type: 'heartbeat'; sinceBootMs?: number } | null {
  const { collector, probeHead } = heartbeatBytes();
  if (body.length === collector.length && sameBytes(body, collector, body.length)) return { type: 'heartbeat' };
  const head = probeHead.length;
  if (body.length !== head + 9 || body[head] !== FLOAT64 || !sameBytes(body, probeHead, head)) return null;
  const view = new DataView(body.buffer, body.byteOffset, body.length);
  return { type: 'heartbeat', sinceBootMs: view.getFloat64(head + 1) };
}

function decodeWith<T>(schema: Schema<T>, body: Uint8Array): T {
  const heartbeat = heartbeatIn(body);
  if (heartbeat) return schema.parse(heartbeat);
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
