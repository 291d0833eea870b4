// GET /v1/openapi.json: the API's OpenAPI 3.1 document, generated from the routes' own
// schemas (schemas.ts) as the router holds them, so it cannot drift from what is validated
// and served. docs/openapi.json is the same document, committed (regenerate it with
// `pnpm openapi`; host-collector/test/openapi.test.ts fails when the two differ).
//
// Public, like /healthz: it describes the API and holds no data, and client generators
// fetch it before they have a token. Routes marked `schema.hide` (the dashboard's pages and
// assets) are not part of the API and are left out.

import { Type } from 'typebox';
import { API_ERRORS } from '../catalogue.js';
import type { RouteEntry, RouteTable } from './route-table.js';
import type { Api } from './base.js';
import { StreamClientMessage } from './stream-messages.js';

/** The collector's version (also `vsockdiag --version`). */
export const API_VERSION = '0.1.0';

type Json = Record<string, unknown>;

/** Schemas that are components without a route naming them (the stream's client side). */
const EXTRA_COMPONENTS = [StreamClientMessage];

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Named schemas (those with a `title`) become components, referenced where they are used. */
class Components {
  readonly schemas: Record<string, Json> = {};

  /** The schema as the document shows it: its named parts (or itself) as $refs. */
  ref(schema: unknown): Json {
    return this.walk(schema) as Json;
  }

  private walk(v: unknown, top = false): unknown {
    if (Array.isArray(v)) return v.map((x) => this.walk(x));
    if (!isObject(v)) return v;
    const title = typeof v.title === 'string' ? v.title : null;
    if (title && !top) {
      if (!(title in this.schemas)) {
        this.schemas[title] = {}; // placeholder: a schema that contains itself stops here
        this.schemas[title] = this.walk(v, true) as Json;
      }
      return { $ref: `#/components/schemas/${title}` };
    }
    const out: Json = {};
    for (const [k, x] of Object.entries(v)) out[k] = k === 'properties' && isObject(x) ? this.props(x) : this.walk(x);
    return out;
  }

  private props(p: Json): Json {
    return Object.fromEntries(Object.entries(p).map(([k, x]) => [k, this.walk(x)]));
  }

  add(schema: unknown): void {
    this.walk(schema);
  }
}

const STATUS_TEXT: Record<string, string> = {
  '101': 'Switching Protocols',
  '200': 'OK',
  '201': 'Created',
  '204': 'No Content',
  '4XX': 'An error: its code in docs/codes.md',
  '5XX': 'An error: its code in docs/codes.md',
};

function responses(route: RouteEntry, c: Components): Json {
  const out: Json = {};
  for (const [status, spec] of Object.entries((route.schema.response ?? {}) as Record<string, unknown>)) {
    const key = status.toUpperCase();
    const given = isObject(spec) && isObject(spec.content) && spec.type === undefined ? spec : null;
    const description = (given?.description ?? (isObject(spec) ? spec.description : undefined) ?? STATUS_TEXT[key] ?? status) as string;
    if (key === '204') {
      out[key] = { description };
      continue;
    }
    const content = given
      ? Object.fromEntries(Object.entries(given.content as Json).map(([mime, m]) => [mime, { schema: c.ref((m as Json).schema) }]))
      : { 'application/json': { schema: c.ref(spec) } };
    out[key] = { description, content };
  }
  return out;
}

function parameters(route: RouteEntry, c: Components): Json[] {
  const out: Json[] = [];
  for (const [where, schema] of [
    ['path', route.schema.params],
    ['query', route.schema.querystring],
  ] as const) {
    if (!isObject(schema) || !isObject(schema.properties)) continue;
    const required = new Set((schema.required as string[] | undefined) ?? []);
    for (const [name, s] of Object.entries(schema.properties)) {
      const { description, ...rest } = s as Json;
      out.push({
        name,
        in: where,
        required: where === 'path' || required.has(name),
        ...(description !== undefined ? { description } : {}),
        schema: c.ref(rest),
      });
    }
  }
  return out;
}

export function openApiDocument(routes: readonly RouteEntry[]): Json {
  const c = new Components();
  const paths: Record<string, Json> = {};
  const visible = routes.filter((r) => r.method !== 'HEAD' && !r.schema.hide).sort((a, b) => a.url.localeCompare(b.url));
  for (const r of visible) {
    const path = r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const params = parameters(r, c);
    const op: Json = {
      operationId: r.schema.operationId,
      summary: r.schema.summary,
      ...(params.length ? { parameters: params } : {}),
      ...(r.schema.body
        ? { requestBody: { required: !r.config?.optionalBody, content: { 'application/json': { schema: c.ref(r.schema.body) } } } }
        : {}),
      responses: responses(r, c),
      // Public routes need no token; the others need it when the collector has one.
      ...(r.config?.access === 'public' ? { security: [] } : {}),
    };
    (paths[path] ??= {})[r.method.toLowerCase()] = op;
  }
  for (const s of EXTRA_COMPONENTS) c.add(s);
  return {
    openapi: '3.1.0',
    info: {
      title: 'vsockdiag collector API',
      version: API_VERSION,
      description:
        'Why a Firecracker sandbox is not ready, from the probe inside it. Errors are {"error": {"code", "message"}}; ' +
        `the codes (${Object.keys(API_ERRORS).length}) and their statuses are in docs/codes.md.`,
    },
    servers: [{ url: 'http://127.0.0.1:7070', description: 'the default --http' }],
    security: [{ bearerToken: [] }],
    paths,
    components: {
      schemas: Object.fromEntries(Object.entries(c.schemas).sort(([a], [b]) => a.localeCompare(b))),
      securitySchemes: {
        bearerToken: {
          type: 'http',
          scheme: 'bearer',
          description: 'the --token the collector was started with; without --token, no route needs one',
        },
      },
    },
  };
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route's body may be absent (it is then read as {}): the document says so. */
    optionalBody?: boolean;
  }
  interface FastifySchema {
    /** The OpenAPI operationId (every API route has one: openapi.test.ts). */
    operationId?: string;
    summary?: string;
    /** Not part of the API (the dashboard's pages): left out of the document. */
    hide?: boolean;
  }
}

export function openApiRoute(app: Api, routes: RouteTable): void {
  let doc: string | null = null;
  app.get(
    '/v1/openapi.json',
    {
      config: { access: 'public' },
      schema: {
        operationId: 'getOpenApi',
        summary: 'This document',
        // Sent as the text it was rendered to once.
        response: {
          200: { description: 'OpenAPI 3.1', content: { 'application/json': { schema: Type.Unsafe<string>({ type: 'object' }) } } },
        },
      },
    },
    // Built on first use: every route is in the table by then.
    async (_req, reply) => reply.type('application/json').send((doc ??= `${JSON.stringify(openApiDocument(routes.routes), null, 2)}\n`)),
  );
}
