// --webhook URL (repeatable): a JSON POST to each URL on every transition into stuck, exited
// or silent. Signed as GitHub signs its webhooks when there is a secret
// (X-Vsockdiag-Signature-256: sha256=<hex HMAC-SHA256 of the body>); retried with
// exponential backoff on network errors, timeouts, 408, 429 and 5xx, up to MAX_ATTEMPTS.
//
// Ingest never waits: the feed only queues. Each URL has its own bounded queue, delivered in
// order one at a time, so a dead or slow receiver holds up only its own deliveries; past
// QUEUE_BOUND the newest is dropped and counted.
//
// A stuck notice waits (at most STUCK_DUMP_WAIT_MS) for the dumps the collector takes on
// entering stuck, so it can carry their ids: those are what an operator opens first.

import crypto from 'node:crypto';
import client from 'prom-client';
import type { SandboxState } from '../catalogue.js';
import type { Feed, FeedEvent } from '../collector/feed.js';
import type { Logger } from '../collector/logger.js';
import { VERSION } from '../version.js';

export const NOTIFY_STATES: ReadonlySet<SandboxState> = new Set<SandboxState>(['stuck', 'exited', 'silent']);
export const SIGNATURE_HEADER = 'x-vsockdiag-signature-256';
export const MAX_ATTEMPTS = 5;
export const QUEUE_BOUND = 256;
export const STUCK_DUMP_WAIT_MS = 30_000;

export interface WebhookSettings {
  urls: readonly string[];
  /** The HMAC key (the content of --webhook-secret-file). */
  secret?: string;
  /** Where the links in a notice point: the collector's public URL. */
  baseUrl: () => string;
  /** The first retry's delay; each next one doubles (tests shorten it). */
  backoffMs?: number;
  /** One attempt's time limit. */
  timeoutMs?: number;
  /** How long a stuck notice waits for the automatic dumps. */
  stuckDumpWaitMs?: number;
}

/** What a receiver gets. */
export interface WebhookPayload {
  event: 'state';
  id: string;
  state: SandboxState;
  previous: SandboxState;
  reason: string;
  conditions: { name: string; detail: string }[];
  generation: number;
  at: string;
  dumpIds: number[];
  links: { dashboard: string; api: string; dumps: string };
}

interface Delivery {
  id: string;
  body: string;
  attempt: number;
}

type StateEvent = Extract<FeedEvent, { type: 'state' }>;

export class Webhooks {
  private readonly queues: { url: string; items: Delivery[]; busy: boolean }[];
  private readonly held = new Map<string, { e: StateEvent; dumpIds: number[]; timer: NodeJS.Timeout }>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly inFlight = new Set<AbortController>();
  private readonly unsubscribe: () => void;
  private closed = false;
  private readonly deliveries: client.Counter<'outcome'>;
  private readonly retries: client.Counter;
  private readonly dropped: client.Counter;

  constructor(
    private readonly settings: WebhookSettings,
    feed: Feed,
    reg: client.Registry,
    private readonly log: Logger,
  ) {
    this.queues = settings.urls.map((url) => ({ url, items: [], busy: false }));
    this.deliveries = new client.Counter({
      name: 'vsockdiag_webhook_deliveries_total',
      help: 'Webhook deliveries by outcome: delivered (a 2xx), failed (given up after the last attempt, or refused with a 4xx)',
      labelNames: ['outcome'],
      registers: [reg],
    });
    for (const outcome of ['delivered', 'failed']) this.deliveries.inc({ outcome }, 0);
    this.retries = new client.Counter({
      name: 'vsockdiag_webhook_retries_total',
      help: 'Webhook attempts that were retried',
      registers: [reg],
    });
    this.dropped = new client.Counter({
      name: 'vsockdiag_webhook_dropped_total',
      help: `Webhook deliveries dropped because the receiver's queue was full (${QUEUE_BOUND})`,
      registers: [reg],
    });
    const queues = this.queues;
    new client.Gauge({
      name: 'vsockdiag_webhook_queue_length',
      help: 'Webhook deliveries not done yet, the one in flight included (all receivers)',
      registers: [reg],
      collect() {
        this.set(queues.reduce((n, q) => n + q.items.length, 0));
      },
    });
    this.unsubscribe = feed.subscribe((e) => this.note(e));
  }

  /** Stops: nothing more is sent, and attempts in flight are aborted. */
  close(): void {
    this.closed = true;
    this.unsubscribe();
    for (const h of this.held.values()) clearTimeout(h.timer);
    this.held.clear();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    for (const c of this.inFlight) c.abort();
  }

  private note(e: FeedEvent): void {
    if (e.type === 'auto-dumps') {
      const h = this.held.get(e.id);
      if (h && h.e.generation === e.generation) {
        h.dumpIds.push(...e.dumpIds.filter((d) => !h.dumpIds.includes(d)));
        this.release(e.id);
      }
      return;
    }
    if (e.type === 'removed') return this.release(e.id);
    if (e.type !== 'state') return;
    this.release(e.id); // a held notice goes first: receivers see transitions in order
    if (!NOTIFY_STATES.has(e.state)) return;
    if (e.state === 'stuck') {
      const timer = setTimeout(() => this.release(e.id), this.settings.stuckDumpWaitMs ?? STUCK_DUMP_WAIT_MS);
      this.held.set(e.id, { e, dumpIds: [...e.dumpIds], timer });
      return;
    }
    this.enqueue(this.payload(e, e.dumpIds));
  }

  private release(id: string): void {
    const h = this.held.get(id);
    if (!h) return;
    clearTimeout(h.timer);
    this.held.delete(id);
    this.enqueue(this.payload(h.e, h.dumpIds));
  }

  private payload(e: StateEvent, dumpIds: number[]): WebhookPayload {
    const base = this.settings.baseUrl().replace(/\/+$/, '');
    const path = encodeURIComponent(e.id);
    return {
      event: 'state',
      id: e.id,
      state: e.state,
      previous: e.previous,
      reason: e.reason,
      conditions: e.conditions,
      generation: e.generation,
      at: new Date(e.at).toISOString(),
      dumpIds,
      links: { dashboard: `${base}/sandboxes/${path}`, api: `${base}/v1/sandboxes/${path}`, dumps: `${base}/v1/sandboxes/${path}/dumps` },
    };
  }

  private enqueue(p: WebhookPayload): void {
    const body = JSON.stringify(p);
    for (const q of this.queues) {
      if (q.items.length >= QUEUE_BOUND) {
        this.dropped.inc();
        this.log.warn({ sandbox: p.id, state: p.state }, 'webhook queue full: notice dropped');
        continue;
      }
      // The same delivery id on every attempt, so a receiver can tell a retry from a new notice.
      q.items.push({ id: crypto.randomUUID(), body, attempt: 0 });
      this.pump(q);
    }
  }

  private pump(q: (typeof this.queues)[number]): void {
    if (q.busy || this.closed || q.items.length === 0) return;
    q.busy = true;
    const d = q.items[0]!;
    void this.attempt(q.url, d).then((outcome) => {
      q.busy = false;
      if (this.closed) return;
      if (outcome === 'retry' && d.attempt < MAX_ATTEMPTS) {
        this.retries.inc();
        const delay = (this.settings.backoffMs ?? 1000) * 2 ** (d.attempt - 1);
        // The queue waits for its head: order per receiver is kept.
        q.busy = true;
        const t = setTimeout(() => {
          this.timers.delete(t);
          q.busy = false;
          this.pump(q);
        }, delay);
        this.timers.add(t);
        return;
      }
      q.items.shift();
      this.deliveries.inc({ outcome: outcome === 'ok' ? 'delivered' : 'failed' });
      if (outcome !== 'ok') this.log.warn({ webhook: redact(q.url), attempts: d.attempt }, 'webhook delivery failed');
      this.pump(q);
    });
  }

  private async attempt(url: string, d: Delivery): Promise<'ok' | 'retry' | 'refused'> {
    d.attempt++;
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': `vsockdiag/${VERSION}`,
      'x-vsockdiag-event': 'state',
      'x-vsockdiag-delivery': d.id,
    };
    if (this.settings.secret !== undefined) {
      headers[SIGNATURE_HEADER] = `sha256=${crypto.createHmac('sha256', this.settings.secret).update(d.body).digest('hex')}`;
    }
    const abort = new AbortController();
    this.inFlight.add(abort);
    const timer = setTimeout(() => abort.abort(), this.settings.timeoutMs ?? 5000);
    try {
      const res = await fetch(url, { method: 'POST', headers, body: d.body, signal: abort.signal, redirect: 'manual' });
      await res.arrayBuffer().catch(() => undefined);
      if (res.status >= 200 && res.status < 300) return 'ok';
      return res.status >= 500 || res.status === 408 || res.status === 429 ? 'retry' : 'refused';
    } catch {
      return 'retry';
    } finally {
      clearTimeout(timer);
      this.inFlight.delete(abort);
    }
  }
}

/** A URL for the log: without credentials or query (either may hold a secret). */
function redact(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return '(bad URL)';
  }
}
