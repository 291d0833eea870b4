// How sandboxes and their dumps look in the API: one place, so the list, the detail, the CLI,
// the stream and the dashboard (which takes its types from here) all agree. What they build
// must match the routes' response schemas (schemas.ts): the routes' types check it, and the
// API tests validate real answers against docs/openapi.json.

import type { DumpMode, DumpSource, EventOf } from '@vsockdiag/proto';
import type { DumpTrigger } from '../catalogue.js';
import type { GenerationRecord } from '../collector/lives.js';
import type { Sandbox } from '../collector/sandbox.js';
import type { StoredDump, StoredEvent } from '../collector/store.js';
import { topGroup, type DumpAnalysis } from '../dumps/analyze.js';
import type { DumpDiff } from '../dumps/dump-work.js';
// `satisfies` holds each literal to its answer's schema: a field added here and not there
// fails to compile, rather than being dropped by the serialiser.
import type { DumpBriefJson, EventJson, PhaseStatsJson, SandboxDetailJson, SandboxSummaryJson } from './schemas.js';

export function summary(sb: Sandbox, now = Date.now()) {
  const v = sb.read(now);
  const status = sb.intake.status;
  return {
    id: sb.id,
    state: v.state,
    reason: v.reason,
    since: new Date(v.since).toISOString(),
    /** The life of the VM (a boot or a restore) and the probe connection, both counted per sandbox. */
    generation: sb.generation,
    session: sb.session,
    connected: sb.intake.session !== null,
    lastPhase: status?.phases.last?.name ?? status?.phases.last?.status ?? null,
    conditions: v.conditions.map(({ name, detail, subject, count }) => ({
      name,
      detail,
      ...(subject !== undefined ? { subject } : {}),
      ...(count !== undefined ? { count } : {}),
    })),
  } satisfies SandboxSummaryJson;
}

/** A stored event as the history (GET …/events) and the stream show it. */
export function eventRecord(e: StoredEvent): EventJson {
  return {
    id: e.id,
    generation: e.generation,
    session: e.session,
    seq: e.seq,
    kind: e.kind,
    tGuest: e.tGuest,
    at: new Date(e.tHost).toISOString(),
    data: e.data as Record<string, unknown>,
  };
}

/** A phase marker as the API lists it: what the probe reported, when, in which generation. */
export type PhaseRecord = Omit<EventOf<'phase'>, 'kind' | 'seq' | 't'> & { generation: number; tGuest: number | null; at: string };

/** The stored `phase` events (their data is what the probe sent, less kind, seq and t). */
export function phaseRecords(events: StoredEvent[]): PhaseRecord[] {
  return events.map((e) => ({
    ...(e.data as Omit<EventOf<'phase'>, 'kind' | 'seq' | 't'>),
    generation: e.generation,
    tGuest: e.tGuest,
    at: new Date(e.tHost).toISOString(),
  }));
}

/** `morePhases`: the target has more phases than `phases` lists (read them as events?kind=phase). */
export function detail(sb: Sandbox, phases: PhaseRecord[], morePhases: boolean, now = Date.now()) {
  const { intake, history } = sb;
  const status = intake.status;
  const guestToIso = (t: number | undefined) => (t === undefined ? null : new Date(Math.round(intake.clock.toHost(t))).toISOString());
  return {
    ...summary(sb, now),
    udsPath: sb.udsPath,
    socketPath: sb.socketPath,
    source: sb.source,
    probe: intake.probe ? { ...intake.probe, ...(status?.probe ?? {}) } : null,
    /** Why the current generation began, and when (null before the first hello). */
    generationInfo: generationInfo(intake.currentGeneration),
    pausedSince: intake.pausedSince === null ? null : new Date(intake.pausedSince).toISOString(),
    /** The next probe connection opens a new generation (a lifecycle hint, a moved socket). */
    expectNewGeneration: intake.expectsNewGeneration,
    connectedAt: intake.connectedAt ? new Date(intake.connectedAt).toISOString() : null,
    disconnectedAt: intake.disconnectedAt && !intake.session ? new Date(intake.disconnectedAt).toISOString() : null,
    target: status?.target
      ? { ...status.target, startedAt: guestToIso(status.target.startedAt), startedAtBootMs: status.target.startedAt }
      : null,
    listener: status ? { ...status.listener, since: guestToIso(status.listener.since), sinceBootMs: status.listener.since ?? null } : null,
    readiness: status
      ? { reportsPhases: status.phases.reported, ready: status.phases.ready, readyAt: guestToIso(status.phases.readyAt) }
      : null,
    health: status?.health ? { ...status.health, at: guestToIso(status.health.t) } : null,
    sockets: status?.sockets ? { ...status.sockets, at: guestToIso(status.sockets.t) } : null,
    system: status?.system ? { ...status.system, at: guestToIso(status.system.t) } : null,
    clockSkewMs: history.skewMs,
    kernel: history.kernel.map((k) => ({ ...k, at: new Date(k.at).toISOString() })),
    threads: history.threads.slice(-60).map((t) => ({ at: new Date(t.at).toISOString(), n: t.n })),
    phases,
    morePhases,
    dumps: history.recentDumps.map((d) => ({ ...d, at: new Date(d.at).toISOString() })),
    /** Where the newest goroutine dump of the current target found it blocked (also in a stuck reason). */
    blocked: history.blocked && status?.target?.pid === history.blocked.pid ? history.blocked : null,
    counters: intake.counters,
    /** What the sandbox's budget did: throttles, cut-offs by code, refusals, the penalty. */
    limits: intake.limits,
  } satisfies SandboxDetailJson;
}

function generationInfo(g: Readonly<GenerationRecord> | null) {
  if (!g) return null;
  return { generation: g.generation, cause: g.cause, detail: g.detail, since: new Date(g.openedMs).toISOString(), fromSeq: g.fromSeq };
}

/** A dump in the list (and as POST answers it): what it is and where it points, no text. */
export function dumpBrief(d: StoredDump) {
  const a = d.analysis as DumpAnalysis | null;
  return {
    id: d.id,
    sandboxId: d.sandboxId,
    generation: d.generation,
    // Stored as text, written only from these codes (dump-service.ts).
    mode: d.mode as DumpMode,
    source: d.source as DumpSource,
    trigger: d.trigger as DumpTrigger,
    complete: d.complete,
    error: d.error,
    note: d.note,
    pid: d.pid,
    /** How long the target was stopped for the dump (0: read while it ran; null: not said). */
    pausedMs: d.pausedMs ?? null,
    bytes: d.bytes,
    createdMs: d.createdMs,
    createdAt: new Date(d.createdMs).toISOString(),
    kind: a?.kind ?? 'unknown',
    top: a ? topGroup(a) : null,
  } satisfies DumpBriefJson;
}

/** One dump: its text, with the parsed structure flattened in (goroutineGroups and creatorGroups, or threads). */
export function dumpDetail(d: StoredDump, text: string) {
  const a = d.analysis as DumpAnalysis | null;
  return {
    ...dumpBrief(d),
    text,
    ...(a?.kind === 'goroutines'
      ? {
          goroutines: a.goroutines,
          ...(a.headers !== undefined ? { headers: a.headers } : {}),
          ...(a.unparsed ? { unparsed: a.unparsed, unparsedHeaders: a.unparsedHeaders ?? [] } : {}),
          goroutineGroups: a.goroutineGroups,
          ...(a.creatorGroups ? { creatorGroups: a.creatorGroups } : {}),
          ...(a.reason ? { reason: a.reason } : {}),
          ...(a.truncated ? { truncated: true } : {}),
          ...(a.longLines ? { longLines: a.longLines } : {}),
        }
      : {}),
    ...(a?.kind === 'threads' ? { threads: a.threads } : {}),
  };
}

/** What changed between two dumps of one sandbox. */
export function dumpDiff(older: StoredDump, newer: StoredDump, diff: DumpDiff) {
  return { older: older.id, newer: newer.id, ...diff };
}

/** One phase name across the fleet (GET /v1/phases): how long it took, from its samples in ms. */
export function phaseStats(name: string, samplesMs: readonly number[], keep: number) {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
  return {
    name,
    count: samplesMs.length,
    p50Ms: at(0.5),
    p90Ms: at(0.9),
    maxMs: sorted[sorted.length - 1]!,
    samplesMs: samplesMs.slice(-keep),
  } satisfies PhaseStatsJson;
}

/** The parsed structure a dump's detail carries, as the analysis it was made from. */
export function analysisOf(d: ReturnType<typeof dumpDetail>): DumpAnalysis {
  if (d.kind === 'goroutines' && d.goroutineGroups) {
    return {
      kind: 'goroutines',
      goroutines: d.goroutines!,
      ...(d.headers !== undefined ? { headers: d.headers } : {}),
      ...(d.unparsed ? { unparsed: d.unparsed, unparsedHeaders: d.unparsedHeaders ?? [] } : {}),
      goroutineGroups: d.goroutineGroups,
      ...(d.creatorGroups ? { creatorGroups: d.creatorGroups } : {}),
      ...(d.reason ? { reason: d.reason } : {}),
      ...(d.truncated ? { truncated: true } : {}),
      ...(d.longLines ? { longLines: d.longLines } : {}),
    };
  }
  if (d.kind === 'threads' && d.threads) return { kind: 'threads', threads: d.threads };
  return { kind: 'unknown' };
}
