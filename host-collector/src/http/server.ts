// The HTTP face of the collector: JSON API, dashboard, health. Request lifecycle:
// auth hook (bearer token when one is configured) → route → JSON reply, or the error
// handler's {"error": {"code", "message"}}.

import { timingSafeEqual } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import type { Logger } from '../collector/logger.js';
import type { Registry } from '../collector/registry.js';
import type { Store } from '../collector/store.js';
import { ApiError } from './errors.js';
import { sandboxRoutes } from './routes/sandboxes.js';
import { serveDashboard } from './static.js';

export interface HttpOptions {
  registry: Registry;
  store: Store;
  log: Logger;
  token?: string;
  dashboardDir: string;
}

export function buildHttp(opts: HttpOptions): FastifyInstance {
  const app = Fastify({
    loggerInstance: opts.log as FastifyBaseLogger,
    disableRequestLogging: true,
    bodyLimit: 64 * 1024,
  }) as unknown as FastifyInstance;

  if (opts.token) {
    const expected = Buffer.from(`Bearer ${opts.token}`);
    app.addHook('onRequest', async (req: FastifyRequest) => {
      if (!req.url.startsWith('/v1/') && !req.url.startsWith('/metrics')) return;
      const got = Buffer.from(req.headers.authorization ?? '');
      if (got.length !== expected.length || !timingSafeEqual(got, expected)) {
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
  serveDashboard(app, opts.dashboardDir);
  return app;
}
