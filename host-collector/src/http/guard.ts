// Who may use the API, decided once per request before any route runs. The collector often
// runs as root and its API can create sockets and take dumps, so every check denies by default:
//
//   1. Host. Bound to loopback, only loopback Host values are served: a DNS-rebinding page
//      (evil.example resolving to 127.0.0.1) arrives with its own name and is refused.
//   2. Origin. A request a browser sends for another site's page carries that page's Origin
//      (or Sec-Fetch-Site: cross-site); every state-changing request and every stream upgrade
//      must come from the dashboard's own origin or from no browser at all (CLI, curl).
//   3. Body type. State-changing requests take application/json or no body: a cross-site
//      "simple" POST (text/plain, a form) is refused before any route reads it.
//   4. Token. With --token, every route needs `Authorization: Bearer <token>` unless it was
//      declared public (`config: { access: 'public' }`: /healthz, /v1/openapi.json and the dashboard's static
//      files). The decision is taken on the route the router matched, never on the raw URL, so
//      percent-encoding (/%761/sandboxes) or an absolute-form target (GET http://h/v1/…)
//      cannot reach a route around it. Requests that match no route need the token too.

import { timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import net from 'node:net';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from './errors.js';

export type RouteAccess = 'public' | 'token';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Who may call the route; absent means 'token' (when a token is configured). */
    access?: RouteAccess;
  }
}

export interface GuardOptions {
  /** The configured bearer token, if any. */
  token?: string;
  /** The API is bound to a loopback address: only loopback Host names are served. */
  loopbackOnly: boolean;
}

const STATE_CHANGING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Host header → host name without port ("[::1]:7070" → "::1"); null when malformed. */
export function hostName(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]+))(?::\d{1,5})?$/.exec(header);
  if (!m) return null;
  return (m[1] ?? m[2]!).toLowerCase();
}

export function isLoopbackName(name: string): boolean {
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  if (net.isIPv4(name)) return name.startsWith('127.');
  return name === '::1';
}

/**
 * Null when the request may go on; otherwise why not. Shared by the HTTP hook and the
 * WebSocket upgrade, which fastify's hooks never see.
 */
export function browserCheck(method: string, headers: IncomingHttpHeaders, opts: GuardOptions, upgrade = false): string | null {
  const host = hostName(headers.host);
  if (opts.loopbackOnly && (host === null || !isLoopbackName(host))) {
    return `Host "${String(headers.host ?? '').slice(0, 100)}" is not a loopback name (the collector is bound to loopback)`;
  }
  if (!upgrade && !STATE_CHANGING.has(method)) return null;
  if (headers['sec-fetch-site'] === 'cross-site') return 'cross-site requests are refused';
  const origin = headers.origin;
  if (origin !== undefined && !sameOrigin(origin, headers.host)) {
    return `Origin ${origin.slice(0, 100)} is not this collector's`;
  }
  return null;
}

function sameOrigin(origin: string, host: string | undefined): boolean {
  if (!host) return false;
  try {
    const u = new URL(origin);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.host.toLowerCase() === host.toLowerCase();
  } catch {
    return false; // "null" (a sandboxed frame, a file: page) and garbage alike
  }
}

/** The bearer token check, in constant time. */
export function hasToken(headers: IncomingHttpHeaders, token: string): boolean {
  const got = Buffer.from(headers.authorization ?? '');
  const want = Buffer.from(`Bearer ${token}`);
  return got.length === want.length && timingSafeEqual(got, want);
}

export function installGuard(app: FastifyInstance, opts: GuardOptions): void {
  app.addHook('onRequest', async (req: FastifyRequest) => {
    const refused = browserCheck(req.method, req.headers, opts);
    if (refused) throw new ApiError('FORBIDDEN', refused);
    if (STATE_CHANGING.has(req.method) && !jsonOrEmpty(req.headers)) {
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'request bodies must be application/json');
    }
    if (!opts.token) return;
    // routeOptions.config is the matched route's (the not-found handler's for no match).
    if (req.routeOptions.url !== undefined && req.routeOptions.config.access === 'public') return;
    if (!hasToken(req.headers, opts.token)) {
      throw new ApiError('UNAUTHORIZED', 'missing or wrong bearer token (Authorization: Bearer <token>)');
    }
  });
}

function jsonOrEmpty(headers: IncomingHttpHeaders): boolean {
  const type = headers['content-type'];
  if (type === undefined) return (headers['content-length'] ?? '0') === '0' && headers['transfer-encoding'] === undefined;
  return /^application\/json\s*(?:;|$)/i.test(type);
}
