// The messages on a probe ↔ collector link. One schema per type is both the runtime
// validation and the TypeScript type. Direction is part of the type: each side decodes
// only what the other may send.
//
//   probe → collector: hello (first, once), events, gap, result, heartbeat
//   collector → probe: welcome (answer to hello), ack, command, heartbeat

import * as s from './schema.js';
import { eventSchema, statusSchema } from './events.js';
import { DUMP_CHUNK_BYTES, MAX_DUMP_BYTES, MAX_EVENTS_PER_BATCH, MAX_NAME, MAX_TEXT } from './limits.js';
import { DUMP_MODES, DUMP_SOURCES } from './codes.js';

export const COMMAND_OPS = ['status', 'dump'] as const;

const ms = s.number({ min: 0, max: 1e13 });
const seq = s.int({ min: 0 });

// Each side's schemas are made when it first decodes (schema.ts lazy): the probe never
// parses what it sends, and its start-up, up to its hello, parses nothing.
const helloSchema = () =>
  s.object({
    protocol: s.int({ min: 1, max: 0xffff }),
    probeVersion: s.string({ max: 64 }),
    /** Random per probe process. Clones restored from one snapshot share it, which is why
     *  the collector never uses it as identity: the socket a connection arrived on is. */
    instanceId: s.string({ min: 8, max: 64 }),
    /** How many sessions this probe process has opened, this one included. */
    generation: s.int({ min: 1 }),
    bootId: s.string({ max: 64 }),
    clocks: s.object({ wallMs: ms, sinceBootMs: ms }),
    /** Highest sequence number the probe has assigned so far (0 = none). */
    lastSeq: seq,
    /** The ring's lastSeq when this probe process's previous session was lost (absent in its
     *  first session): after a restore, events up to it were made before the transport reset,
     *  in the VM's previous life, and the collector files them there. */
    lostAtSeq: s.optional(seq),
    config: s.object({
      target: s.string({ max: MAX_NAME }),
      expectPort: s.int({ min: 0, max: 65535 }),
      /** The probe can take a harmless goroutine dump (it has a pprof URL). */
      pprof: s.optional(s.boolean()),
    }),
    status: statusSchema,
  });

const probeMessages = () => ({
  hello: helloSchema(),
  events: s.object({
    events: s.array(eventSchema, { max: MAX_EVENTS_PER_BATCH }),
    /** The guest's clock (ms since boot) as the batch was written: like a heartbeat's, a sample
     *  of how the guest's clock maps to the host's, so a booting guest that sends only batches
     *  still gives one a tick. Optional: without it, only hellos and heartbeats sample the clock. */
    sentAt: s.optional(ms),
    /** Ack this batch at once: the probe is waiting for it (its exit flush). Otherwise the
     *  collector acks with its next liveness tick, at most HEARTBEAT_INTERVAL_MS later. */
    ackNow: s.optional(s.boolean()),
  }),
  /** Events from..to (inclusive) fell out of the probe's ring before they were acked. */
  gap: s.object({ from: s.int({ min: 1 }), to: s.int({ min: 1 }) }),
  /** One piece of a dump being answered to command `id`, in order from index 0. */
  'dump.chunk': s.object({ id: s.int({ min: 1 }), index: s.int({ min: 0 }), data: s.bytes({ max: DUMP_CHUNK_BYTES }) }),
  result: s.object({
    id: s.int({ min: 1 }),
    ok: s.boolean(),
    error: s.optional(s.string({ max: MAX_TEXT })),
    status: s.optional(statusSchema),
    /** For a dump: what was sent in the chunks before this result. */
    dump: s.optional(
      s.object({
        mode: s.oneOf(DUMP_MODES),
        source: s.oneOf(DUMP_SOURCES),
        complete: s.boolean(),
        bytes: s.int({ min: 0, max: MAX_DUMP_BYTES }),
        chunks: s.int({ min: 0 }),
        /** The target the dump is of. */
        pid: s.optional(s.int({ min: 1 })),
        note: s.optional(s.string({ max: MAX_TEXT })),
        /** How long the target was stopped for the dump (0: it was read running). */
        pausedMs: s.optional(s.number({ min: 0, max: 3_600_000 })),
      }),
    ),
  }),
  heartbeat: s.object({ sinceBootMs: ms }),
});

const collectorMessages = () => ({
  /** Answer to hello: the probe resends every event after `ack`. */
  welcome: s.object({ ack: seq, hostWallMs: ms }),
  /** Everything up to and including `seq` is durable on the host. Deferred to the sender's
   *  next liveness tick unless the batch asked for it now: one ack covers every batch
   *  committed meanwhile, and stands in for that tick's heartbeat. */
  ack: s.object({ seq }),
  command: s.object({
    id: s.int({ min: 1 }),
    op: s.oneOf(COMMAND_OPS),
    mode: s.optional(s.oneOf(DUMP_MODES)),
    destructive: s.optional(s.boolean()),
  }),
  heartbeat: s.object({}),
});

export const probeMessageSchema = s.lazy(() => s.variant('type', probeMessages(), 'ERR_UNKNOWN_TYPE'));
export const collectorMessageSchema = s.lazy(() => s.variant('type', collectorMessages(), 'ERR_UNKNOWN_TYPE'));

export type ProbeMessage = s.Infer<typeof probeMessageSchema>;
export type CollectorMessage = s.Infer<typeof collectorMessageSchema>;
export type Hello = Extract<ProbeMessage, { type: 'hello' }>;
export type ProbeMessageOf<T extends ProbeMessage['type']> = Extract<ProbeMessage, { type: T }>;
export type CollectorMessageOf<T extends CollectorMessage['type']> = Extract<CollectorMessage, { type: T }>;
