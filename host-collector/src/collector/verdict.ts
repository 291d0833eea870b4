// Decides a sandbox's state and the human reason for it from what the collector knows.
// Pure: given the same inputs and `now`, the same verdict, plus the moment it could next
// change by itself (so the caller arms one timer instead of polling on a tick).
//
// The states, and what each means, are in catalogue.ts.

import { formatDuration, type ProbeStatus } from '@vsockdiag/proto';
import type { ConditionName, SandboxState } from '../catalogue.js';
import type { Condition } from './conditions.js';
import { elapsedAt, type Elapsed } from './elapsed.js';

export interface VerdictInput {
  now: number;
  /** A probe session is live right now. */
  connected: boolean;
  /** When the current session opened, or the last one closed (host ms). */
  connectedAt?: number;
  disconnectedAt?: number;
  /** Why the last session ended, when it did. */
  disconnectReason?: string;
  /** The merged probe status; null until a probe ever said hello. */
  status: ProbeStatus | null;
  /** Maps a guest time (ms since guest boot) to host ms. */
  toHost: (guestMs: number) => number;
  targetName: string;
  stallAfterMs: number;
  startDeadlineMs: number;
  /** Conditions in force (see conditions.ts); some decide readiness, all show in the reason. */
  conditions?: readonly Condition[];
  /** When a condition may appear with no new input (see conditionsRecheckAt). */
  conditionsRecheckAt?: number | null;
  /** Where a goroutine dump of the target found it blocked (dumps/where-blocked.ts): named in
   *  a stuck reason while `pid` is still the target's. */
  blocked?: { pid: number; text: string } | null;
  /** Host ms since which the orchestrator says the VM is paused (POST …/lifecycle): a probe
   *  that went quiet then is expected to. Null or absent: not paused. */
  pausedSince?: number | null;
  /** The collector cannot listen on the sandbox's socket: no probe can reach it, so that is
   *  the reason, whatever the state last decided from the probe. */
  listenError?: { socketPath: string; message: string } | null;
}

export interface Verdict {
  state: SandboxState;
  reason: string;
  /** Host ms at which the verdict may change with no new input; null if it cannot. */
  recheckAt: number | null;
}

const ago = (elapsed: Elapsed, at: number) => `${elapsed(at)} ago`;

/** Conditions that are part of the readiness answer itself, so they are not repeated. */
const IN_READINESS: ReadonlySet<ConditionName> = new Set<ConditionName>(['not-accepting', 'health-failing']);
const NO_CONDITIONS: readonly Condition[] = [];

/**
 * The verdict, and how its reason is written: `true`, each duration up to now formatted at
 * `now`; an Elapsed, each written by it (elapsed.ts: a template for a reader elsewhere); `false`,
 * left empty: the collector re-decides on every batch of every sandbox and needs the text only
 * when the state changes (readers ask for it fresh).
 */
export function decide(v: VerdictInput, explain: boolean | Elapsed = true): Verdict {
  // With explain off nothing is formatted (or allocated for it).
  const elapsed = explain === false ? null : explain === true ? elapsedAt(v.now) : explain;
  const base = decideState(v, elapsed);
  let reason = base.reason;
  if (elapsed && v.listenError) reason = `cannot listen on ${v.listenError.socketPath}: ${v.listenError.message}`;
  else if (elapsed) for (const c of v.conditions ?? NO_CONDITIONS) if (!IN_READINESS.has(c.name)) reason += `; ${c.name}: ${c.detail}`;
  const other = v.conditionsRecheckAt ?? null;
  const recheckAt = base.recheckAt === null ? other : other === null ? base.recheckAt : Math.min(base.recheckAt, other);
  return reason === base.reason && recheckAt === base.recheckAt ? base : { state: base.state, reason, recheckAt };
}

/** `elapsed` null: the reason left empty. */
function decideState(v: VerdictInput, elapsed: Elapsed | null): Verdict {
  const { now, status } = v;
  if (v.pausedSince !== undefined && v.pausedSince !== null) {
    return { state: 'paused', reason: elapsed ? `paused by the orchestrator ${ago(elapsed, v.pausedSince)}` : '', recheckAt: null };
  }
  if (!status) {
    return { state: 'registered', reason: 'waiting for the probe to connect', recheckAt: null };
  }
  const target = status.target;
  const name = target?.name ?? v.targetName;
  const port = status.listener.port;

  if (target && !target.alive) {
    if (!elapsed) return { state: 'exited', reason: '', recheckAt: null };
    const how =
      target.signal !== undefined
        ? `killed by ${target.signal}`
        : target.exitCode !== undefined
          ? `exited with status ${target.exitCode}`
          : "exited (status unknown: not the probe's child)";
    const lastPhase = status.phases.last ? `, last phase ${describePhase(status.phases.last)}` : '';
    const probe = v.connected ? '' : '; probe disconnected';
    return { state: 'exited', reason: `${name} (pid ${target.pid}) ${how}${lastPhase}${probe}`, recheckAt: null };
  }

  if (!v.connected) {
    if (!elapsed) return { state: 'silent', reason: '', recheckAt: null };
    const since = v.disconnectedAt ?? now;
    const why = v.disconnectReason ? ` (${v.disconnectReason})` : '';
    return { state: 'silent', reason: `probe silent since ${ago(elapsed, since)}${why}`, recheckAt: null };
  }

  if (!target) {
    const since = v.connectedAt ?? now;
    return {
      state: 'booting',
      reason: elapsed ? `probe connected ${ago(elapsed, since)}, ${name} not seen yet` : '',
      recheckAt: null,
    };
  }

  const startedAt = v.toHost(target.startedAt);
  const listener = status.listener;
  const ownedByOther = listener.bound && listener.pid !== undefined && listener.pid !== target.pid;
  const needsReady = status.phases.reported && !status.phases.ready;
  const notAccepting = v.conditions?.find((c) => c.name === 'not-accepting');
  const unhealthy = v.conditions?.find((c) => c.name === 'health-failing');

  if (listener.bound && !ownedByOther && !needsReady && !notAccepting && !unhealthy) {
    const ready = status.phases.reported ? ', READY=1' : '';
    return {
      state: 'ready',
      reason: elapsed
        ? `${name} (pid ${target.pid}) listening on :${port} since ${ago(elapsed, v.toHost(listener.since ?? 0))}${ready}`
        : '',
      recheckAt: null,
    };
  }

  // Not ready: which kind of stuck (or still starting), and until when; then, if asked, why.
  const last = status.phases.last;
  // A listener that was bound during this process's life and went away.
  const vanishedAt = !listener.bound && listener.since !== undefined && listener.since >= target.startedAt ? listener.since : undefined;
  const progressAt = Math.max(startedAt, last ? v.toHost(last.t) : startedAt);
  const stallAt = progressAt + v.stallAfterMs;
  const deadlineAt = startedAt + v.startDeadlineMs;
  let verdict: Verdict;
  if (vanishedAt !== undefined) verdict = { state: 'stuck', reason: '', recheckAt: null };
  // A listener whose queue never drains is stuck now: the condition already waited stall-after.
  else if (notAccepting) verdict = { state: 'stuck', reason: '', recheckAt: null };
  else if (now >= deadlineAt) verdict = { state: 'stuck', reason: '', recheckAt: null };
  else if (now >= stallAt) verdict = { state: 'stuck', reason: '', recheckAt: deadlineAt };
  else verdict = { state: 'starting', reason: '', recheckAt: Math.min(stallAt, deadlineAt) };
  if (!elapsed) return verdict;

  const alive = `${name} alive ${elapsed(startedAt)}`;
  const lastPhase = last ? `last phase ${describePhase(last)} ${ago(elapsed, v.toHost(last.t))}` : 'no phase reported';
  let what: string;
  if (ownedByOther) what = `:${port} is held by pid ${listener.pid}, not ${name}`;
  else if (listener.bound && notAccepting) what = `listening on :${port} but not accepting (${notAccepting.detail})`;
  else if (listener.bound && unhealthy) what = `listening on :${port} but not answering (${unhealthy.detail})`;
  else if (listener.bound) what = `listening on :${port} but start-up never finished (no READY=1)`;
  else what = `nothing listening on :${port}`;
  if (vanishedAt !== undefined)
    verdict.reason = `${alive}, listener on :${port} vanished ${ago(elapsed, v.toHost(vanishedAt))}, ${lastPhase}`;
  else if (!notAccepting && now >= deadlineAt) {
    verdict.reason = `${alive}, ${what}, not ready by the ${formatDuration(v.startDeadlineMs)} start deadline, ${lastPhase}`;
  } else verdict.reason = `${alive}, ${what}, ${lastPhase}`;
  if (verdict.state === 'stuck' && v.blocked && v.blocked.pid === target.pid) verdict.reason += `; ${v.blocked.text}`;
  return verdict;
}

function describePhase(p: { name?: string; status?: string }): string {
  if (p.name && p.status) return `${p.name} ("${p.status}")`;
  return `"${p.name ?? p.status ?? '?'}"`;
}
