// Conditions: named facts about a sandbox that an operator should see next to its state
// (in the reason, the API and /metrics). Pure, like the verdict: computed from the merged
// probe status plus the short histories the collector keeps per sandbox. Which conditions
// there are, and what each means, is in catalogue.ts (thread growth is watched because
// goroutine leaks show there first).

import { KERNEL_KINDS, formatDuration, type ProbeStatus } from '@vsockdiag/proto';
import type { ConditionName } from '../catalogue.js';
import { elapsedAt, type Elapsed } from './elapsed.js';

export interface Condition {
  name: ConditionName;
  detail: string;
  /** Guest-side subject, when there is one (e.g. the storming remote endpoint). */
  subject?: string;
  count?: number;
}

export interface KernelNote {
  what: (typeof KERNEL_KINDS)[number];
  process?: string;
  pid?: number;
  /** When the kernel logged it, host ms. */
  at: number;
  message: string;
  /** The kernel's own timestamp (guest ms since boot), which names one record across sessions. */
  kernelMs?: number;
}

export interface ConditionSettings {
  stormThreshold: number;
  stallAfterMs: number;
  /** Growth that counts: at least this many threads more… */
  threadGrowthMin: number;
  /** …and at least this factor over the window's minimum. */
  threadGrowthFactor: number;
  threadWindowMs: number;
  skewLimitMs: number;
}

export const DEFAULT_CONDITION_SETTINGS: Omit<ConditionSettings, 'stallAfterMs'> = {
  stormThreshold: 500,
  threadGrowthMin: 20,
  threadGrowthFactor: 2,
  threadWindowMs: 60_000,
  skewLimitMs: 2000,
};

export interface ConditionInput {
  now: number;
  /** How a detail writes a duration up to now (elapsed.ts); default: formatted at `now`. */
  elapsed?: Elapsed;
  status: ProbeStatus;
  toHost: (guestMs: number) => number;
  /** The current target's thread counts, host ms. */
  threads: ReadonlyArray<{ at: number; n: number }>;
  kernel: ReadonlyArray<KernelNote>;
  /** Guest wall clock minus host wall clock, from the last system sample. */
  skewMs: number | null;
  settings: ConditionSettings;
}

const num = (n: number) => n.toLocaleString('en-US');
const NONE: readonly Condition[] = Object.freeze([]);
const added = (list: Condition[] | null, c: Condition): Condition[] => {
  (list ??= []).push(c);
  return list;
};

/**
 * The conditions in force. Runs on every batch of every sandbox, so the usual answer (none)
 * allocates nothing: no arrays for windows or filters, one shared empty result.
 */
export function conditions(c: ConditionInput): readonly Condition[] {
  let out: Condition[] | null = null;
  const { status, settings, now } = c;

  const top = status.sockets?.top?.[0];
  if (top && top.count >= settings.stormThreshold) {
    const subject = `${top.address.includes(':') ? `[${top.address}]` : top.address}:${top.port}`;
    out = added(out, { name: 'socket-storm', subject, count: top.count, detail: `${num(top.count)} sockets to ${subject}` });
  }

  // The thread samples within the window are a suffix of the list (oldest first).
  const samples = c.threads;
  const last = samples[samples.length - 1];
  if (last && now - last.at <= settings.threadWindowMs) {
    let min = last;
    for (let i = samples.length - 2; i >= 0 && now - samples[i]!.at <= settings.threadWindowMs; i--) {
      if (samples[i]!.n <= min.n) min = samples[i]!;
    }
    if (last.at > min.at && last.n - min.n >= settings.threadGrowthMin && last.n >= min.n * settings.threadGrowthFactor) {
      out = added(out, {
        name: 'thread-growth',
        count: last.n,
        detail: `threads ${min.n} → ${last.n} in ${formatDuration(last.at - min.at)}`,
      });
    }
  }

  // Not accepting: the accept queue stayed non-empty for stall-after, or a health check
  // timed out while connections sat in the queue (its own connection was one of them).
  const l = status.listener;
  const h = status.health;
  if (l.bound && l.acceptQueue && l.queuedSince !== undefined) {
    const waited = now - c.toHost(l.queuedSince);
    const timedOut = h !== undefined && !h.ok && h.status === undefined && /ETIMEDOUT/.test(h.error ?? '') && h.t >= l.queuedSince;
    if (waited >= settings.stallAfterMs || timedOut) {
      out = added(out, {
        name: 'not-accepting',
        count: l.acceptQueue,
        detail: `${l.acceptQueue} connection${l.acceptQueue === 1 ? '' : 's'} waiting in the accept queue for ${(c.elapsed ?? elapsedAt(now))(c.toHost(l.queuedSince))}`,
      });
    }
  }

  // A check older than the listener's bind edge (e.g. refused before envd bound) says
  // nothing about the listener now.
  const fresh = status.health && !(l.bound && l.since !== undefined && status.health.t < l.since);
  if (status.health && fresh && !status.health.ok) {
    const h = status.health;
    out = added(out, { name: 'health-failing', detail: `GET ${pathOf(h.url)}: ${h.error ?? `HTTP ${h.status}`}` });
  }

  const startedAt = status.target ? c.toHost(status.target.startedAt) : Number.NEGATIVE_INFINITY;
  for (const what of KERNEL_KINDS) {
    let k: KernelNote | undefined;
    for (let i = c.kernel.length - 1; i >= 0 && !k; i--) {
      const note = c.kernel[i]!;
      if (note.what === what && note.at >= startedAt - 1000) k = note;
    }
    if (!k) continue;
    const who = k.process ? `${k.process}${k.pid ? ` (pid ${k.pid})` : ''}` : 'a process';
    const verb = what === 'oom' ? `killed ${who}` : what === 'hung-task' ? `${who} blocked in the kernel` : `${who} crashed`;
    out = added(out, {
      name: what,
      detail: `${verb} ${(c.elapsed ?? elapsedAt(now))(k.at)} ago`,
      ...(k.process ? { subject: k.process } : {}),
    });
  }

  if (c.skewMs !== null && Math.abs(c.skewMs) >= settings.skewLimitMs) {
    out = added(out, {
      name: 'clock-skew',
      count: c.skewMs,
      detail: `guest clock ${formatDuration(Math.abs(c.skewMs))} ${c.skewMs > 0 ? 'ahead of' : 'behind'} the host`,
    });
  }
  return out ?? NONE;
}

/** When the conditions could change with no new input (only not-accepting waits on time). */
export function conditionsRecheckAt(c: Pick<ConditionInput, 'status' | 'toHost' | 'now' | 'settings'>): number | null {
  const l = c.status.listener;
  if (!l.bound || !l.acceptQueue || l.queuedSince === undefined) return null;
  const at = c.toHost(l.queuedSince) + c.settings.stallAfterMs;
  return at > c.now ? at : null;
}

function pathOf(url: string): string {
  try {
    return new URL(url).pathname;
  } catch {
    return url;
  }
}
