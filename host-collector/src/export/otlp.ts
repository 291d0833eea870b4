// --otlp-endpoint URL: the fleet's history as OTLP/HTTP traces and logs (JSON encoding, the
// official exporters), so it flows into the operator's OpenTelemetry pipeline.
//
// Each generation of a sandbox (one probe session: a boot, or a restore of it) is a trace:
// a root span `boot` from the session's hello, a child span per phase (from its marker to
// the next, the last to READY=1), and a link to the previous generation's root span. The
// root span ends when the generation is decided: ready, exited or silent; when stuck, after
// the automatic dumps the collector takes (or STUCK_HOLD_MS), so they are on it too; or
// when a new generation opens or the sandbox goes. A stuck verdict and every dump are span
// events, with error status; one that comes after the root span ended is a short child span
// of its own in the same trace. Every state change is also a log record, in that trace.
//
// Ingest never waits on the exporter: the feed only builds spans and records, which go into
// a bounded queue (QUEUE_BOUND per signal; past it they are dropped and counted in
// /metrics) that is sent one batch at a time.

import os from 'node:os';
import { ROOT_CONTEXT, SpanStatusCode, trace, type Attributes, type Link, type Span, type SpanContext } from '@opentelemetry/api';
import { SeverityNumber } from '@opentelemetry/api-logs';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-http';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { LoggerProvider, type LogRecordExporter, type LogRecordProcessor, type ReadableLogRecord } from '@opentelemetry/sdk-logs';
import { BasicTracerProvider, type ReadableSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import client from 'prom-client';
import type { SandboxState } from '../catalogue.js';
import type { Feed, FeedEvent } from '../collector/feed.js';
import type { Logger } from '../collector/logger.js';
import { VERSION } from '../version.js';

export const QUEUE_BOUND = 2048;
export const BATCH_SIZE = 256;
export const STUCK_HOLD_MS = 30_000;
export const SHUTDOWN_MS = 2000;
/** Phases kept per open boot span (a guest may send many). */
const MAX_PHASES = 64;

export interface OtlpSettings {
  /** The OTLP/HTTP base URL; /v1/traces and /v1/logs are appended (as OTEL_EXPORTER_OTLP_ENDPOINT). */
  endpoint: string;
  /** How long spans and records wait to be sent together. */
  flushIntervalMs?: number;
  /** One export's time limit. */
  timeoutMs?: number;
  stuckHoldMs?: number;
  queueBound?: number;
}

type Signal = 'traces' | 'logs';

interface ExportCounters {
  exported: client.Counter<'signal'>;
  failed: client.Counter<'signal'>;
  dropped: client.Counter<'signal'>;
}

/** A bounded queue sent one batch at a time; push() never waits. */
class BoundedQueue<T> {
  readonly items: T[] = [];
  private timer: NodeJS.Timeout | null = null;
  private sending: Promise<void> | null = null;

  constructor(
    private readonly signal: Signal,
    private readonly send: (batch: T[]) => Promise<boolean>,
    private readonly counters: ExportCounters,
    private readonly bound: number,
    private readonly intervalMs: number,
  ) {}

  push(item: T): void {
    if (this.items.length >= this.bound) {
      this.counters.dropped.inc({ signal: this.signal });
      return;
    }
    this.items.push(item);
    this.schedule();
  }

  /** Sends what is queued (one batch after another), for a shutdown. */
  async drain(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.sending;
    while (this.items.length > 0) await this.sendBatch();
  }

  private schedule(): void {
    if (this.timer || this.sending) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.sending = this.sendBatch().finally(() => {
          this.sending = null;
          if (this.items.length > 0) this.schedule();
        });
      },
      this.items.length >= BATCH_SIZE ? 0 : this.intervalMs,
    );
    this.timer.unref();
  }

  private async sendBatch(): Promise<void> {
    const batch = this.items.splice(0, BATCH_SIZE);
    const ok = await this.send(batch).catch(() => false);
    (ok ? this.counters.exported : this.counters.failed).inc({ signal: this.signal }, batch.length);
  }
}

/** export() with a callback, as a promise that settles within `ms` whatever the exporter does. */
function exportOnce<T>(
  exporter: { export(items: T[], cb: (r: { code: number }) => void): void },
  items: T[],
  ms: number,
): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    exporter.export(items, (r) => {
      clearTimeout(timer);
      resolve(r.code === 0);
    });
  });
}

class QueueSpanProcessor implements SpanProcessor {
  constructor(private readonly queue: BoundedQueue<ReadableSpan>) {}
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    this.queue.push(span);
  }
  forceFlush(): Promise<void> {
    return this.queue.drain();
  }
  shutdown(): Promise<void> {
    return this.queue.drain();
  }
}

class QueueLogProcessor implements LogRecordProcessor {
  constructor(private readonly queue: BoundedQueue<ReadableLogRecord>) {}
  onEmit(record: ReadableLogRecord): void {
    this.queue.push(record);
  }
  forceFlush(): Promise<void> {
    return this.queue.drain();
  }
  shutdown(): Promise<void> {
    return this.queue.drain();
  }
}

/** A sandbox's generation being traced. */
interface Boot {
  generation: number;
  root: Span;
  /** The phase running now. */
  phase: { name: string; at: number } | null;
  phases: number;
  /** When stuck: ends the root span if the automatic dumps take too long. */
  hold: NodeJS.Timeout | null;
}

/** The states worth more than INFO in a log record; any other (a new one too) is INFO. */
const SEVERITY: Partial<Record<SandboxState, [SeverityNumber, string]>> = {
  stuck: [SeverityNumber.ERROR, 'ERROR'],
  exited: [SeverityNumber.ERROR, 'ERROR'],
  silent: [SeverityNumber.WARN, 'WARN'],
};
const severityOf = (s: SandboxState): [SeverityNumber, string] => SEVERITY[s] ?? [SeverityNumber.INFO, 'INFO'];

export class OtlpExport {
  private readonly tracerProvider: BasicTracerProvider;
  private readonly loggerProvider: LoggerProvider;
  private readonly tracer;
  private readonly logger;
  private readonly boots = new Map<string, Boot>();
  /** The last root span of each sandbox, open or ended: links and late events refer to it. */
  private readonly lastRoot = new Map<string, SpanContext>();
  private readonly unsubscribe: () => void;

  constructor(
    private readonly settings: OtlpSettings,
    feed: Feed,
    reg: client.Registry,
    private readonly log: Logger,
  ) {
    const counters: ExportCounters = {
      exported: new client.Counter({
        name: 'vsockdiag_otlp_exported_total',
        help: 'Spans and log records the OTLP endpoint accepted',
        labelNames: ['signal'],
        registers: [reg],
      }),
      failed: new client.Counter({
        name: 'vsockdiag_otlp_export_failures_total',
        help: 'Spans and log records lost because an export failed (endpoint down, timeout, refused)',
        labelNames: ['signal'],
        registers: [reg],
      }),
      dropped: new client.Counter({
        name: 'vsockdiag_otlp_dropped_total',
        help: 'Spans and log records dropped because the export queue was full',
        labelNames: ['signal'],
        registers: [reg],
      }),
    };
    for (const c of Object.values(counters)) for (const signal of ['traces', 'logs']) c.inc({ signal }, 0);
    const base = settings.endpoint.replace(/\/+$/, '');
    const timeoutMs = settings.timeoutMs ?? 10_000;
    const interval = settings.flushIntervalMs ?? 1000;
    const bound = settings.queueBound ?? QUEUE_BOUND;
    const spanExporter: SpanExporter = new OTLPTraceExporter({ url: `${base}/v1/traces`, timeoutMillis: timeoutMs });
    const logExporter: LogRecordExporter = new OTLPLogExporter({ url: `${base}/v1/logs`, timeoutMillis: timeoutMs });
    // The exporter retries by itself; this bound is for one export including those.
    const spans = new BoundedQueue<ReadableSpan>('traces', (b) => exportOnce(spanExporter, b, timeoutMs * 2), counters, bound, interval);
    const logs = new BoundedQueue<ReadableLogRecord>('logs', (b) => exportOnce(logExporter, b, timeoutMs * 2), counters, bound, interval);
    const queues = [spans, logs] as const;
    new client.Gauge({
      name: 'vsockdiag_otlp_queue_length',
      help: 'Spans and log records waiting to be exported',
      labelNames: ['signal'],
      registers: [reg],
      collect() {
        for (const q of queues) this.set({ signal: q === spans ? 'traces' : 'logs' }, q.items.length);
      },
    });
    // host.name tells one host's collector from another's in a fleet-wide pipeline.
    const resource = resourceFromAttributes({
      'service.name': 'vsockdiag-collector',
      'service.version': VERSION,
      'host.name': os.hostname(),
    });
    this.tracerProvider = new BasicTracerProvider({ resource, spanProcessors: [new QueueSpanProcessor(spans)] });
    this.loggerProvider = new LoggerProvider({ resource, processors: [new QueueLogProcessor(logs)] });
    this.tracer = this.tracerProvider.getTracer('vsockdiag', VERSION);
    this.logger = this.loggerProvider.getLogger('vsockdiag', VERSION);
    this.unsubscribe = feed.subscribe((e) => this.note(e));
  }

  /** Ends the open spans and sends what is queued, for at most SHUTDOWN_MS: a dead endpoint
   *  must not hold up the collector's stop either. */
  async close(): Promise<void> {
    this.unsubscribe();
    for (const id of [...this.boots.keys()]) this.endBoot(id, Date.now());
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.log.warn('OTLP export at shutdown gave up; what was queued is lost');
        resolve();
      }, SHUTDOWN_MS);
    });
    const flushed = Promise.all([this.tracerProvider.shutdown(), this.loggerProvider.shutdown()]).then(
      () => undefined,
      (err: unknown) => this.log.warn({ err }, 'OTLP export at shutdown failed'),
    );
    await Promise.race([flushed, late]);
    clearTimeout(timer);
  }

  private note(e: FeedEvent): void {
    switch (e.type) {
      case 'session.open':
        return this.openBoot(e);
      case 'target': {
        const b = this.boots.get(e.id);
        b?.root.addEvent('target.found', { 'process.pid': e.pid, 'process.executable.name': e.name }, e.startedAt);
        return;
      }
      case 'phase':
        return this.phase(e);
      case 'state':
        return this.state(e);
      case 'dump': {
        const attrs: Attributes = {
          'vsockdiag.dump.mode': e.mode,
          'vsockdiag.dump.trigger': e.trigger,
          'vsockdiag.dump.duration_ms': e.durationMs,
        };
        if (e.dumpId !== null) attrs['vsockdiag.dump.id'] = e.dumpId;
        if (e.error) attrs['vsockdiag.dump.error'] = e.error;
        return this.mark(e.id, 'dump', attrs, e.at, `dump ${e.mode}${e.error ? `: ${e.error}` : ''}`);
      }
      case 'auto-dumps': {
        const b = this.boots.get(e.id);
        if (b?.hold && b.generation === e.generation) this.endBoot(e.id, e.at);
        return;
      }
      case 'removed':
        this.endBoot(e.id, e.at);
        this.lastRoot.delete(e.id);
        return;
      default:
        return;
    }
  }

  private openBoot(e: Extract<FeedEvent, { type: 'session.open' }>): void {
    this.endBoot(e.id, e.at);
    const prev = this.lastRoot.get(e.id);
    const links: Link[] = prev ? [{ context: prev, attributes: { 'vsockdiag.link': 'previous-generation' } }] : [];
    const root = this.tracer.startSpan(
      'boot',
      {
        startTime: e.at,
        links,
        root: true,
        attributes: {
          'vsockdiag.sandbox.id': e.id,
          'vsockdiag.generation': e.generation,
          'vsockdiag.boot_id': e.bootId,
          'vsockdiag.probe.instance_id': e.instanceId,
          'vsockdiag.probe.version': e.probeVersion,
        },
      },
      ROOT_CONTEXT,
    );
    this.lastRoot.set(e.id, root.spanContext());
    this.boots.set(e.id, { generation: e.generation, root, phase: null, phases: 0, hold: null });
  }

  private phase(e: Extract<FeedEvent, { type: 'phase' }>): void {
    const b = this.boots.get(e.id);
    if (!b) return;
    this.endPhase(b, e.at, false);
    if (!e.ready && e.name !== undefined && b.phases < MAX_PHASES) {
      b.phase = { name: e.name, at: e.at };
      b.phases++;
    }
    if (e.ready) b.root.addEvent('ready', { 'vsockdiag.phase.ready': true }, e.at);
  }

  private endPhase(b: Boot, at: number, failed: boolean): void {
    if (!b.phase) return;
    const ctx = trace.setSpan(ROOT_CONTEXT, b.root);
    const span = this.tracer.startSpan(
      `phase ${b.phase.name}`,
      { startTime: b.phase.at, attributes: { 'vsockdiag.phase': b.phase.name } },
      ctx,
    );
    if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: 'the target never got past this phase' });
    span.end(Math.max(at, b.phase.at));
    b.phase = null;
  }

  private state(e: Extract<FeedEvent, { type: 'state' }>): void {
    const b = this.boots.get(e.id);
    const attrs: Attributes = {
      'vsockdiag.sandbox.id': e.id,
      'vsockdiag.generation': e.generation,
      'vsockdiag.state': e.state,
      'vsockdiag.previous_state': e.previous,
      'vsockdiag.reason': e.reason,
      'vsockdiag.conditions': e.conditions.map((c) => c.name),
    };
    // In the boot's trace: the open root span's, else the last one's (a change after it ended).
    const last = this.lastRoot.get(e.id);
    const context = b ? trace.setSpan(ROOT_CONTEXT, b.root) : last ? trace.setSpanContext(ROOT_CONTEXT, last) : undefined;
    const [severityNumber, severityText] = severityOf(e.state);
    this.logger.emit({
      timestamp: e.at,
      severityNumber,
      severityText,
      body: `${e.id}: ${e.previous} → ${e.state}: ${e.reason}`,
      attributes: attrs,
      eventName: 'vsockdiag.state',
      ...(context ? { context } : {}),
    });
    if (e.state === 'stuck') {
      this.mark(e.id, 'stuck', { 'vsockdiag.reason': e.reason, 'vsockdiag.conditions': e.conditions.map((c) => c.name) }, e.at, e.reason);
      if (b) {
        this.endPhase(b, e.at, true);
        b.root.setAttribute('vsockdiag.state', e.state);
        b.hold = setTimeout(() => this.endBoot(e.id, Date.now()), this.settings.stuckHoldMs ?? STUCK_HOLD_MS);
        b.hold.unref();
      }
      return;
    }
    if (!b) return;
    if (e.state === 'ready' || e.state === 'exited' || e.state === 'silent') {
      b.root.setAttribute('vsockdiag.state', e.state);
      b.root.addEvent(e.state, { 'vsockdiag.reason': e.reason }, e.at);
      if (e.state === 'exited') b.root.setStatus({ code: SpanStatusCode.ERROR, message: e.reason });
      this.endBoot(e.id, e.at);
    }
  }

  /** A span event with error status (something needed a look: a stuck verdict, a dump) on
   *  the open root span, or a short span of its own in the sandbox's last trace when that
   *  span has ended. */
  private mark(id: string, name: string, attrs: Attributes, at: number, message: string): void {
    const b = this.boots.get(id);
    if (b) {
      b.root.addEvent(name, attrs, at);
      b.root.setStatus({ code: SpanStatusCode.ERROR, message });
      return;
    }
    const last = this.lastRoot.get(id);
    const span = this.tracer.startSpan(
      name,
      { startTime: at, attributes: { 'vsockdiag.sandbox.id': id } },
      last ? trace.setSpanContext(ROOT_CONTEXT, last) : ROOT_CONTEXT,
    );
    span.addEvent(name, attrs, at);
    span.setStatus({ code: SpanStatusCode.ERROR, message });
    span.end(at);
  }

  private endBoot(id: string, at: number): void {
    const b = this.boots.get(id);
    if (!b) return;
    this.boots.delete(id);
    if (b.hold) clearTimeout(b.hold);
    this.endPhase(b, at, false);
    b.root.end(at);
  }
}
