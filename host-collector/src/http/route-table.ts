// Every route as it was added (method, URL pattern, schema, config): what the 405 answer
// looks up (fastify's router answers a path it knows under another method with its
// not-found handler, which alone cannot tell "no such route" from "not with this method"),
// and what docs/openapi.json is generated from (openapi.ts).

import type { FastifyInstance, FastifySchema, RouteOptions } from 'fastify';

export interface RouteEntry {
  method: string;
  url: string;
  schema: FastifySchema & { summary?: string; hide?: boolean };
  config: RouteOptions['config'];
  pattern: RegExp;
}

/** A route's URL pattern as a RegExp over the raw path: `:param` is one segment, `*` the rest. */
function patternOf(url: string): RegExp {
  const body = url
    .split('/')
    .map((seg) => (seg.startsWith(':') ? '[^/]+' : seg === '*' ? '.*' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return new RegExp(`^${body}$`);
}

export class RouteTable {
  readonly routes: RouteEntry[] = [];

  constructor(app: FastifyInstance) {
    app.addHook('onRoute', (route) => {
      for (const method of Array.isArray(route.method) ? route.method : [route.method]) {
        this.routes.push({
          method: String(method),
          url: route.url,
          schema: route.schema ?? {},
          config: route.config,
          pattern: patternOf(route.url),
        });
      }
    });
  }

  /** The methods some route has for this path (sorted; empty when no route has it). */
  allowed(pathname: string): string[] {
    return [...new Set(this.routes.filter((r) => r.pattern.test(pathname)).map((r) => r.method))].sort();
  }
}
