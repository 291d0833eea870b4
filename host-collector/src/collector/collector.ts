// The collector process: store → registry (listeners per sandbox) → discovery → HTTP.
// start() returns once every persisted sandbox is listening again and the API is up.

import type net from 'node:net';
import { DEFAULTS, parseAddress } from '@vsockdiag/proto';
import type { FastifyInstance } from 'fastify';
import client from 'prom-client';
import { FeedMetrics } from '../export/metrics.js';
import { OtlpExport } from '../export/otlp.js';
import { Webhooks } from '../export/webhooks.js';
import { isLoopbackName } from '../http/guard.js';
import { urlOf } from '../http/base.js';
import { buildHttp } from '../http/server.js';
import { ReadinessThread } from '../readiness/thread.js';
import type { BudgetLimits } from './budget.js';
import { DEFAULT_CONDITION_SETTINGS } from './conditions.js';
import { Discovery } from './discovery.js';
import { DumpAnalyzer } from './dump-analyzer.js';
import { DumpService, type OnStuck } from './dump-service.js';
import type { Logger } from './logger.js';
import { Registry } from './registry.js';
import { Store, WRITE_RETRY_MS, type Retention } from './store.js';

export interface CollectorOptions {
  http: string;
  /** Also serve the readiness route on this address, from a thread of its own (--readiness-http). */
  readinessHttp?: string;
  /** The readiness thread's entry; default the bundled dist/readiness-worker.js (tests from
   *  source pass one built from src/readiness/worker.ts, as for dumpWorkerUrl). */
  readinessWorkerUrl?: URL;
  dataDir: string;
  vsockPort: number;
  probePort: number;
  stallAfterMs: number;
  startDeadlineMs: number;
  discover?: string;
  token?: string;
  dashboardDir: string;
  /** On entering stuck: 'threads' (harmless dumps only) or 'quit' (also SIGQUIT's Go dump). */
  onStuck?: OnStuck;
  /** Sockets to one remote endpoint from which a socket-storm condition is raised. */
  stormThreshold?: number;
  /** Folders every udsPath must lie in (--uds-root); none: any absolute path. */
  udsRoots?: string[];
  /** Group for the vsock sockets (--socket-group), so a jailed Firecracker can connect. */
  socketGid?: number;
  /** How long one dump's analysis, or one diff, may take in the dump worker (DUMP_ANALYSIS_TIME_LIMIT_MS). */
  dumpAnalysisLimitMs?: number;
  /** The dump worker's entry; default the bundled dist/dump-worker.js (tests from source pass
   *  one built from src/dumps/dump-worker.ts: host-collector/test/support/workers.ts). */
  dumpWorkerUrl?: URL;
  /** Bounds on the event history (per sandbox, by count and bytes, and in total); the
   *  oldest events are pruned as new ones are committed. Defaults: DEFAULT_RETENTION. */
  retention?: Partial<Retention>;
  /** Per-sandbox series in /metrics (--metrics-per-sandbox); off: fleet-wide series only. */
  metricsPerSandbox?: boolean;
  /** OTLP/HTTP base URL for traces and logs (--otlp-endpoint); none: no export. */
  otlpEndpoint?: string;
  /** Webhook receivers (--webhook), and the HMAC key they are signed with. */
  webhooks?: string[];
  webhookSecret?: string;
  /** The collector's URL as others reach it, for the links in webhooks (--public-url);
   *  default the URL it listens on. */
  publicUrl?: string;
  /** Tests shorten the webhooks' backoff, the stuck wait and the OTLP flush interval, and
   *  bound the OTLP queue lower. */
  exportTuning?: { webhookBackoffMs?: number; stuckWaitMs?: number; otlpFlushMs?: number; otlpQueueBound?: number };
  /** Each sandbox's budget, over DEFAULT_BUDGET (budget.ts); the reliability fuzzer turns
   *  the reconnect penalty off and charges a connection one frame, to try a hostile frame per
   *  connection. */
  budget?: Partial<BudgetLimits>;
}

export const DEFAULT_COLLECTOR_OPTIONS = {
  http: DEFAULTS.http,
  dataDir: DEFAULTS.dataDir,
  vsockPort: DEFAULTS.vsockPort,
  probePort: DEFAULTS.probePort,
  stallAfterMs: DEFAULTS.stallAfterMs,
  startDeadlineMs: DEFAULTS.startDeadlineMs,
};

/** "127.0.0.1:7070", "tcp:127.0.0.1:7070" or "[::1]:7070" → host and port. */
export function parseHttpAddress(text: string, flag = '--http'): { host: string; port: number } {
  const bad = () => new Error(`${flag} must be HOST:PORT, got "${text}"`);
  let a: ReturnType<typeof parseAddress>;
  try {
    a = parseAddress(text.startsWith('tcp:') ? text : `tcp:${text}`);
  } catch {
    throw bad();
  }
  if (a.kind !== 'tcp') throw bad();
  return { host: a.host, port: a.port };
}

export class Collector {
  readonly store: Store;
  readonly registry: Registry;
  readonly http: FastifyInstance;
  readonly dumps: DumpService;
  /** Every metric /metrics serves. */
  readonly metrics = new client.Registry();
  private readonly analyzer: DumpAnalyzer;
  private discovery: Discovery | null = null;
  private readonly feedMetrics: FeedMetrics;
  private readonly otlp: OtlpExport | null = null;
  private readonly webhooks: Webhooks | null = null;
  private readonly readiness: ReadinessThread | null = null;
  private url = '';
  private readinessAt: string | null = null;

  constructor(
    private readonly opts: CollectorOptions,
    private readonly log: Logger,
  ) {
    const { host } = parseHttpAddress(opts.http);
    if (!isLoopbackName(host) && !opts.token) {
      throw new Error(`refusing to serve the API on non-loopback ${host} without --token`);
    }
    const readiness = opts.readinessHttp ? parseHttpAddress(opts.readinessHttp, '--readiness-http') : null;
    if (readiness && !isLoopbackName(readiness.host) && !opts.token) {
      throw new Error(`refusing to serve readiness on non-loopback ${readiness.host} without --token`);
    }
    this.store = new Store(opts.dataDir, opts.retention, (err) => {
      if (err) {
        log.error(
          { err: err.message, code: (err as { code?: string }).code },
          `the store cannot write (${err.message}): probe connections are refused and nothing is acked until a write succeeds; retrying every ${WRITE_RETRY_MS / 1000} s`,
        );
      } else log.warn('the store can write again: probe connections are accepted');
    });
    this.registry = new Registry(
      this.store,
      {
        vsockPort: opts.vsockPort,
        stallAfterMs: opts.stallAfterMs,
        startDeadlineMs: opts.startDeadlineMs,
        targetName: DEFAULTS.target,
        ...(opts.udsRoots?.length ? { udsRoots: opts.udsRoots } : {}),
        ...(opts.socketGid !== undefined ? { socketGid: opts.socketGid } : {}),
        ...(opts.budget ? { budget: opts.budget } : {}),
        conditions: {
          ...DEFAULT_CONDITION_SETTINGS,
          ...(opts.stormThreshold !== undefined ? { stormThreshold: opts.stormThreshold } : {}),
        },
      },
      log,
    );
    this.analyzer = new DumpAnalyzer({
      log,
      ...(opts.dumpAnalysisLimitMs !== undefined ? { timeLimitMs: opts.dumpAnalysisLimitMs } : {}),
      ...(opts.dumpWorkerUrl ? { workerUrl: opts.dumpWorkerUrl } : {}),
    });
    this.dumps = new DumpService(this.store, this.registry, log, {
      probePort: opts.probePort,
      onStuck: opts.onStuck ?? 'threads',
      analyzer: this.analyzer,
    });
    this.feedMetrics = new FeedMetrics(this.metrics, this.registry.feed);
    const timing = opts.exportTuning ?? {};
    if (opts.otlpEndpoint) {
      this.otlp = new OtlpExport(
        {
          endpoint: opts.otlpEndpoint,
          ...(timing.otlpFlushMs !== undefined ? { flushIntervalMs: timing.otlpFlushMs } : {}),
          ...(timing.stuckWaitMs !== undefined ? { stuckHoldMs: timing.stuckWaitMs } : {}),
          ...(timing.otlpQueueBound !== undefined ? { queueBound: timing.otlpQueueBound } : {}),
        },
        this.registry.feed,
        this.metrics,
        log,
      );
    }
    if (opts.webhooks?.length) {
      this.webhooks = new Webhooks(
        {
          urls: opts.webhooks,
          baseUrl: () => opts.publicUrl ?? this.url,
          ...(opts.webhookSecret !== undefined ? { secret: opts.webhookSecret } : {}),
          ...(timing.webhookBackoffMs !== undefined ? { backoffMs: timing.webhookBackoffMs } : {}),
          ...(timing.stuckWaitMs !== undefined ? { stuckDumpWaitMs: timing.stuckWaitMs } : {}),
        },
        this.registry.feed,
        this.metrics,
        log,
      );
    }
    if (readiness) {
      this.readiness = new ReadinessThread(this.registry, {
        ...readiness,
        loopbackOnly: isLoopbackName(readiness.host),
        log,
        ...(opts.token ? { token: opts.token } : {}),
        ...(opts.readinessWorkerUrl ? { workerUrl: opts.readinessWorkerUrl } : {}),
      });
    }
    this.http = buildHttp({
      metrics: {
        reg: this.metrics,
        perSandbox: opts.metricsPerSandbox === true,
        ...(this.readiness ? { readinessThread: this.readiness } : {}),
      },
      registry: this.registry,
      store: this.store,
      dumps: this.dumps,
      analyzer: this.analyzer,
      log,
      dashboardDir: opts.dashboardDir,
      loopbackOnly: isLoopbackName(host),
      ...(opts.token ? { token: opts.token } : {}),
    });
  }

  /** The readiness thread's URL, once started; null without --readiness-http. */
  get readinessUrl(): string | null {
    return this.readinessAt;
  }

  /** Resolves with the URL the API listens on. */
  async start(): Promise<string> {
    await this.registry.restore();
    if (this.opts.discover) {
      this.discovery = new Discovery(this.opts.discover, this.registry, this.log);
      this.discovery.start();
    }
    const { host, port } = parseHttpAddress(this.opts.http);
    await this.http.listen({ host, port });
    const url = urlOf(this.http.server.address() as net.AddressInfo);
    this.url = url;
    if (this.readiness) this.readinessAt = await this.readiness.start();
    this.log.info(
      { url, ...(this.readinessAt ? { readiness: this.readinessAt } : {}), sandboxes: this.registry.sandboxes.size },
      'collector ready',
    );
    return url;
  }

  async stop(): Promise<void> {
    this.discovery?.stop();
    await this.readiness?.stop();
    await this.http.close();
    this.webhooks?.close();
    await this.registry.closeAll();
    await this.otlp?.close();
    this.feedMetrics.close();
    await this.analyzer.close();
    this.store.close();
  }
}
