// The API's contract: what each route takes and answers, as JSON Schema built with TypeBox.
// The routes declare these (fastify validates requests and serialises answers by them), the
// presenters' types are checked against them (present.ts), and docs/openapi.json is generated
// from them (openapi.ts). A schema with a `title` is a named component of that document.
//
// Answers describe what the dashboard, the CLI and the Go client read. Objects that carry
// what a guest reported, or a dump's parsed structure, are declared by their known fields and
// left open (`additionalProperties: true`): the serialiser then passes every field through
// instead of dropping the ones not listed.

import { Type, type Static, type TSchema } from 'typebox';
import { DUMP_MODES, DUMP_SOURCES } from '@vsockdiag/proto';
import {
  API_ERRORS,
  CONDITIONS,
  DUMP_TRIGGERS,
  GENERATION_CAUSES,
  LIFECYCLE_EVENT_NAMES,
  STATES,
  type GenerationCause,
} from '../catalogue.js';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
/** One of a catalogue's codes (a string enum, the form OpenAPI client generators read). */
const OneOf = <const T extends string>(values: readonly T[], description?: string) =>
  Type.Enum([...values], { type: 'string', ...(description ? { description } : {}) });
const Open = { additionalProperties: true } as const;
const Iso = (description: string) => Type.String({ format: 'date-time', description });
const Int = (min = 0) => Type.Integer({ minimum: min });

// ---- errors ----

export const ErrorBody = Type.Object(
  {
    error: Type.Object({
      code: OneOf(Object.keys(API_ERRORS) as Array<keyof typeof API_ERRORS>, 'one of the codes in docs/codes.md ("API errors")'),
      message: Type.String(),
    }),
  },
  { title: 'Error' },
);

// ---- inputs ----

/** Sandbox ids are checked by the registry (BAD_ID, with its own message); here only bounded. */
export const SandboxParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 256 }) });
export const DumpParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 256 }),
  dumpId: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }),
});

export const RegisterBody = Type.Object(
  { udsPath: Type.String({ minLength: 1, maxLength: 4096, description: "absolute path of Firecracker's vsock UDS" }) },
  { title: 'RegisterRequest', additionalProperties: false },
);

export const DumpRequest = Type.Object(
  {
    mode: Type.Optional(OneOf(DUMP_MODES, 'what to dump (default threads)')),
    destructive: Type.Optional(
      Type.Boolean({ description: 'goroutines mode: let the probe SIGQUIT the target if pprof is off (it dies)' }),
    ),
  },
  { title: 'DumpRequest', additionalProperties: false },
);

export const ListQuery = Type.Object({ state: Type.Optional(OneOf(STATES)) });

export const MAX_READINESS_WAIT_MS = 120_000;
export const ReadinessQuery = Type.Object({
  wait: Type.Optional(
    Type.Integer({ minimum: 0, maximum: MAX_READINESS_WAIT_MS, description: 'ms to wait for a settled state (ready, stuck, exited)' }),
  ),
});

export const MAX_EVENTS_LIMIT = 1000;
export const EventsQuery = Type.Object({
  after: Type.Optional(Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER })),
  before: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER })),
  order: Type.Optional(OneOf(['asc', 'desc'] as const)),
  kind: Type.Optional(Type.String({ pattern: '^[a-z.]{1,64}$', description: 'an event kind, or a prefix ending in "." ("target.")' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_EVENTS_LIMIT })),
  generation: Type.Optional(Type.Integer({ minimum: 0, maximum: 2 ** 31 })),
});

export const DiffQuery = Type.Object({
  against: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: Number.MAX_SAFE_INTEGER,
      description: 'the older dump (default: the previous one of the same mode)',
    }),
  ),
});

// ---- sandboxes ----

export const Condition = Type.Object(
  {
    name: OneOf(Object.keys(CONDITIONS) as Array<keyof typeof CONDITIONS>),
    detail: Type.String(),
    subject: Type.Optional(Type.String()),
    count: Type.Optional(Type.Number()),
  },
  { title: 'Condition' },
);

export const SandboxSummary = Type.Object(
  {
    id: Type.String(),
    state: OneOf(STATES),
    reason: Type.String(),
    since: Iso('when the state began'),
    generation: Type.Integer({ minimum: 0, description: 'the life of the VM (a boot or a restore), counted per sandbox' }),
    session: Type.Integer({ minimum: 0, description: 'the probe connection, counted per sandbox across generations' }),
    connected: Type.Boolean(),
    lastPhase: Nullable(Type.String()),
    conditions: Type.Array(Condition),
  },
  { title: 'SandboxSummary' },
);

export const SandboxList = Type.Object({ sandboxes: Type.Array(SandboxSummary) }, { title: 'SandboxList' });

export const Readiness = Type.Object(
  {
    ready: Type.Boolean(),
    state: OneOf(STATES),
    reason: Type.String(),
    generation: Int(),
    session: Int(),
  },
  { title: 'Readiness' },
);

/** A phase marker as the probe reported it (its fields are the guest's: open). */
export const PhaseRecord = Type.Object(
  {
    source: Type.Optional(Type.String()),
    name: Type.Optional(Type.String()),
    status: Type.Optional(Type.String()),
    ready: Type.Optional(Type.Boolean()),
    generation: Int(),
    tGuest: Nullable(Type.Number()),
    at: Iso('host time'),
  },
  { title: 'PhaseRecord', ...Open },
);

const RecentDump = Type.Object({
  id: Nullable(Int(1)),
  mode: OneOf(DUMP_MODES),
  trigger: OneOf(Object.keys(DUMP_TRIGGERS) as Array<keyof typeof DUMP_TRIGGERS>),
  at: Iso('when it was taken or failed'),
  complete: Type.Boolean(),
  error: Type.Optional(Type.String()),
});

/** The intake's counters: open, so one added there is not dropped here. */
const Counters = Type.Object(
  {
    sessions: Int(),
    events: Int(),
    gaps: Int(),
    protocolErrors: Int(),
    refused: Int(),
  },
  Open,
);

/** What the probe reported of itself, its target, listener, health, sockets and system:
 *  the known fields, open for the rest (proto/src/events.ts statusSchema is the full shape). */
const guestObject = (props: Parameters<typeof Type.Object>[0]) => Nullable(Type.Object(props, Open));

/** Why the current generation began (collector/lives.ts), and when. */
export const GenerationInfo = Type.Object(
  {
    generation: Int(1),
    cause: OneOf(Object.keys(GENERATION_CAUSES) as GenerationCause[]),
    detail: Type.String(),
    since: Iso('when it opened'),
    fromSeq: Type.Number({ description: 'the first probe event of this life (its seq)' }),
  },
  { title: 'GenerationInfo' },
);

export const SandboxDetail = Type.Object(
  {
    ...SandboxSummary.properties,
    udsPath: Type.String(),
    socketPath: Type.String(),
    source: OneOf(['api', 'discover'] as const),
    probe: guestObject({ instanceId: Type.String(), version: Type.String(), generation: Int(), pprof: Type.Boolean() }),
    generationInfo: Nullable(GenerationInfo),
    pausedSince: Nullable(Iso('when the orchestrator said it paused the VM (POST …/lifecycle)')),
    expectNewGeneration: Type.Boolean({
      description: 'the next probe connection opens a new generation (a lifecycle hint, a moved socket)',
    }),
    connectedAt: Nullable(Iso('when the current (or last) session opened')),
    disconnectedAt: Nullable(Iso('when the last session closed, while none is live')),
    target: guestObject({ pid: Int(1), name: Type.String(), alive: Type.Boolean(), startedAt: Nullable(Type.String()) }),
    listener: guestObject({ port: Int(), bound: Type.Boolean(), since: Nullable(Type.String()) }),
    readiness: Nullable(Type.Object({ reportsPhases: Type.Boolean(), ready: Type.Boolean(), readyAt: Nullable(Type.String()) })),
    health: guestObject({ ok: Type.Boolean(), at: Nullable(Type.String()) }),
    sockets: guestObject({ tcpInUse: Int(), timeWait: Int(), at: Nullable(Type.String()) }),
    system: guestObject({ at: Nullable(Type.String()) }),
    clockSkewMs: Nullable(Type.Number()),
    kernel: Type.Array(Type.Object({ what: Type.String(), at: Type.String() }, Open)),
    threads: Type.Array(Type.Object({ at: Type.String(), n: Int() })),
    phases: Type.Array(PhaseRecord),
    morePhases: Type.Boolean({ description: 'more phases than listed: read them as events?kind=phase' }),
    dumps: Type.Array(RecentDump),
    blocked: Nullable(Type.Object({ pid: Int(1), text: Type.String(), dumpId: Int(1) })),
    counters: Counters,
    limits: Type.Object(
      {
        throttled: Type.Record(Type.String(), Int(), { description: 'times reading was paused, by the bucket that ran dry' }),
        throttledMs: Type.Number(),
        cutoffs: Int(),
        offences: Type.Record(Type.String(), Int(), { description: 'closes the guest caused, by protocol error code' }),
        refused: Type.Record(Type.String(), Int(), { description: 'connections refused at accept, by reason' }),
        nextPenaltyMs: Type.Number(),
        penaltyUntil: Nullable(Type.Number()),
      },
      { description: "what the sandbox's budget did to its guest (budget.ts)", ...Open },
    ),
  },
  { title: 'SandboxDetail' },
);

export const Event = Type.Object(
  {
    id: Int(1),
    generation: Int(),
    session: Int(),
    seq: Nullable(Int(1)),
    kind: Type.String(),
    tGuest: Nullable(Type.Number()),
    at: Iso('host time'),
    data: Type.Unsafe<Record<string, unknown>>({
      type: 'object',
      additionalProperties: true,
      description: "the kind's fields (docs/codes.md)",
    }),
  },
  { title: 'Event' },
);

export const EventPage = Type.Object(
  {
    events: Type.Array(Event),
    next: Int(),
    more: Type.Boolean({ description: 'a page follows after `next` (a page can be short and still have one)' }),
  },
  { title: 'EventPage' },
);

// ---- dumps ----

export const DumpBrief = Type.Object(
  {
    id: Int(1),
    sandboxId: Type.String(),
    generation: Int(),
    mode: OneOf(DUMP_MODES),
    source: OneOf(DUMP_SOURCES),
    trigger: OneOf(Object.keys(DUMP_TRIGGERS) as Array<keyof typeof DUMP_TRIGGERS>),
    complete: Type.Boolean(),
    error: Nullable(Type.String()),
    note: Nullable(Type.String()),
    pid: Nullable(Int(1)),
    pausedMs: Nullable(Type.Number({ description: 'how long the target was stopped (0: read while it ran)' })),
    bytes: Int(),
    createdMs: Int(),
    createdAt: Iso('when it was stored'),
    kind: OneOf(['goroutines', 'threads', 'unknown'] as const),
    top: Nullable(Type.Object({ blockedIn: Type.String(), count: Int() })),
  },
  { title: 'DumpBrief' },
);

export const DumpList = Type.Object({ dumps: Type.Array(DumpBrief) }, { title: 'DumpList' });

/** One dump: its text and, flattened in, the parsed groups (goroutineGroups, creatorGroups or threads). */
export const DumpDetail = Type.Object(
  {
    ...DumpBrief.properties,
    text: Type.String(),
    goroutines: Type.Optional(Int()),
    goroutineGroups: Type.Optional(Type.Array(Type.Object({ count: Int(), state: Type.String() }, Open))),
    creatorGroups: Type.Optional(Type.Array(Type.Object({}, Open))),
    threads: Type.Optional(Type.Object({}, Open)),
  },
  { title: 'DumpDetail', ...Open },
);

export const DumpDiff = Type.Object({ older: Int(1), newer: Int(1) }, { title: 'DumpDiff', ...Open });

// ---- the rest ----

export const PhaseStats = Type.Object(
  {
    name: Type.String(),
    count: Int(),
    p50Ms: Type.Number(),
    p90Ms: Type.Number(),
    maxMs: Type.Number(),
    samplesMs: Type.Array(Type.Number()),
  },
  { title: 'PhaseStats' },
);
export const PhaseList = Type.Object({ phases: Type.Array(PhaseStats) }, { title: 'PhaseList' });

export const LifecycleBody = Type.Object({ event: OneOf(LIFECYCLE_EVENT_NAMES) }, { additionalProperties: false });
export const LifecycleAnswer = Type.Object(
  {
    id: Type.String(),
    event: OneOf(LIFECYCLE_EVENT_NAMES),
    state: OneOf(STATES),
    generation: Int(),
    session: Int(),
    pausedSince: Nullable(Iso('when the VM was paused')),
    expectNewGeneration: Type.Boolean({ description: 'the next probe connection opens a new generation' }),
  },
  { title: 'LifecycleAnswer' },
);

export const UnregisterQuery = Type.Object({
  capture: Type.Optional(OneOf(['0', '1'] as const, '1: take a final dump (goroutines if Go, else threads) before unregistering')),
});
export const UnregisterAnswer = Type.Object(
  {
    id: Type.String(),
    dump: Nullable(DumpDetail),
    captureError: Nullable(Type.String({ description: 'why no final dump could be taken' })),
  },
  { title: 'UnregisterAnswer' },
);

export const Health = Type.Object({ ok: Type.Literal(true), sandboxes: Int() }, { title: 'Health' });

export const StreamTicket = Type.Object(
  { ticket: Type.String(), expiresInMs: Int() },
  { title: 'StreamTicket', description: 'single-use: GET /v1/stream?ticket=… (WebSocket) within expiresInMs' },
);

/** A text answer (a dump's raw bytes, /metrics): sent as it is, never serialised. */
export const Text = Type.Unsafe<string | Buffer>({ type: 'string', description: 'plain text' });
/** A 204: no body. */
export const NoContent = Type.Unsafe<undefined>({ type: 'null', description: 'no content' });

export type SandboxSummaryJson = Static<typeof SandboxSummary>;
export type SandboxDetailJson = Static<typeof SandboxDetail>;
export type EventJson = Static<typeof Event>;
export type DumpBriefJson = Static<typeof DumpBrief>;
export type DumpDetailJson = Static<typeof DumpDetail>;
export type PhaseStatsJson = Static<typeof PhaseStats>;

/** Every route may answer an error (its status and code in docs/codes.md). */
export const ERRORS = { '4xx': ErrorBody, '5xx': ErrorBody } as const;
