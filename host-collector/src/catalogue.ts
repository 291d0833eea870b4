// The collector's codes, each defined once with its meaning: the API's error codes, the
// sandbox states, the conditions, the kinds of event the collector itself writes into a
// sandbox's history, and the internal codes its errors carry. They live here, not in proto/,
// because the guest never sees them: they are the vocabulary of the collector's API, which
// its CLI and the dashboard speak. The codes both sides share (protocol close codes, dump
// modes and sources) are in proto/src/codes.ts.
//
// This module imports nothing, so the dashboard may bundle it (see the trust boundary test),
// and docs/codes.md lists every entry: host-collector/test/catalogue-docs.test.ts fails when
// the two differ.

/** `U`, checked to be a part of `T` (where Extract would drop a misspelt member silently). */
type Subset<T, U extends T> = U;

// ---- API errors ----

/** Every API error is `{"error": {"code", "message"}}` with one of these codes and its status. */
export const API_ERRORS = {
  BAD_REQUEST: {
    status: 400,
    meaning: "a parameter, query or body that does not match the route's schema (docs/openapi.json), or a body that is not JSON",
  },
  BAD_ID: { status: 400, meaning: 'a sandbox id that is not 1–128 letters, digits, `.`, `_` or `-`, starting with a letter or digit' },
  BAD_PATH: {
    status: 400,
    meaning: 'a `udsPath` that is not absolute and normalised, is over 100 bytes, or leads outside every `--uds-root`',
  },
  UNAUTHORIZED: { status: 401, meaning: 'the collector has a token and the request does not carry it (`Authorization: Bearer …`)' },
  FORBIDDEN: { status: 403, meaning: 'a Host name that is not loopback on a loopback collector, or a cross-site write or stream upgrade' },
  NOT_FOUND: { status: 404, meaning: 'no such sandbox, dump or route' },
  METHOD_NOT_ALLOWED: { status: 405, meaning: 'the path exists, not with this method (the `Allow` header lists those it has)' },
  PATH_IN_USE: { status: 409, meaning: 'the `udsPath` belongs to another sandbox' },
  STALE_GENERATION: {
    status: 409,
    meaning: 'a dump answer came from another generation of the sandbox (a restore or reconnect in between), even after one retry',
  },
  PAYLOAD_TOO_LARGE: { status: 413, meaning: 'a request body over 64 KiB' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, meaning: 'a request body that is not `application/json`' },
  UPGRADE_REQUIRED: { status: 426, meaning: '`/v1/stream` asked for without a WebSocket upgrade' },
  LISTEN_FAILED: { status: 422, meaning: 'the collector cannot listen on `<udsPath>_<vsock-port>`' },
  DUMP_FAILED: { status: 422, meaning: 'the probe answered that it could not take the dump (no target, a mode it cannot do)' },
  INTERNAL: { status: 500, meaning: 'the collector failed; its log says why' },
  PROBE_UNREACHABLE: { status: 503, meaning: "neither the probe's session nor its command port answered" },
  DUMP_TIMEOUT: { status: 504, meaning: "the probe did not answer within the dump mode's time limit" },
  ANALYSIS_FAILED: { status: 503, meaning: 'the dump worker could not take the request (it failed, or too many were waiting)' },
  ANALYSIS_TIMEOUT: { status: 504, meaning: 'the dump worker gave the request up at its time limit (`--dump-analysis-limit`)' },
} as const satisfies Record<string, { status: number; meaning: string }>;

export type ApiErrorCode = keyof typeof API_ERRORS;

/** What a registration fails with (collector/registry.ts): API codes, answered as they are. */
export type RegistryErrorCode = Subset<ApiErrorCode, 'BAD_ID' | 'BAD_PATH' | 'PATH_IN_USE' | 'LISTEN_FAILED'>;
/** What a dump fails with (collector/dump-service.ts): API codes, answered as they are. */
export type DumpErrorCode = Subset<ApiErrorCode, 'BAD_REQUEST' | 'PROBE_UNREACHABLE' | 'STALE_GENERATION' | 'DUMP_FAILED' | 'DUMP_TIMEOUT'>;
/** What the dump worker fails with (collector/dump-analyzer.ts): API codes, answered as they are. */
export type AnalysisErrorCode = Subset<ApiErrorCode, 'ANALYSIS_FAILED' | 'ANALYSIS_TIMEOUT'>;

/** Why a command to a probe got no answer (collector/requests.ts). Internal: a dump turns
 *  them into its API codes. */
export const REQUEST_ERRORS = {
  TIMEOUT: { meaning: 'the probe did not answer within the time limit' },
  CLOSED: { meaning: 'the connection the command went over closed before the answer' },
  UNREACHABLE: { meaning: "the probe's command port could not be reached through Firecracker" },
} as const satisfies Record<string, { meaning: string }>;

export type RequestErrorCode = keyof typeof REQUEST_ERRORS;

// ---- sandbox states ----

/** `trouble` orders the states worst first, as the dashboard lists the fleet. */
export const SANDBOX_STATES = {
  registered: { trouble: 5, meaning: "the collector listens on the sandbox's socket; no probe has connected yet" },
  booting: { trouble: 4, meaning: 'the probe is connected; the target (envd) has not been seen' },
  starting: { trouble: 3, meaning: 'the target is alive, not ready yet, and still making progress' },
  ready: { trouble: 6, meaning: 'the target listens on the expected port (and sent `READY=1`, if it reports phases)' },
  stuck: {
    trouble: 0,
    meaning:
      'the target is alive but not ready: no new phase for `--stall-after` (5 s), not ready by `--start-deadline` (30 s), bound but never sent `READY=1`, or its listener vanished',
  },
  exited: { trouble: 1, meaning: 'the target is gone (exit status or signal when the probe could learn it)' },
  silent: { trouble: 2, meaning: 'the probe was connected and stopped talking' },
  paused: {
    trouble: 7,
    meaning: 'the orchestrator said it paused the VM (`POST …/lifecycle {"event":"pause"}`); the next connection opens a new generation',
  },
} as const satisfies Record<string, { trouble: number; meaning: string }>;

export type SandboxState = keyof typeof SANDBOX_STATES;
/** In the order a sandbox goes through them. */
export const STATES = Object.keys(SANDBOX_STATES) as readonly SandboxState[];
/** Trouble first: the order of the dashboard's fleet list and counts. */
export const STATES_TROUBLE_FIRST: readonly SandboxState[] = [...STATES].sort(
  (a, b) => SANDBOX_STATES[a].trouble - SANDBOX_STATES[b].trouble,
);

export function isSandboxState(s: string): s is SandboxState {
  return Object.hasOwn(SANDBOX_STATES, s);
}

/** Readiness stops waiting in these (the API's long-poll, `vsockdiag wait-ready`): the answer
 *  will not improve by itself soon. */
export const SETTLED_STATES: ReadonlySet<SandboxState> = new Set<SandboxState>(['ready', 'stuck', 'exited']);
/** The target's start-up has not finished, so its last phase is still running. */
export const STARTING_UP_STATES: ReadonlySet<SandboxState> = new Set<SandboxState>(['booting', 'starting', 'stuck']);
/** Nothing more is heard of the target (it exited) or from the probe (silent, or its VM
 *  paused) since the state began: a timeline ends there. */
export const ENDED_STATES: ReadonlySet<SandboxState> = new Set<SandboxState>(['exited', 'silent', 'paused']);
/** Outcomes, not progress: the state changes a timeline marks. */
export const OUTCOME_STATES: ReadonlySet<SandboxState> = new Set<SandboxState>(['ready', 'stuck', 'exited', 'silent']);

// ---- generations ----

/** Why a generation (a life of the VM: a boot or a restore) began; collector/lives.ts decides. */
export const GENERATION_CAUSES = {
  first: { meaning: 'the first probe session the collector saw of this sandbox' },
  boot: { meaning: "the hello's boot id is not the last session's: the VM booted again" },
  lifecycle: { meaning: 'the orchestrator said it paused or snapshotted the VM (`POST …/lifecycle`), and a probe connected after' },
  'uds-moved': { meaning: 'the sandbox was registered again with another `udsPath` (a restore with `vsock_override`)' },
  monotonic: {
    meaning:
      "the guest's time since boot went back, or stood still for 5 s or more while the host's ran: the VM was restored from a snapshot",
  },
  clock: {
    meaning:
      "the guest's wall clock fell 5 s or more further behind the host's since the last contact: a restored clock runs from the snapshot moment until envd's `/init` sets it",
  },
  vmgenid: { meaning: "the guest kernel's vmgenid driver sent `NEW_VMGENID` (Firecracker's VMGenID device changed on a restore)" },
} as const satisfies Record<string, { meaning: string }>;

export type GenerationCause = keyof typeof GENERATION_CAUSES;

/** What the orchestrator may tell the collector about a sandbox's VM (`POST …/lifecycle`). */
export const LIFECYCLE_EVENTS = {
  pause: { meaning: 'the VM is paused on purpose: the state is `paused`, not `silent`, and the next connection is a new generation' },
  resume: { meaning: 'the VM runs again: the state is decided from the probe again' },
  snapshot: { meaning: 'the VM was snapshotted: the next connection is a new generation (a restore of it)' },
} as const satisfies Record<string, { meaning: string }>;

export type LifecycleEvent = keyof typeof LIFECYCLE_EVENTS;
export const LIFECYCLE_EVENT_NAMES = Object.keys(LIFECYCLE_EVENTS) as readonly LifecycleEvent[];

// ---- conditions ----

/** Named facts about a sandbox that ride along with any state (in the reason, the API's
 *  `conditions` and /metrics); collector/conditions.ts decides them. */
export const CONDITIONS = {
  'socket-storm': {
    meaning:
      "one remote endpoint holds ≥ `--storm-threshold` (500) sockets, e.g. `4,210 sockets to 169.254.169.254:80`: envd's MMDS poll storm (seeds 000/001)",
  },
  'thread-growth': { meaning: "the target's threads at least doubled, by 20 or more, within a minute" },
  'not-accepting': { meaning: "the listener's accept queue has not drained for `--stall-after`, or a health check timed out in it" },
  'health-failing': { meaning: 'the in-guest health check (`--health-url`) fails' },
  oom: { meaning: "the kernel's OOM killer killed a process during the target's life" },
  'hung-task': { meaning: "the kernel reported a process blocked (hung task) during the target's life" },
  segfault: { meaning: "the kernel reported a process crashing (segfault) during the target's life" },
  'clock-skew': { meaning: "the guest's wall clock is off from the host's by 2 s or more (envd steps it in `/init`)" },
} as const satisfies Record<string, { meaning: string }>;

export type ConditionName = keyof typeof CONDITIONS;

// ---- the collector's own events ----

/** What the collector writes into a sandbox's history beside the probe's events (which
 *  carry a `seq`; these do not). */
export const COLLECTOR_EVENTS = {
  state: { meaning: 'the state changed: `state`, `previous`, `reason`' },
  condition: { meaning: 'a condition was raised or cleared: `name`, `raised`, `detail`' },
  'session.open': {
    meaning:
      'a probe said hello, opening a new session: `session`, `instanceId`, `probeGeneration`, `probeVersion`, `bootId`, `lastSeq`, `lostAtSeq`, `ack`',
  },
  generation: {
    meaning: 'a new life of the VM began (a boot or a restore): `generation`, `cause` (a generation cause), `detail`, `fromSeq`',
  },
  lifecycle: { meaning: 'the orchestrator told the collector about the VM: `event` (pause, resume, snapshot)' },
  'session.close': { meaning: "the probe's session ended: `reason`, and the protocol close `code` when one ended it" },
  gap: { meaning: 'events the probe lost before sending them (they fell out of its ring): `from`, `to`, `lost`' },
  dump: { meaning: 'a dump was stored, failed or was skipped: `dumpId`, `mode`, `trigger`, `complete`, `error`, `blockedIn`, `count`' },
} as const satisfies Record<string, { meaning: string }>;

export type CollectorEventKind = keyof typeof COLLECTOR_EVENTS;

/** Who asked for a dump (a dump's `trigger`). */
export const DUMP_TRIGGERS = {
  api: { meaning: 'asked for through the API (the dashboard, `vsockdiag dump`)' },
  auto: { meaning: 'taken by the collector on entering `stuck`' },
  final: { meaning: 'taken as the sandbox was unregistered (`DELETE /v1/sandboxes/:id?capture=1`), before its listener closed' },
} as const satisfies Record<string, { meaning: string }>;

export type DumpTrigger = keyof typeof DUMP_TRIGGERS;
