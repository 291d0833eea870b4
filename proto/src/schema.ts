// A deliberately small schema kit: one declaration per message gives both the runtime
// check (for bytes from an untrusted guest) and the TypeScript type (via Infer<>).
// It has no dependency so the guest bundle stays tiny. Every string, array and map has
// a required upper bound: nothing decoded from the wire is unbounded.
//
// parse() returns a fresh value built only from known keys, so unknown keys (and any
// "__proto__" a peer might send) never reach the rest of the program.
//
// A violation's message names where it is ("events[3].pid: expected integer"). That path is
// put together while the error unwinds, not on the way in: valid messages, which is nearly
// all of them, build no path strings (the collector parses thousands a second).

import type { ProtocolErrorCode } from './codes.js';
import { ProtocolError } from './errors.js';

export interface Schema<T> {
  parse(value: unknown): T;
}

/** Marks an object key as optional; see object(). */
export interface OptionalSchema<T> extends Schema<T | undefined> {
  readonly optional: true;
}

export type Infer<S> = S extends Schema<infer T> ? T : never;

type Shape = Record<string, Schema<unknown>>;
type OptionalKeys<S extends object> = { [K in keyof S]: S[K] extends OptionalSchema<unknown> ? K : never }[keyof S];
type RequiredKeys<S extends object> = Exclude<keyof S, OptionalKeys<S>>;
type Simplify<T> = { [K in keyof T]: T[K] } & {};
export type ObjectOf<S extends object> = Simplify<
  { [K in RequiredKeys<S>]: Infer<S[K]> } & { [K in OptionalKeys<S>]?: Exclude<Infer<S[K]>, undefined> }
>;

type SchemaErrorCode = Extract<ProtocolErrorCode, 'ERR_SCHEMA' | 'ERR_UNKNOWN_TYPE' | 'ERR_UNKNOWN_KIND'>;

/** A violation at `at` (a path like "events[3].pid", '' for the value itself). */
class SchemaError extends ProtocolError {
  constructor(
    code: SchemaErrorCode,
    readonly at: string,
    readonly problem: string,
  ) {
    super(code, `${at || 'message'}: ${problem}`);
  }
}

function fail(problem: string, code: SchemaErrorCode = 'ERR_SCHEMA'): never {
  throw new SchemaError(code, '', problem);
}

/** Re-throws a violation found inside `step` (a key, or "[i]") with the step in its path. */
function inside(step: string, err: unknown): never {
  if (!(err instanceof SchemaError)) throw err;
  const at = err.at === '' ? step : err.at.startsWith('[') ? step + err.at : `${step}.${err.at}`;
  throw new SchemaError(err.code as SchemaErrorCode, at, err.problem);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (value instanceof Uint8Array) return 'bytes';
  return typeof value;
}

export function string(opts: { max: number; min?: number }): Schema<string> {
  return {
    parse(v) {
      if (typeof v !== 'string') fail(`expected string, got ${describe(v)}`);
      if (v.length > opts.max) fail(`string longer than ${opts.max}`);
      if (opts.min !== undefined && v.length < opts.min) fail(`string shorter than ${opts.min}`);
      return v;
    },
  };
}

/** Raw bytes (msgpack bin), bounded. */
export function bytes(opts: { max: number }): Schema<Uint8Array> {
  return {
    parse(v) {
      if (!(v instanceof Uint8Array)) fail(`expected bytes, got ${describe(v)}`);
      if (v.length > opts.max) fail(`more than ${opts.max} bytes`);
      return v;
    },
  };
}

export function int(opts: { min?: number; max?: number } = {}): Schema<number> {
  const min = opts.min ?? Number.MIN_SAFE_INTEGER;
  const max = opts.max ?? Number.MAX_SAFE_INTEGER;
  return {
    parse(v) {
      if (typeof v !== 'number' || !Number.isInteger(v)) fail(`expected integer, got ${describe(v)}`);
      if (v < min || v > max) fail(`integer out of range [${min}, ${max}]`);
      return v;
    },
  };
}

export function number(opts: { min?: number; max?: number } = {}): Schema<number> {
  const min = opts.min ?? -Number.MAX_VALUE;
  const max = opts.max ?? Number.MAX_VALUE;
  return {
    parse(v) {
      if (typeof v !== 'number' || !Number.isFinite(v)) fail(`expected finite number, got ${describe(v)}`);
      if (v < min || v > max) fail(`number out of range [${min}, ${max}]`);
      return v;
    },
  };
}

export function boolean(): Schema<boolean> {
  return {
    parse(v) {
      if (typeof v !== 'boolean') fail(`expected boolean, got ${describe(v)}`);
      return v;
    },
  };
}

export function oneOf<const V extends readonly string[]>(values: V): Schema<V[number]> {
  const allowed = new Set<string>(values);
  return {
    parse(v) {
      if (typeof v !== 'string' || !allowed.has(v)) fail(`expected one of ${values.join(', ')}`);
      return v as V[number];
    },
  };
}

/** A schema made when it first parses: for self-reference (a keyframe holds a status), and so
 *  that each side builds only what it reads (the probe never parses a hello, and builds the
 *  schemas it does need after its own hello is out). */
export function lazy<T>(make: () => Schema<T>): Schema<T> {
  let made: Schema<T> | undefined;
  return { parse: (v) => (made ??= make()).parse(v) };
}

export function nullable<T>(inner: Schema<T>): Schema<T | null> {
  return { parse: (v) => (v === null ? null : inner.parse(v)) };
}

export function optional<T>(inner: Schema<T>): OptionalSchema<T> {
  return {
    optional: true,
    // msgpack has no undefined: a peer may send nil for an absent optional value.
    parse: (v) => (v === undefined || v === null ? undefined : inner.parse(v)),
  };
}

export function array<T>(item: Schema<T>, opts: { max: number }): Schema<T[]> {
  return {
    parse(v) {
      if (!Array.isArray(v)) fail(`expected array, got ${describe(v)}`);
      if (v.length > opts.max) fail(`array longer than ${opts.max}`);
      const out: T[] = new Array(v.length);
      for (let i = 0; i < v.length; i++) {
        try {
          out[i] = item.parse(v[i]);
        } catch (err) {
          inside(`[${i}]`, err);
        }
      }
      return out;
    },
  };
}

/** A string-keyed map with bounded size and key length (e.g. free-form notify fields). */
export function record<T>(value: Schema<T>, opts: { maxKeys: number; maxKeyLength: number }): Schema<Record<string, T>> {
  return {
    parse(v) {
      if (!isPlainObject(v)) fail(`expected map, got ${describe(v)}`);
      const keys = Object.keys(v);
      if (keys.length > opts.maxKeys) fail(`more than ${opts.maxKeys} keys`);
      const out: Record<string, T> = Object.create(null);
      for (const key of keys) {
        if (key.length > opts.maxKeyLength) fail(`key longer than ${opts.maxKeyLength}`);
        try {
          out[key] = value.parse(v[key]);
        } catch (err) {
          inside(key, err);
        }
      }
      return out;
    },
  };
}

export function object<S extends Shape>(shape: S): Schema<ObjectOf<S>> {
  const entries = Object.entries(shape);
  return {
    parse(v) {
      if (!isPlainObject(v)) fail(`expected map, got ${describe(v)}`);
      const out: Record<string, unknown> = {};
      for (const [key, schema] of entries) {
        let parsed: unknown;
        try {
          parsed = schema.parse(Object.hasOwn(v, key) ? v[key] : undefined);
        } catch (err) {
          inside(key, err);
        }
        if (parsed !== undefined) out[key] = parsed;
      }
      return out as ObjectOf<S>;
    },
  };
}

/**
 * A tagged union: the value of `tag` picks the schema. An unknown tag is its own error
 * code so a newer peer's message is told apart from a malformed one.
 */
export function variant<K extends string, M extends Record<string, Schema<object>>>(
  tag: K,
  members: M,
  unknownCode: Exclude<SchemaErrorCode, 'ERR_SCHEMA'>,
): Schema<{ [T in keyof M]: Infer<M[T]> & { [P in K]: T } }[keyof M]> {
  return {
    parse(v) {
      if (!isPlainObject(v)) fail(`expected map, got ${describe(v)}`);
      const name = v[tag];
      if (typeof name !== 'string') fail(`missing "${tag}"`);
      if (!Object.hasOwn(members, name)) fail(`unknown ${tag} ${JSON.stringify(name.slice(0, 64))}`, unknownCode);
      const parsed = members[name]!.parse(v) as Record<string, unknown>;
      parsed[tag] = name;
      return parsed as never;
    },
  };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}
