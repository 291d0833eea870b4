// GET /metrics: Prometheus text. The gauges and the intake's counters are read when scraped
// (no per-event metric work on the hot path); the histograms and event counters are fed by
// the collector's feed (export/metrics.ts). Fleet-wide series always; one series per sandbox
// only with --metrics-per-sandbox, since a fleet of thousands would otherwise cost the
// operator's Prometheus thousands of series per metric.

import client from 'prom-client';
import type { FastifyInstance } from 'fastify';
import { CONDITIONS, STATES, type ConditionName } from '../catalogue.js';
import type { LimitCounters } from '../collector/budget.js';
import type { IntakeCounters } from '../collector/intake.js';
import { droppedLogRecords } from '../collector/logger.js';
import type { Registry } from '../collector/registry.js';
import { Text } from './schemas.js';

export interface MetricsOptions {
  /** Where every metric of the collector is registered (also the exporters' own). */
  reg: client.Registry;
  /** Per-sandbox series (a `sandbox` label) for the state, conditions and probe connection. */
  perSandbox: boolean;
  /** With --readiness-http: whether its thread listens. */
  readinessThread?: { readonly listening: boolean };
}

const CONDITION_NAMES = Object.keys(CONDITIONS) as ConditionName[];

export function metricsRoutes(app: FastifyInstance, registry: Registry, opts: MetricsOptions): void {
  const { reg, perSandbox } = opts;
  const all = () => [...registry.sandboxes.values()];

  new client.Gauge({
    name: 'vsockdiag_sandboxes',
    help: 'Sandboxes by state (every state, 0 when none)',
    labelNames: ['state'],
    registers: [reg],
    collect() {
      const counts = new Map<string, number>(STATES.map((s) => [s, 0]));
      for (const sb of all()) counts.set(sb.state, (counts.get(sb.state) ?? 0) + 1);
      for (const [state, n] of counts) this.set({ state }, n);
    },
  });
  new client.Gauge({
    name: 'vsockdiag_conditions',
    help: 'Sandboxes with each condition in force (socket-storm, thread-growth, not-accepting, health-failing, oom, …)',
    labelNames: ['condition'],
    registers: [reg],
    collect() {
      const counts = new Map<string, number>(CONDITION_NAMES.map((c) => [c, 0]));
      for (const sb of all()) for (const c of sb.conditionsAt()) counts.set(c.name, (counts.get(c.name) ?? 0) + 1);
      for (const [condition, n] of counts) this.set({ condition }, n);
    },
  });
  new client.Gauge({
    name: 'vsockdiag_probes_connected',
    help: 'Sandboxes with a live probe session',
    registers: [reg],
    collect() {
      this.set(all().filter((sb) => sb.intake.session !== null).length);
    },
  });
  const thread = opts.readinessThread;
  if (thread) {
    new client.Gauge({
      name: 'vsockdiag_readiness_thread_up',
      help: 'The readiness thread (--readiness-http) listens: 1, or 0 while it is started again',
      registers: [reg],
      collect() {
        this.set(thread.listening ? 1 : 0);
      },
    });
  }

  if (perSandbox) {
    new client.Gauge({
      name: 'vsockdiag_sandbox_state',
      help: "1 for the sandbox's current state, 0 for every other state",
      labelNames: ['sandbox', 'state'],
      registers: [reg],
      collect() {
        this.reset();
        for (const sb of all()) for (const state of STATES) this.set({ sandbox: sb.id, state }, sb.state === state ? 1 : 0);
      },
    });
    new client.Gauge({
      name: 'vsockdiag_sandbox_condition',
      help: 'Conditions in force per sandbox; the value is the count the condition is about, or 1',
      labelNames: ['sandbox', 'condition', 'subject'],
      registers: [reg],
      collect() {
        this.reset();
        for (const sb of all()) {
          for (const c of sb.conditionsAt()) this.set({ sandbox: sb.id, condition: c.name, subject: c.subject ?? '' }, c.count ?? 1);
        }
      },
    });
    new client.Gauge({
      name: 'vsockdiag_probe_connected',
      help: 'Per sandbox: 1 when it has a live probe session',
      labelNames: ['sandbox'],
      registers: [reg],
      collect() {
        this.reset();
        for (const sb of all()) this.set({ sandbox: sb.id }, sb.intake.session ? 1 : 0);
      },
    });
  }

  // The intake counts per sandbox; the fleet's counter is their sum plus what unregistered
  // sandboxes had counted, so it never goes down while the collector runs.
  const retired: IntakeCounters = { sessions: 0, events: 0, gaps: 0, protocolErrors: 0, refused: 0 };
  registry.on('added', (sb) =>
    sb.once('removed', () => {
      for (const k of Object.keys(retired) as (keyof IntakeCounters)[]) retired[k] += sb.intake.counters[k];
    }),
  );
  const counter = (name: string, help: string, key: keyof IntakeCounters) =>
    new client.Counter({
      name,
      help,
      registers: [reg],
      collect() {
        let n = retired[key];
        for (const sb of all()) n += sb.intake.counters[key];
        this.reset();
        this.inc(n);
      },
    });
  counter('vsockdiag_events_received_total', 'Probe events received', 'events');
  counter('vsockdiag_sessions_total', 'Probe sessions opened (connections; a generation may have many)', 'sessions');
  counter(
    'vsockdiag_protocol_errors_total',
    'Probe connections closed for a protocol error (bad frames, msgpack, schema, …)',
    'protocolErrors',
  );
  counter('vsockdiag_gaps_total', 'Event ranges the probe reported lost from its ring', 'gaps');
  counter(
    'vsockdiag_connections_refused_total',
    'Probe connections refused (reconnect penalty, too many before hello, over budget, or the store cannot write)',
    'refused',
  );
  new client.Counter({
    name: 'vsockdiag_log_records_dropped_total',
    help: "Log records the main thread dropped, by reason: stderr's reader fell behind, or a sandbox was over its log budget",
    labelNames: ['reason'],
    registers: [reg],
    collect() {
      this.reset();
      for (const [reason, n] of Object.entries(droppedLogRecords())) this.inc({ reason }, n);
    },
  });

  // What each sandbox's budget did to its guest (budget.ts), by reason: the fleet's counts
  // (with what unregistered sandboxes had counted, so they never go down), and one series
  // per sandbox only with --metrics-per-sandbox.
  const limitReaders: [name: string, help: string, read: (l: LimitCounters) => Record<string, number>][] = [
    [
      'guest_throttled_total',
      'Times reading from a guest was paused for being over budget, by bucket (bytes, frames, events)',
      (l) => l.throttled,
    ],
    [
      'guest_throttled_seconds_total',
      'Time reading from a guest stayed paused (reason: budget)',
      (l) => ({ budget: l.throttledMs / 1000 }),
    ],
    [
      'guest_cutoffs_total',
      'Guest connections closed for what the guest sent, by protocol error code (ERR_RATE_LIMIT: over budget too long)',
      (l) => l.offences,
    ],
    ['guest_refused_total', 'Guest connections refused at accept, by reason (penalty, pending, frames, closed, store)', (l) => l.refused],
  ];
  const retiredLimits = limitReaders.map(() => new Map<string, number>());
  registry.on('added', (sb) =>
    sb.once('removed', () =>
      limitReaders.forEach(([, , read], i) => {
        for (const [reason, n] of Object.entries(read(sb.intake.limits)))
          retiredLimits[i]!.set(reason, (retiredLimits[i]!.get(reason) ?? 0) + n);
      }),
    ),
  );
  limitReaders.forEach(([name, help, read], i) => {
    new client.Counter({
      name: `vsockdiag_${name}`,
      help,
      labelNames: ['reason'],
      registers: [reg],
      collect() {
        const totals = new Map(retiredLimits[i]!);
        for (const sb of all())
          for (const [reason, n] of Object.entries(read(sb.intake.limits))) totals.set(reason, (totals.get(reason) ?? 0) + n);
        this.reset();
        for (const [reason, n] of totals) this.inc({ reason }, n);
      },
    });
    if (!perSandbox) return;
    new client.Counter({
      name: `vsockdiag_sandbox_${name}`,
      help: `Per sandbox: ${help[0]!.toLowerCase()}${help.slice(1)}`,
      labelNames: ['sandbox', 'reason'],
      registers: [reg],
      collect() {
        this.reset();
        for (const sb of all()) for (const [reason, n] of Object.entries(read(sb.intake.limits))) this.inc({ sandbox: sb.id, reason }, n);
      },
    });
  });

  // Text/plain 0.0.4, whatever the API's other routes answer.
  const text = { description: 'Prometheus text exposition format', content: { 'text/plain': { schema: Text } } };
  app.get(
    '/metrics',
    { schema: { operationId: 'getMetrics', summary: 'Prometheus metrics', response: { 200: text } } },
    async (_req, reply) => reply.type(reg.contentType).send(await reg.metrics()),
  );
}
