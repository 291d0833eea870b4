// How requests are checked against the routes' schemas (schemas.ts). Paths and query
// strings are text, so they are read as the schema's types ("5" → 5; "1.5" is no integer and
// fails). Bodies are JSON and taken as they are: no coercion ({"udsPath": 7} is not a path,
// {"destructive": "yes"} no boolean), no defaults filled in, and unknown fields refused where
// a schema says so: a body either is what the route declares or the answer is 400.

import { Ajv, type ErrorObject } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

function ajv(coerce: boolean): Ajv {
  // strict: false: the schemas carry OpenAPI's words (title, description) beside JSON Schema's.
  const a = new Ajv({ coerceTypes: coerce ? 'array' : false, useDefaults: false, allErrors: false, strict: false });
  addFormats.default(a);
  return a;
}

const forText = ajv(true);
const forBody = ajv(false);

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) =>
  (httpPart === 'body' ? forBody : forText).compile(schema as object);

/** "querystring/state must be one of: registered, booting, …": the failed rule, with the
 *  values it allows when it is an enum. */
export function schemaErrorMessage(errors: ErrorObject[], dataVar: string): string {
  return errors
    .map((e) => {
      const allowed = (e.params as { allowedValues?: unknown[] }).allowedValues;
      const what = `${dataVar}${e.instancePath}`;
      return allowed ? `${what} must be one of: ${allowed.join(', ')}` : `${what} ${e.message ?? 'is not valid'}`;
    })
    .join('; ');
}
