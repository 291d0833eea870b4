// The collector's main HTTP face: JSON API, dashboard, health, metrics, stream. The request
// lifecycle (guard, security headers, error shape) is base.ts's, shared with the readiness
// thread's port.

import type { FastifyInstance } from 'fastify';
import type { DumpAnalyzer } from '../collector/dump-analyzer.js';
import type { DumpService } from '../collector/dump-service.js';
import type { Logger } from '../collector/logger.js';
import type { Registry } from '../collector/registry.js';
import type { Store } from '../collector/store.js';
import { buildBase } from './base.js';
import { metricsRoutes, type MetricsOptions } from './metrics.js';
import { openApiRoute } from './openapi.js';
import { dumpRoutes } from './routes/dumps.js';
import { lifecycleRoutes } from './routes/lifecycle.js';
import { phaseRoutes } from './routes/phases.js';
import { streamRoute } from './stream.js';
import { sandboxRoutes } from './routes/sandboxes.js';
import { ErrorBody, Health } from './schemas.js';
import { serveDashboard } from './static.js';

export interface HttpOptions {
  registry: Registry;
  store: Store;
  dumps: DumpService;
  analyzer: DumpAnalyzer;
  log: Logger;
  token?: string;
  /** The API is bound to loopback: only loopback Host names are served (guard.ts). */
  loopbackOnly: boolean;
  dashboardDir: string;
  metrics: MetricsOptions;
}

export function buildHttp(opts: HttpOptions): FastifyInstance {
  const { app, api, routes } = buildBase(opts);
  api.get(
    '/healthz',
    {
      config: { access: 'public' },
      schema: { operationId: 'getHealth', summary: 'Liveness', response: { 200: Health, '4xx': ErrorBody } },
    },
    async () => ({ ok: true as const, sandboxes: opts.registry.sandboxes.size }),
  );
  api.register(sandboxRoutes, { registry: opts.registry, store: opts.store, dumps: opts.dumps });
  api.register(lifecycleRoutes, { registry: opts.registry });
  api.register(dumpRoutes, { registry: opts.registry, store: opts.store, dumps: opts.dumps, analyzer: opts.analyzer });
  api.register(phaseRoutes, { registry: opts.registry });
  metricsRoutes(app, opts.registry, opts.metrics);
  streamRoute(api, opts.registry, { loopbackOnly: opts.loopbackOnly, ...(opts.token ? { token: opts.token } : {}) });
  openApiRoute(api, routes);
  serveDashboard(app, opts.dashboardDir);
  return app;
}
