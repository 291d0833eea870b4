// The schema kit: values are checked and rebuilt from known keys; a violation names its path.
import { describe, expect, it } from 'vitest';
import { ProtocolError } from '../src/errors.js';
import { array, int, object, optional, record, string, variant } from '../src/schema.js';

const point = object({ x: int({ min: 0 }), label: optional(string({ max: 4 })) });
const shape = variant(
  'kind',
  {
    line: object({ points: array(point, { max: 3 }) }),
    tag: object({ fields: record(int(), { maxKeys: 2, maxKeyLength: 8 }) }),
  },
  'ERR_UNKNOWN_KIND',
);
const message = object({ shapes: array(shape, { max: 4 }) });

function failure(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ProtocolError);
    return { code: (err as ProtocolError).code, message: (err as Error).message };
  }
  throw new Error('expected a violation');
}

describe('schema paths', () => {
  it('names the value itself "message"', () => {
    expect(failure(() => point.parse(5))).toEqual({ code: 'ERR_SCHEMA', message: 'message: expected map, got number' });
  });

  it('joins keys with dots and indices with brackets, however deep', () => {
    const bad = {
      shapes: [
        { kind: 'line', points: [] },
        { kind: 'line', points: [{ x: 1 }, { x: -1 }] },
      ],
    };
    expect(failure(() => message.parse(bad))).toEqual({
      code: 'ERR_SCHEMA',
      message: 'shapes[1].points[1].x: integer out of range [0, 9007199254740991]',
    });
    expect(failure(() => message.parse({ shapes: [{ kind: 'tag', fields: { a: 1, b: 'two' } }] })).message).toBe(
      'shapes[0].fields.b: expected integer, got string',
    );
    expect(failure(() => message.parse({ shapes: [{ kind: 'line', points: [{ x: 0, label: 'toolong' }] }] })).message).toBe(
      'shapes[0].points[0].label: string longer than 4',
    );
  });

  it('keeps the code of an unknown variant, with its path', () => {
    expect(failure(() => message.parse({ shapes: [{ kind: 'line', points: [] }, { kind: 'circle' }] }))).toEqual({
      code: 'ERR_UNKNOWN_KIND',
      message: 'shapes[1]: unknown kind "circle"',
    });
  });
});

describe('schema values', () => {
  it('rebuilds objects from known keys only, dropping unknown ones and nil optionals', () => {
    const input = JSON.parse('{"x": 3, "label": null, "extra": 1, "__proto__": {"polluted": true}}') as unknown;
    const out = point.parse(input);
    expect(out).toEqual({ x: 3 });
    expect(Object.keys(out)).toEqual(['x']);
    expect(({} as { polluted?: boolean }).polluted).toBeUndefined();
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
  });

  it('passes errors that are not violations through unchanged', () => {
    const boom = new RangeError('boom');
    const exploding = object({
      a: {
        parse: () => {
          throw boom;
        },
      },
    });
    expect(() => object({ inner: exploding }).parse({ inner: { a: 1 } })).toThrow(boom);
  });
});
