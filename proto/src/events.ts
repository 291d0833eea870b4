// What the probe observes, as numbered events. Times (`t`, `startedAt`, `since`) are
// milliseconds since the guest booted, so an operator reads "bound at 1.234 s" and the
// host can place events on its own clock (see host-collector clock mapping).

import * as s from './schema.js';
import { MAX_FIELDS, MAX_FIELD_KEY, MAX_NAME, MAX_TEXT } from './limits.js';

const pid = s.int({ min: 1, max: 0x3fffffff });
const port = s.int({ min: 0, max: 65535 });
const ms = s.number({ min: 0, max: 1e13 });
const name = s.string({ max: MAX_NAME });
const text = s.string({ max: MAX_TEXT });

/** How the probe found its target. */
export const TARGET_SOURCES = ['name', 'pidfile', 'child'] as const;

const envelopeShape = { seq: s.int({ min: 1 }), t: ms };

// Each kind's own fields; every event also carries `seq` and `t` (envelopeShape).
const eventShapes = {
  /** The target process appeared (found by name or pid file, or spawned in wrap mode). */
  'target.found': {
    pid,
    name,
    startedAt: ms,
    source: s.oneOf(TARGET_SOURCES),
    cmdline: s.optional(text),
  },
  /** Process facts, sent when they change and every few seconds. */
  'target.sample': {
    pid,
    state: s.string({ max: 1 }),
    threads: s.int({ min: 0 }),
    rssKb: s.int({ min: 0 }),
    fds: s.nullable(s.int({ min: 0 })),
    cpuMs: s.int({ min: 0 }),
  },
  /** The target is gone. Exit code or signal when the probe could learn it (its own child,
   *  or a zombie caught before reaping); both absent when it could not. */
  'target.exit': {
    pid,
    exitCode: s.optional(s.int({ min: 0, max: 255 })),
    signal: s.optional(s.string({ max: 16 })),
  },
  /** The expected port got a LISTEN socket. */
  'listener.bound': {
    port,
    address: s.string({ max: 64 }),
    inode: s.int({ min: 0 }),
    pid: s.nullable(pid),
    acceptQueue: s.optional(s.int({ min: 0 })),
  },
  /** The expected port's LISTEN socket went away. */
  'listener.unbound': { port },
  /** A phase marker (sd_notify datagram, or a log line in wrap mode). */
  phase: {
    name: s.optional(name),
    status: s.optional(text),
    ready: s.optional(s.boolean()),
    stopping: s.optional(s.boolean()),
    pid: s.optional(pid),
    fields: s.optional(s.record(text, { maxKeys: MAX_FIELDS, maxKeyLength: MAX_FIELD_KEY })),
  },
  /** Something about the probe itself worth keeping (a rejected datagram, a fallback). */
  'probe.notice': {
    level: s.oneOf(['info', 'warn'] as const),
    message: text,
  },
};

type Shapes = typeof eventShapes;
export type EventKind = keyof Shapes;
export const EVENT_KINDS = Object.keys(eventShapes) as EventKind[];

const eventSchemas = Object.fromEntries(
  Object.entries(eventShapes).map(([kind, shape]) => [kind, s.object({ ...envelopeShape, ...shape })]),
) as { [K in EventKind]: s.Schema<s.ObjectOf<Shapes[K] & typeof envelopeShape>> };

export const eventSchema = s.variant('kind', eventSchemas, 'ERR_UNKNOWN_KIND');
export type ProbeEvent = s.Infer<typeof eventSchema>;
export type EventOf<K extends EventKind> = Extract<ProbeEvent, { kind: K }>;
/** An event before the probe's ring numbers and stamps it. */
export type EventBody = { [K in EventKind]: Omit<EventOf<K>, 'seq' | 't'> }[EventKind];

/** The probe's current view, sent whole in every hello so a restarted collector rebuilds
 *  its picture at once instead of replaying history. Events then carry the changes. */
export const statusSchema = s.object({
  target: s.nullable(
    s.object({
      pid,
      name,
      startedAt: ms,
      source: s.oneOf(TARGET_SOURCES),
      alive: s.boolean(),
      exitCode: s.optional(s.int({ min: 0, max: 255 })),
      signal: s.optional(s.string({ max: 16 })),
      threads: s.optional(s.int({ min: 0 })),
      rssKb: s.optional(s.int({ min: 0 })),
    }),
  ),
  listener: s.object({
    port,
    bound: s.boolean(),
    since: s.optional(ms),
    address: s.optional(s.string({ max: 64 })),
    pid: s.optional(pid),
  }),
  /** How the probe itself is observing (so a degraded probe says so). */
  probe: s.optional(
    s.object({
      /** 'sock_diag' (netlink, cheap) or 'proc' (/proc/net/tcp, the fallback). */
      listenerSource: s.oneOf(['sock_diag', 'proc'] as const),
      fallbackReason: s.optional(s.string({ max: MAX_TEXT })),
    }),
  ),
  phases: s.object({
    /** The target has sent at least one phase marker, so readiness also needs READY=1. */
    reported: s.boolean(),
    last: s.optional(s.object({ name: s.optional(name), status: s.optional(text), t: ms })),
    ready: s.boolean(),
    readyAt: s.optional(ms),
  }),
});
export type ProbeStatus = s.Infer<typeof statusSchema>;
