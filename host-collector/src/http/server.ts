// The HTTP face of the collector: JSON API, dashboard, health. Request lifecycle:
// auth hook (bearer token when one is configured) → route → JSON reply, or the error
// handler's {"error": {"code", "message"}}.

import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { DumpAnalyzer } from '../collector/dump-analyzer.js';
import type { DumpService } from '../collector/dump-service.js';
import type { Logger } from '../collector/logger.js';
import type { Registry } from '../collector/registry.js';
import type { Store } from '../collector/store.js';
import { sameToken } from './auth.js';
import { ApiError } from './errors.js';
import { metricsRoutes } from './metrics.js';
import { dumpRoutes } from './routes/dumps.js';
import { phaseRoutes } from './routes/phases.js';
import { streamRoute } from './stream.js';
import { sandboxRoutes } from './routes/sandboxes.js';
import { serveDashboard } from './static.js';

export interface HttpOptions {
  registry: Registry;
  store: Store;
  dumps: DumpService;
  analyzer: DumpAnalyzer;
  log: Logger;
  token?: string;
  dashboardDir: string;
}

export function buildHttp(opts: HttpOptions): FastifyInstance {
  const app = Fastify({
    loggerInstance: opts.log as FastifyBaseLogger,
    // Per-request log lines would drown the collector's own at hundreds of requests a second.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 64 * 1024,
    // Sandbox ids may be 128 characters (SANDBOX_ID_PATTERN); the router's default limit of
    // 100 answered valid longer ids with 414 before any route ran.
    routerOptions: { maxParamLength: 256 },
    // Errors the router raises before any route (bad percent-encoding, an overlong
    // parameter) bypass setErrorHandler: keep them in the API's error shape too.
    frameworkErrors: (err, _req, reply) => {
      void (reply as FastifyReply).code(err.statusCode ?? 400).send({ error: { code: 'BAD_REQUEST', message: err.message } });
    },
  }) as unknown as FastifyInstance;

  if (opts.token) {
    const expected = `Bearer ${opts.token}`;
    app.addHook('onRequest', async (req: FastifyRequest) => {
      if (!req.url.startsWith('/v1/') && !req.url.startsWith('/metrics')) return;
      if (!sameToken(req.headers.authorization ?? '', expected)) {
        throw new ApiError('UNAUTHORIZED', 'missing or wrong bearer token (Authorization: Bearer <token>)');
      }
    });
  }

  app.setErrorHandler((err, _req, reply) => {
    if (err instanceof ApiError) return reply.code(err.status).send({ error: { code: err.code, message: err.message } });
    const status = (err as { statusCode?: number }).statusCode;
    if (status && status >= 400 && status < 500) {
      return reply.code(status).send({ error: { code: 'BAD_REQUEST', message: (err as Error).message } });
    }
    opts.log.error({ err }, 'request failed');
    return reply.code(500).send({ error: { code: 'INTERNAL', message: 'internal error' } });
  });
  app.setNotFoundHandler((req, reply) =>
    reply.code(404).send({ error: { code: 'NOT_FOUND', message: `no route ${req.method} ${req.url.split('?')[0]}` } }),
  );

  app.get('/healthz', async () => ({ ok: true, sandboxes: opts.registry.sandboxes.size }));
  app.register(sandboxRoutes, { registry: opts.registry, store: opts.store });
  app.register(dumpRoutes, { registry: opts.registry, store: opts.store, dumps: opts.dumps, analyzer: opts.analyzer });
  app.register(phaseRoutes, { registry: opts.registry });
  metricsRoutes(app, opts.registry);
  streamRoute(app, opts.registry, opts.token);
  serveDashboard(app, opts.dashboardDir);
  return app;
}
