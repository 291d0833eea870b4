// The error for everything that can be wrong with bytes from a peer. Its codes, and what
// each means, are in codes.ts.

import type { ProtocolErrorCode } from './codes.js';

export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
  constructor(
    readonly code: ProtocolErrorCode,
    message: string,
  ) {
    super(message);
  }
}
