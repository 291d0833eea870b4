// Checks real answers against the committed docs/openapi.json: finds the operation a
// request matched (by method and the document's path templates), the response the status
// falls under (exact, or 4XX/5XX), and validates the body with Ajv's JSON Schema 2020-12
// validator, the dialect OpenAPI 3.1 uses. So a field the collector sends but the document
// does not describe (or describes otherwise) fails an API test.

import fs from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { expect } from 'vitest';

export const OPENAPI_FILE = new URL('../../../docs/openapi.json', import.meta.url);

type Json = Record<string, any>;

export interface OpenApi {
  doc: Json;
  /** The operation for a request, or null when the document has none. */
  operation(method: string, pathname: string): { template: string; op: Json } | null;
  /** Fails the test unless the answer is one the document declares, with a body it allows. */
  expectValid(method: string, url: string, status: number, contentType: string | null, body: unknown): void;
  /** Fails the test unless `value` matches the named component (#/components/schemas/NAME). */
  expectComponent(name: string, value: unknown): void;
}

const pointer = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

export function loadOpenApi(): OpenApi {
  const doc = JSON.parse(fs.readFileSync(OPENAPI_FILE, 'utf8')) as Json;
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  // The document itself is the schema every $ref (#/components/schemas/…) points into.
  ajv.addSchema(doc, 'openapi');
  const templates = Object.keys(doc.paths as Json).map((t) => ({
    t,
    re: new RegExp(`^${t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+')}$`),
  }));
  const check = (ref: string, value: unknown, what: string) => {
    const validate = ajv.getSchema(`openapi#${ref}`);
    expect(validate, `no schema at ${ref}`).toBeTypeOf('function');
    const ok = validate!(value);
    expect(ok, `${what}: ${ajv.errorsText(validate!.errors)}\n${JSON.stringify(value).slice(0, 600)}`).toBe(true);
  };
  const api: OpenApi = {
    doc,
    operation(method, pathname) {
      const found = templates.find(({ re }) => re.test(pathname));
      const op = found ? (doc.paths[found.t] as Json)[method.toLowerCase()] : undefined;
      return found && op ? { template: found.t, op } : null;
    },
    expectValid(method, url, status, contentType, body) {
      const pathname = new URL(url, 'http://x').pathname;
      const found = api.operation(method, pathname);
      expect(found, `${method} ${pathname} is not in docs/openapi.json`).not.toBeNull();
      const responses = found!.op.responses as Json;
      const key = [String(status), `${String(status)[0]}XX`].find((k) => k in responses);
      expect(key, `${method} ${found!.template} does not declare a ${status} answer`).toBeDefined();
      const declared = (responses[key!] as Json).content as Json | undefined;
      if (!declared) return void expect(body === '' || body === null || body === undefined, `${status} should have no body`).toBe(true);
      const mime = (contentType ?? '').split(';')[0]!.trim();
      expect(Object.keys(declared), `${method} ${found!.template} ${status} as ${mime}`).toContain(mime);
      if (mime !== 'application/json') return void expect(typeof body).toBe('string');
      const ref = `/paths/${pointer(found!.template)}/${method.toLowerCase()}/responses/${key}/content/${pointer(mime)}/schema`;
      check(ref, body, `${method} ${pathname} ${status}`);
    },
    expectComponent(name, value) {
      check(`/components/schemas/${name}`, value, name);
    },
  };
  return api;
}
