// GET /metrics: Prometheus text. Gauges are computed when scraped (no per-event metric
// work on the hot path); counters come from each sandbox's own counters.

import client from 'prom-client';
import type { FastifyInstance } from 'fastify';
import type { LimitCounters } from '../collector/budget.js';
import type { Registry } from '../collector/registry.js';
import { STATES } from '../catalogue.js';

export function metricsRoutes(app: FastifyInstance, registry: Registry): void {
  const reg = new client.Registry();
  const all = () => [...registry.sandboxes.values()];
  new client.Gauge({
    name: 'vsockdiag_sandboxes',
    help: 'Sandboxes by state',
    labelNames: ['state'],
    registers: [reg],
    collect() {
      this.reset();
      const counts = new Map<string, number>(STATES.map((s) => [s, 0]));
      for (const sb of all()) counts.set(sb.state, (counts.get(sb.state) ?? 0) + 1);
      for (const [state, n] of counts) this.set({ state }, n);
    },
  });
  new client.Gauge({
    name: 'vsockdiag_sandbox_state',
    help: '1 for each sandbox in its current state',
    labelNames: ['sandbox', 'state'],
    registers: [reg],
    collect() {
      this.reset();
      for (const sb of all()) this.set({ sandbox: sb.id, state: sb.state }, 1);
    },
  });
  new client.Gauge({
    name: 'vsockdiag_sandbox_condition',
    help: 'Conditions in force (socket-storm, thread-growth, not-accepting, health-failing, oom, …); the value is the count the condition is about, or 1',
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
    help: '1 when the sandbox has a live probe session',
    labelNames: ['sandbox'],
    registers: [reg],
    collect() {
      this.reset();
      for (const sb of all()) this.set({ sandbox: sb.id }, sb.intake.session ? 1 : 0);
    },
  });
  const counter = (name: string, help: string, key: 'events' | 'sessions' | 'protocolErrors' | 'gaps' | 'refused') =>
    new client.Gauge({
      // Gauges fed from monotonically growing per-sandbox counters (reset when a sandbox is
      // unregistered), exposed with the conventional _total suffix.
      name,
      help,
      labelNames: ['sandbox'],
      registers: [reg],
      collect() {
        this.reset();
        for (const sb of all()) this.set({ sandbox: sb.id }, sb.intake.counters[key]);
      },
    });
  counter('vsockdiag_events_received_total', 'Probe events received', 'events');
  counter('vsockdiag_sessions_total', 'Probe sessions opened (one per generation)', 'sessions');
  counter('vsockdiag_protocol_errors_total', 'Probe sessions closed for a protocol error', 'protocolErrors');
  counter('vsockdiag_gaps_total', 'Event ranges the probe reported lost from its ring', 'gaps');
  counter('vsockdiag_connections_refused_total', 'Probe connections refused (cool-down, too many before hello, or over budget)', 'refused');

  // What each sandbox's budget did to its guest (budget.ts), by reason: Counters fed from the
  // budget's own counts when scraped, like the gauges above.
  const limits = (name: string, help: string, read: (l: LimitCounters) => Record<string, number>) =>
    new client.Counter({
      name,
      help,
      labelNames: ['sandbox', 'reason'],
      registers: [reg],
      collect() {
        this.reset();
        for (const sb of all()) for (const [reason, n] of Object.entries(read(sb.intake.limits))) this.inc({ sandbox: sb.id, reason }, n);
      },
    });
  limits(
    'vsockdiag_guest_throttled_total',
    'Times reading from a guest was paused for being over budget, by bucket (bytes, frames, events)',
    (l) => l.throttled,
  );
  limits('vsockdiag_guest_throttled_seconds_total', 'Time reading from a guest stayed paused (reason: budget)', (l) => ({
    budget: l.throttledMs / 1000,
  }));
  limits(
    'vsockdiag_guest_cutoffs_total',
    'Guest connections closed for what the guest sent, by protocol error code (ERR_RATE_LIMIT: over budget too long)',
    (l) => l.offences,
  );
  limits(
    'vsockdiag_guest_refused_total',
    'Guest connections refused at accept, by reason (penalty, pending, frames, closed)',
    (l) => l.refused,
  );

  app.get('/metrics', async (_req, reply) => reply.type(reg.contentType).send(await reg.metrics()));
}
