// How events change the probe's status. Both sides use this one reducer: the probe to
// keep the keyframe it sends in every hello, the collector to keep its merged view
// between keyframes. So the two pictures cannot drift apart.

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

/** Returns a new status (the input is not modified). */
export function applyEvent(status: ProbeStatus, e: ProbeEvent): ProbeStatus {
  switch (e.kind) {
    case 'target.found': {
      // A new target process (first start, or a restart by its supervisor): phases reported
      // before it started belong to a previous process and start over. Phases since its start
      // are its own: a fast target often reports them before the probe has found it.
      const last = status.phases.last;
      const own = last !== undefined && last.t >= e.startedAt - CLOCK_SLACK_MS;
      return {
        ...status,
        target: { pid: e.pid, name: e.name, startedAt: e.startedAt, source: e.source, alive: true },
        phases: own ? status.phases : { reported: false, ready: false },
      };
    }
    case 'target.sample':
      if (!status.target || status.target.pid !== e.pid) return status;
      return { ...status, target: { ...status.target, threads: e.threads, rssKb: e.rssKb } };
    case 'target.exit': {
      if (!status.target || status.target.pid !== e.pid) return status;
      const target = { ...status.target, alive: false };
      if (e.exitCode !== undefined) target.exitCode = e.exitCode;
      if (e.signal !== undefined) target.signal = e.signal;
      return { ...status, target };
    }
    case 'listener.bound':
      return {
        ...status,
        listener: {
          port: e.port,
          bound: true,
          since: e.t,
          address: e.address,
          ...(e.pid !== null ? { pid: e.pid } : {}),
          ...(e.acceptQueue !== undefined ? { acceptQueue: e.acceptQueue } : {}),
          ...(e.acceptQueue ? { queuedSince: e.t } : {}),
        },
      };
    case 'listener.unbound':
      return { ...status, listener: { port: e.port, bound: false, since: e.t } };
    case 'listener.queue': {
      if (!status.listener.bound || status.listener.port !== e.port) return status;
      const listener = { ...status.listener, acceptQueue: e.acceptQueue };
      if (e.acceptQueue === 0) delete listener.queuedSince;
      else if (listener.queuedSince === undefined) listener.queuedSince = e.t;
      return { ...status, listener };
    }
    case 'health': {
      const { kind: _k, seq: _s, t, ...health } = e;
      return { ...status, health: { ...health, t } };
    }
    case 'sockets': {
      const { kind: _k, seq: _s, t, ...sockets } = e;
      // Totals arrive alone between two censuses: keep the last census with them.
      const census = sockets.censusAt === undefined && status.sockets ? pickCensus(status.sockets) : {};
      return { ...status, sockets: { ...census, ...sockets, t } };
    }
    case 'system': {
      const { kind: _k, seq: _s, t, ...system } = e;
      return { ...status, system: { ...system, t } };
    }
    case 'keyframe':
      return e.status;
    case 'kernel':
    case 'log.lines':
      return status;
    case 'phase': {
      // Only a target that speaks sd_notify can be expected to send READY=1; phases read
      // from its log lines show progress but do not change what "ready" requires.
      const phases = { ...status.phases, reported: status.phases.reported || e.source !== 'log' };
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
      return { ...status, phases };
    }
    case 'probe.notice':
    case 'vm.genid':
      return status;
  }
}

function pickCensus(s: NonNullable<ProbeStatus['sockets']>) {
  const out: Partial<NonNullable<ProbeStatus['sockets']>> = {};
  if (s.byState !== undefined) out.byState = s.byState;
  if (s.top !== undefined) out.top = s.top;
  if (s.remotesDistinct !== undefined) out.remotesDistinct = s.remotesDistinct;
  if (s.censusAt !== undefined) out.censusAt = s.censusAt;
  return out;
}
