// The metrics that events feed (collector/feed.ts), beside the scrape-time ones of
// http/metrics.ts: how long boots and phases take, how late verdicts are, how long dumps
// take, and counts of transitions and dumps; plus the process's and Node's own metrics and
// vsockdiag_build_info. Every label value is from a closed set (the catalogue's states, dump
// modes and triggers) except the phase name, which the guest chooses: at most
// MAX_PHASE_LABELS distinct names get their own series, the rest are counted as "other".

import { CLOCK_SLACK_MS, DUMP_MODES } from '@vsockdiag/proto';
import client from 'prom-client';
import { DUMP_TRIGGERS, STATES } from '../catalogue.js';
import type { Feed, FeedEvent } from '../collector/feed.js';
import { VERSION } from '../version.js';

export const MAX_PHASE_LABELS = 32;
const PHASE_OTHER = 'other';

export class FeedMetrics {
  private readonly timeToReady: client.Histogram<never>;
  private readonly phaseDuration: client.Histogram<'phase'>;
  private readonly verdictLag: client.Histogram<'state'>;
  private readonly dumpDuration: client.Histogram<'mode' | 'outcome'>;
  private readonly transitions: client.Counter<'state'>;
  private readonly dumps: client.Counter<'mode' | 'trigger' | 'outcome'>;
  /** Per sandbox: the phase running now (guest ms), and the target already counted ready. */
  private readonly running = new Map<string, { name: string; guestMs: number; at: number }>();
  private readonly readyTarget = new Map<string, number>();
  private readonly phaseNames = new Set<string>();
  private readonly unsubscribe: () => void;

  constructor(reg: client.Registry, feed: Feed) {
    client.collectDefaultMetrics({ register: reg });
    // prom-client names three gauges `_total` (a counter's suffix), which promtool rejects;
    // the same counts are there by type without it (nodejs_active_handles{type}, …).
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
      reg.removeSingleMetric(name);
    new client.Gauge({
      name: 'vsockdiag_build_info',
      help: 'Always 1; the labels say which collector this is',
      labelNames: ['version', 'nodejs'],
      registers: [reg],
    }).set({ version: VERSION, nodejs: process.version }, 1);
    this.timeToReady = new client.Histogram({
      name: 'vsockdiag_time_to_ready_seconds',
      help: 'From the target (envd) starting to the sandbox first ready (not counted for a target found ready when its probe connects)',
      buckets: [0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120],
      registers: [reg],
    });
    this.phaseDuration = new client.Histogram({
      name: 'vsockdiag_phase_duration_seconds',
      help: `How long each start-up phase took, from its marker to the next (or READY=1); guest clock. At most ${MAX_PHASE_LABELS} phase names, then "${PHASE_OTHER}"`,
      labelNames: ['phase'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [reg],
    });
    this.verdictLag = new client.Histogram({
      name: 'vsockdiag_verdict_lag_seconds',
      help: "From the input that decided a state change (the probe's event, or the threshold the verdict waited for) to its being recorded, by new state",
      labelNames: ['state'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [reg],
    });
    this.dumpDuration = new client.Histogram({
      name: 'vsockdiag_dump_duration_seconds',
      help: 'From asking the probe for a dump to it being stored (outcome "stored") or given up ("failed")',
      labelNames: ['mode', 'outcome'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 45, 60],
      registers: [reg],
    });
    this.transitions = new client.Counter({
      name: 'vsockdiag_state_transitions_total',
      help: 'State changes, by the state entered',
      labelNames: ['state'],
      registers: [reg],
    });
    this.dumps = new client.Counter({
      name: 'vsockdiag_dumps_total',
      help: 'Dumps asked for, by mode, who asked (api, auto) and outcome (stored, failed)',
      labelNames: ['mode', 'trigger', 'outcome'],
      registers: [reg],
    });
    // Every series of a closed set from the start, so rate() and alerts see the first one.
    for (const state of STATES) this.transitions.inc({ state }, 0);
    for (const mode of DUMP_MODES)
      for (const trigger of Object.keys(DUMP_TRIGGERS))
        for (const outcome of ['stored', 'failed']) this.dumps.inc({ mode, trigger, outcome }, 0);
    this.unsubscribe = feed.subscribe((e) => this.note(e));
  }

  close(): void {
    this.unsubscribe();
  }

  private note(e: FeedEvent): void {
    switch (e.type) {
      case 'target': {
        // A phase reported just before the probe found the target is the target's own.
        const r = this.running.get(e.id);
        if (r && r.at < e.startedAt - CLOCK_SLACK_MS) this.running.delete(e.id);
        return;
      }
      case 'phase': {
        const r = this.running.get(e.id);
        if (r && e.guestMs >= r.guestMs && !(e.guestMs === r.guestMs && e.name === r.name)) {
          this.phaseDuration.observe({ phase: this.phaseLabel(r.name) }, (e.guestMs - r.guestMs) / 1000);
        }
        // READY=1 ends the phase that ran; a named marker starts the next.
        if (e.ready || e.name === undefined) this.running.delete(e.id);
        else this.running.set(e.id, { name: e.name, guestMs: e.guestMs, at: e.at });
        return;
      }
      case 'state': {
        this.transitions.inc({ state: e.state });
        this.verdictLag.observe({ state: e.state }, e.lagMs / 1000);
        // A boot seen through: not a target already ready when its probe (re)connected after
        // a collector restart or a silence, whose start may be hours back.
        const seen = e.previous !== 'registered' && e.previous !== 'silent';
        if (e.state === 'ready' && seen && e.targetStartedAt !== null && this.readyTarget.get(e.id) !== e.targetStartedAt) {
          this.readyTarget.set(e.id, e.targetStartedAt);
          this.timeToReady.observe(Math.max(0, e.at - e.targetStartedAt) / 1000);
        }
        return;
      }
      case 'dump': {
        const outcome = e.dumpId !== null ? 'stored' : 'failed';
        this.dumps.inc({ mode: e.mode, trigger: e.trigger, outcome });
        this.dumpDuration.observe({ mode: e.mode, outcome }, e.durationMs / 1000);
        return;
      }
      case 'removed':
        this.running.delete(e.id);
        this.readyTarget.delete(e.id);
        return;
      default:
        return;
    }
  }

  private phaseLabel(name: string): string {
    if (this.phaseNames.has(name)) return name;
    if (this.phaseNames.size >= MAX_PHASE_LABELS) return PHASE_OTHER;
    this.phaseNames.add(name);
    return name;
  }
}
