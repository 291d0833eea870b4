// What the probe observes, as numbered events. Times (`t`, `startedAt`, `since`) are
// milliseconds since the guest booted, so an operator reads "bound at 1.234 s" and the
// host can place events on its own clock (see host-collector clock mapping).

import * as s from './schema.js';
import { MAX_FIELDS, MAX_FIELD_KEY, MAX_LOG_LINE, MAX_LOG_LINES_PER_BATCH, MAX_NAME, MAX_TEXT } from './limits.js';

const pid = s.int({ min: 1, max: 0x3fffffff });
const port = s.int({ min: 0, max: 65535 });
const ms = s.number({ min: 0, max: 1e13 });
const name = s.string({ max: MAX_NAME });
const text = s.string({ max: MAX_TEXT });

/** How the probe found its target. */
export const TARGET_SOURCES = ['name', 'pidfile', 'child'] as const;
/** Where a phase marker came from: the notify socket, or a log line matching the phase pattern. */
export const PHASE_SOURCES = ['notify', 'log'] as const;
/** Kernel messages worth an operator's attention. */
export const KERNEL_KINDS = ['oom', 'hung-task', 'segfault'] as const;

const remoteCount = s.object({ address: s.string({ max: 64 }), port, count: s.int({ min: 0 }) });

/** Outcome of one in-guest HTTP health check. */
const healthShape = {
  ok: s.boolean(),
  /** HTTP status, when an answer came. */
  status: s.optional(s.int({ min: 100, max: 599 })),
  latencyMs: s.number({ min: 0, max: 1e7 }),
  error: s.optional(s.string({ max: 256 })),
};

/** Socket totals and the last census. */
const socketsShape = {
  /** Totals from /proc/net/sockstat (cheap, every tick). */
  tcpInUse: s.int({ min: 0 }),
  timeWait: s.int({ min: 0 }),
  /** From the last census (sock_diag): counts by TCP state and the busiest remote endpoints. */
  byState: s.optional(s.record(s.int({ min: 0 }), { maxKeys: 16, maxKeyLength: 16 })),
  top: s.optional(s.array(remoteCount, { max: 20 })),
  remotesDistinct: s.optional(s.int({ min: 0 })),
  /** Guest time of that census. */
  censusAt: s.optional(ms),
};

/** Facts about the guest as a whole. */
const systemShape = {
  uptimeMs: ms,
  load: s.array(s.number({ min: 0, max: 1e6 }), { max: 3 }),
  memTotalKb: s.int({ min: 0 }),
  memAvailableKb: s.int({ min: 0 }),
  bootId: s.string({ max: 64 }),
  /** The guest's wall clock when sampled; the collector compares it with its own. */
  wallMs: ms,
};

const envelopeShape = { seq: s.int({ min: 1 }), t: ms };

// Each kind's own fields; every event also carries `seq` and `t` (envelopeShape). Made on first
// use (see eventSchema).
const eventShapes = () => ({
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
  /** The bound listener's accept queue changed: connections the kernel completed that the
   *  target has not accept()ed yet. A queue that never drains means "not accepting". */
  'listener.queue': { port, acceptQueue: s.int({ min: 0 }), backlog: s.optional(s.int({ min: 0 })) },
  /** An in-guest HTTP health check (--health-url) changed outcome (or every minute). */
  health: { url: s.string({ max: 256 }), ...healthShape },
  /** Socket totals (when they moved) and, now and then, a census by state and remote. */
  sockets: socketsShape,
  /** Uptime, load, memory, boot id and the guest's wall clock, every few seconds. */
  system: systemShape,
  /** A kernel message worth seeing (from /dev/kmsg). */
  kernel: {
    what: s.oneOf(KERNEL_KINDS),
    /** The process the message names, when it names one. */
    process: s.optional(name),
    pid: s.optional(pid),
    message: text,
    /** Kernel timestamp, ms since boot. */
    kernelMs: s.optional(ms),
  },
  /** Output of the target (wrap mode) or of a followed log, a batch at a time. Bounded: lines
   *  are cut to MAX_LOG_LINE and at most MAX_LOG_LINES_PER_BATCH go per batch; `dropped`
   *  counts what did not fit. */
  'log.lines': {
    stream: s.oneOf(['stdout', 'stderr', 'file', 'journal'] as const),
    lines: s.array(s.string({ max: MAX_LOG_LINE }), { max: MAX_LOG_LINES_PER_BATCH }),
    dropped: s.optional(s.int({ min: 0 })),
  },
  /** The whole status, now and then: deltas are the other events; this is the keyframe a
   *  collector can resynchronise from. */
  keyframe: { status: s.lazy(() => statusSchema) },
  /** A phase marker (sd_notify datagram, or a log line in wrap mode). */
  phase: {
    source: s.optional(s.oneOf(PHASE_SOURCES)),
    name: s.optional(name),
    status: s.optional(text),
    ready: s.optional(s.boolean()),
    stopping: s.optional(s.boolean()),
    pid: s.optional(pid),
    fields: s.optional(s.record(text, { maxKeys: MAX_FIELDS, maxKeyLength: MAX_FIELD_KEY })),
  },
  /** The guest kernel's vmgenid driver announced a new VM generation id (a KOBJ_CHANGE
   *  uevent with NEW_VMGENID=1, sent when Firecracker restores a snapshot): the events from
   *  this one on belong to a new life of the VM. `devpath` is the uevent's DEVPATH. */
  'vm.genid': { devpath: s.optional(s.string({ max: MAX_NAME })) },
  /** Something about the probe itself worth keeping (a rejected datagram, a fallback). */
  'probe.notice': {
    level: s.oneOf(['info', 'warn'] as const),
    message: text,
  },
});

type Shapes = ReturnType<typeof eventShapes>;
export type EventKind = keyof Shapes;

const eventSchemas = () =>
  Object.fromEntries(Object.entries(eventShapes()).map(([kind, shape]) => [kind, s.object({ ...envelopeShape, ...shape })])) as {
    [K in EventKind]: s.Schema<s.ObjectOf<Shapes[K] & typeof envelopeShape>>;
  };

// Built on first use: the probe's start-up, up to its hello, parses no event, and building
// these forty object schemas was a third of a millisecond of it.
export const eventSchema = s.lazy(() => s.variant('kind', eventSchemas(), 'ERR_UNKNOWN_KIND'));
export type ProbeEvent = s.Infer<typeof eventSchema>;
export type EventOf<K extends EventKind> = Extract<ProbeEvent, { kind: K }>;
/** An event before the probe's ring numbers and stamps it. */
export type EventBody = { [K in EventKind]: Omit<EventOf<K>, 'seq' | 't'> }[EventKind];

/** The probe's current view, sent whole in every hello so a restarted collector rebuilds
 *  its picture at once instead of replaying history. Events then carry the changes. */
export const statusSchema = s.lazy(() =>
  s.object({
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
      acceptQueue: s.optional(s.int({ min: 0 })),
      /** Guest time since when the accept queue has been above zero without draining. */
      queuedSince: s.optional(ms),
    }),
    health: s.optional(s.object({ url: s.string({ max: 256 }), t: ms, ...healthShape })),
    sockets: s.optional(s.object({ t: ms, ...socketsShape })),
    system: s.optional(s.object({ t: ms, ...systemShape })),
    /** How the probe itself is observing (so a degraded probe says so). */
    probe: s.optional(
      s.object({
        /** 'sock_diag' (netlink, cheap) or 'proc' (/proc/net/tcp, the fallback). */
        listenerSource: s.oneOf(['sock_diag', 'proc'] as const),
        fallbackReason: s.optional(s.string({ max: MAX_TEXT })),
      }),
    ),
    phases: s.object({
      /** The target has sent a phase marker over the notify socket, so readiness also needs READY=1. */
      reported: s.boolean(),
      last: s.optional(s.object({ name: s.optional(name), status: s.optional(text), t: ms })),
      ready: s.boolean(),
      readyAt: s.optional(ms),
    }),
  }),
);
export type ProbeStatus = s.Infer<typeof statusSchema>;
