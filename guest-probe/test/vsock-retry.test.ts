import { describe, expect, it } from 'vitest';

import { isRetryable } from '../src/vsock/backend.js';

const withCode = (code: string) => Object.assign(new Error(code), { code });

describe('isRetryable', () => {
  it.each(['ECONNRESET', 'ETIMEDOUT', 'ENODEV', 'ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EAGAIN'])('%s is retryable', (code) =>
    expect(isRetryable(withCode(code))).toBe(true),
  );

  it.each([
    'EINVAL',
    'EAFNOSUPPORT',
    'EACCES',
    'EPERM',
    'EADDRINUSE',
    'ENOENT',
    'ERR_INVALID_ARG_VALUE',
    'ERR_INVALID_ARG_TYPE',
    'UNKNOWN',
  ])('%s is fatal', (code) => expect(isRetryable(withCode(code))).toBe(false));

  it('is false for values without a string code', () => {
    for (const v of [undefined, null, 'ECONNRESET', 42, new Error('ECONNRESET'), { code: 104 }]) expect(isRetryable(v)).toBe(false);
  });

  it('accepts plain objects with a code, like the addon errors', () => {
    expect(isRetryable({ code: 'ETIMEDOUT' })).toBe(true);
  });
});
