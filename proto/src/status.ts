// How events change the probe's status. Both sides use this one reducer: the probe to
// keep the keyframe it sends in every hello, the collector to keep its merged view
// between keyframes. So the two pictures cannot drift apart.

import type { ProbeEvent, ProbeStatus } from './events.js';

/** Process start times come in 10 ms clock ticks; event times are as coarse at their anchor. */
const CLOCK_SLACK_MS = 50;

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
        },
      };
    case 'listener.unbound':
      return { ...status, listener: { port: e.port, bound: false, since: e.t } };
    case 'phase': {
      const phases = { ...status.phases, reported: true };
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
      return status;
  }
}
