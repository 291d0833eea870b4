// Conditions: named facts about a sandbox that an operator should see next to its state
// (in the reason, the API and /metrics). Pure, like the verdict: computed from the merged
// probe status plus the short histories the collector keeps per sandbox.
//
//   socket-storm    one remote endpoint holds ≥ stormThreshold sockets (seed 000: the MMDS
//                   poll storm to 169.254.169.254:80)
//   thread-growth   the target's thread count grew a lot within the window (goroutine leaks
//                   show there first)
//   not-accepting   the listener's accept queue has not drained for stall-after
//   health-failing  the in-guest health check fails
//   oom, hung-task, segfault   the kernel said so, during the current target's life
//   clock-skew      the guest's wall clock is off from the host's

import { formatDuration, type ProbeStatus } from '@vsockdiag/proto';

export const CONDITION_NAMES = [
  'socket-storm',
  'thread-growth',
  'not-accepting',
  'health-failing',
  'oom',
  'hung-task',
  'segfault',
  'clock-skew',
] as const;
export type ConditionName = (typeof CONDITION_NAMES)[number];

export interface Condition {
  name: ConditionName;
  detail: string;
  /** Guest-side subject, when there is one (e.g. the storming remote endpoint). */
  subject?: string;
  count?: number;
}

export interface KernelNote {
  what: 'oom' | 'hung-task' | 'segfault';
  process?: string;
  pid?: number;
  /** Host ms. */
  at: number;
  message: string;
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

export function conditions(c: ConditionInput): Condition[] {
  const out: Condition[] = [];
  const { status, settings, now } = c;

  const top = status.sockets?.top?.[0];
  if (top && top.count >= settings.stormThreshold) {
    const subject = `${top.address.includes(':') ? `[${top.address}]` : top.address}:${top.port}`;
    out.push({ name: 'socket-storm', subject, count: top.count, detail: `${num(top.count)} sockets to ${subject}` });
  }

  const window = c.threads.filter((s) => now - s.at <= settings.threadWindowMs);
  if (window.length >= 2) {
    let min = window[0]!;
    for (const s of window) if (s.n < min.n) min = s;
    const last = window[window.length - 1]!;
    if (last.at > min.at && last.n - min.n >= settings.threadGrowthMin && last.n >= min.n * settings.threadGrowthFactor) {
      out.push({
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
      out.push({
        name: 'not-accepting',
        count: l.acceptQueue,
        detail: `${l.acceptQueue} connection${l.acceptQueue === 1 ? '' : 's'} waiting in the accept queue for ${formatDuration(waited)}`,
      });
    }
  }

  // A check older than the listener's bind edge (e.g. refused before envd bound) says
  // nothing about the listener now.
  const fresh = status.health && !(l.bound && l.since !== undefined && status.health.t < l.since);
  if (status.health && fresh && !status.health.ok) {
    const h = status.health;
    out.push({ name: 'health-failing', detail: `GET ${pathOf(h.url)}: ${h.error ?? `HTTP ${h.status}`}` });
  }

  const startedAt = status.target ? c.toHost(status.target.startedAt) : Number.NEGATIVE_INFINITY;
  for (const what of ['oom', 'hung-task', 'segfault'] as const) {
    const notes = c.kernel.filter((k) => k.what === what && k.at >= startedAt - 1000);
    const k = notes[notes.length - 1];
    if (!k) continue;
    const who = k.process ? `${k.process}${k.pid ? ` (pid ${k.pid})` : ''}` : 'a process';
    const verb = what === 'oom' ? `killed ${who}` : what === 'hung-task' ? `${who} blocked in the kernel` : `${who} crashed`;
    out.push({ name: what, detail: `${verb} ${formatDuration(now - k.at)} ago`, ...(k.process ? { subject: k.process } : {}) });
  }

  if (c.skewMs !== null && Math.abs(c.skewMs) >= settings.skewLimitMs) {
    out.push({
      name: 'clock-skew',
      count: c.skewMs,
      detail: `guest clock ${formatDuration(Math.abs(c.skewMs))} ${c.skewMs > 0 ? 'ahead of' : 'behind'} the host`,
    });
  }
  return out;
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
