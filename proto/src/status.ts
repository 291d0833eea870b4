// How events change the probe's status. Both sides use this one reducer: the probe to
// keep the keyframe it sends in every hello, the collector to keep its merged view
// between keyframes. So the two pictures cannot drift apart.
//
// It updates the status in place. A collector with thousands of sandboxes applies a few
// events to each of them every second; a new status per event lived a second, long enough
// for V8 to move it to the old generation, where those dead copies were what made every
// major GC (and its pauses, which every API answer waited behind) come round in seconds.
// So a status belongs to one owner: whoever hands it on to be kept (a keyframe in the
// probe's ring, say) hands a copy.

import type { ProbeEvent, ProbeStatus } from './events.js';

/** Process start times come in 10 ms clock ticks; event times are as coarse at their anchor:
 *  a phase this close before a target's start is still its own. */
export const CLOCK_SLACK_MS = 50;

export function initialStatus(expectPort: number): ProbeStatus {
  return {
    target: null,
    listener: { port: expectPort, bound: false },
    phases: { reported: false, ready: false },
  };
}

/** Census fields a `sockets` event without a census leaves as they were. */
const CENSUS_FIELDS: ReadonlySet<string> = new Set(['byState', 'top', 'remotesDistinct', 'censusAt']);

/**
 * Applies one event and returns the status to keep: `status` itself, updated, except for a
 * keyframe, which replaces it with a copy of the one it carries (the event keeps its own).
 */
export function applyEvent(status: ProbeStatus, e: ProbeEvent): ProbeStatus {
  switch (e.kind) {
    case 'target.found': {
      // A new target process (first start, or a restart by its supervisor): phases reported
      // before it started belong to a previous process and start over. Phases since its start
      // are its own: a fast target often reports them before the probe has found it.
      const last = status.phases.last;
      const own = last !== undefined && last.t >= e.startedAt - CLOCK_SLACK_MS;
      status.target = { pid: e.pid, name: e.name, startedAt: e.startedAt, source: e.source, alive: true };
      if (!own) status.phases = { reported: false, ready: false };
      return status;
    }
    case 'target.sample':
      if (status.target?.pid === e.pid) {
        status.target.threads = e.threads;
        status.target.rssKb = e.rssKb;
      }
      return status;
    case 'target.exit': {
      const target = status.target;
      if (target?.pid !== e.pid) return status;
      target.alive = false;
      if (e.exitCode !== undefined) target.exitCode = e.exitCode;
      if (e.signal !== undefined) target.signal = e.signal;
      return status;
    }
    case 'listener.bound':
      status.listener = {
        port: e.port,
        bound: true,
        since: e.t,
        address: e.address,
        ...(e.pid !== null ? { pid: e.pid } : {}),
        ...(e.acceptQueue !== undefined ? { acceptQueue: e.acceptQueue } : {}),
        ...(e.acceptQueue ? { queuedSince: e.t } : {}),
      };
      return status;
    case 'listener.unbound':
      status.listener = { port: e.port, bound: false, since: e.t };
      return status;
    case 'listener.queue': {
      const listener = status.listener;
      if (!listener.bound || listener.port !== e.port) return status;
      listener.acceptQueue = e.acceptQueue;
      if (e.acceptQueue === 0) delete listener.queuedSince;
      else if (listener.queuedSince === undefined) listener.queuedSince = e.t;
      return status;
    }
    case 'health':
      status.health = refill(status.health, e);
      return status;
    case 'sockets':
      // Totals arrive alone between two censuses: keep the last census with them.
      status.sockets = refill(status.sockets, e, e.censusAt === undefined ? CENSUS_FIELDS : undefined);
      return status;
    case 'system':
      status.system = refill(status.system, e);
      return status;
    case 'keyframe':
      return structuredClone(e.status);
    case 'kernel':
    case 'log.lines':
      return status;
    case 'phase': {
      // Only a target that speaks sd_notify can be expected to send READY=1; phases read
      // from its log lines show progress but do not change what "ready" requires.
      const phases = status.phases;
      phases.reported ||= e.source !== 'log';
      if (e.name !== undefined || e.status !== undefined) {
        const last: NonNullable<ProbeStatus['phases']['last']> = { t: e.t };
        if (e.name !== undefined) last.name = e.name;
        if (e.status !== undefined) last.status = e.status;
        phases.last = last;
      }
      if (e.ready && !phases.ready) {
        phases.ready = true;
        phases.readyAt = e.t;
      }
      return status;
    }
    case 'probe.notice':
    case 'vm.genid':
      return status;
  }
}

/**
 * `into` made to hold exactly the event's fields, its kind and seq aside (its t as `t`),
 * and of its own only the `keep` ones the event does not bring: the same object from one
 * second to the next (see the top of this file). Event fields are the schema's own keys
 * (proto's parse builds events from nothing else).
 */
function refill<T>(into: T | undefined, e: ProbeEvent, keep?: ReadonlySet<string>): T {
  const from = e as unknown as Record<string, unknown>;
  const out = (into ?? {}) as Record<string, unknown>;
  for (const k of Object.keys(out)) if (!Object.hasOwn(from, k) && !keep?.has(k)) delete out[k];
  for (const k of Object.keys(from)) if (k !== 'kind' && k !== 'seq') out[k] = from[k];
  return out as T;
}
