// What every HTTP face of the collector shares: the request lifecycle of the API (the main
// one, http/server.ts, and the readiness thread's, readiness/worker.ts). A request passes the
// guard (Host, Origin, body type, then the bearer token by the matched route: guard.ts), then
// its route, and gets a JSON reply with the security headers, or the error shape
// {"error": {"code", "message"}} (errors.ts) from the error and not-found handlers.

import type net from 'node:net';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ErrorObject } from 'ajv';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type RawReplyDefaultExpression,
  type RawRequestDefaultExpression,
  type RawServerDefault,
} from 'fastify';
import type { Logger } from '../collector/logger.js';
import { ApiError, errorBody, errorCodeFor } from './errors.js';
import { installGuard } from './guard.js';
import { RouteTable } from './route-table.js';
import { schemaErrorMessage, validatorCompiler } from './validation.js';

export interface BaseOptions {
  log: Logger;
  token?: string;
  /** Bound to loopback: only loopback Host names are served (guard.ts). */
  loopbackOnly: boolean;
}

/** Request bodies are small JSON objects; a larger one is a 413 PAYLOAD_TOO_LARGE. */
export const BODY_LIMIT_BYTES = 64 * 1024;

/** Sent with every answer: the dashboard may not be framed (its destructive-dump checkbox
 *  must not be clickjacked) and runs only its own scripts; nothing is sniffed into HTML. */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin',
} as const;

/** The app every route module is given: route types come from their TypeBox schemas. */
export type Api = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** A fastify app with the shared lifecycle and no routes yet; `routes` sees every route added. */
export function buildBase(opts: BaseOptions): { app: FastifyInstance; api: Api; routes: RouteTable } {
  const app = Fastify({
    loggerInstance: opts.log as FastifyBaseLogger,
    // Per-request log lines would drown the collector's own at hundreds of requests a second.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: BODY_LIMIT_BYTES,
    // On close, end the connections still open: a client that stops reading a large answer
    // (a dashboard asset, a dump's text) otherwise keeps the collector from exiting on SIGTERM.
    forceCloseConnections: true,
    schemaErrorFormatter: (errors, dataVar) => new Error(schemaErrorMessage(errors as ErrorObject[], dataVar)),
    // Sandbox ids may be 128 characters (SANDBOX_ID_PATTERN); the router's default limit of
    // 100 answered valid longer ids with 414 before any route ran.
    routerOptions: { maxParamLength: 256 },
    // Errors the router raises before any route (bad percent-encoding, an overlong
    // parameter) bypass setErrorHandler: keep them in the API's error shape too.
    frameworkErrors: (err, _req, reply) => {
      void (reply as FastifyReply).code(err.statusCode ?? 400).send(errorBody('BAD_REQUEST', err.message));
    },
  }) as unknown as FastifyInstance;
  app.setValidatorCompiler(validatorCompiler);
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  const routes = new RouteTable(app);

  // Only JSON bodies are read: a cross-site "simple" POST (text/plain) never reaches a route.
  app.removeContentTypeParser('text/plain');
  app.addHook('onRequest', async (_req: FastifyRequest, reply: FastifyReply) => {
    reply.headers(SECURITY_HEADERS);
  });
  installGuard(app, { loopbackOnly: opts.loopbackOnly, ...(opts.token ? { token: opts.token } : {}) });

  app.setErrorHandler((err, _req, reply) => {
    if (err instanceof ApiError) return reply.code(err.status).send(errorBody(err.code, err.message));
    // fastify's own refusals: a body or parameter that fails the route's schema (400), a
    // body over bodyLimit (413), a content type no parser takes (415).
    const status = (err as { statusCode?: number }).statusCode;
    if (status && status >= 400 && status < 500) {
      const code = errorCodeFor(status);
      return reply.code(code === 'BAD_REQUEST' ? 400 : status).send(errorBody(code, (err as Error).message));
    }
    opts.log.error({ err }, 'request failed');
    return reply.code(500).send(errorBody('INTERNAL', 'internal error'));
  });
  app.setNotFoundHandler((req, reply) => {
    const pathname = req.url.split('?')[0]!;
    const allowed = routes.allowed(pathname);
    if (allowed.length > 0) {
      return reply
        .code(405)
        .header('allow', allowed.join(', '))
        .send(
          errorBody('METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${pathname.slice(0, 300)} (allowed: ${allowed.join(', ')})`),
        );
    }
    return reply.code(404).send(errorBody('NOT_FOUND', `no route ${req.method} ${pathname.slice(0, 300)}`));
  });
  return { app, api, routes };
}

/** The URL a listening server is reached at ("http://[::1]:7070"). */
export function urlOf(addr: net.AddressInfo): string {
  return `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
}
