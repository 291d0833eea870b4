// Stable error codes for everything that can be wrong with bytes from a peer. Like ws's
// WS_ERR_* codes they are part of the interface: logs, metrics and tests match on them.

export const PROTOCOL_ERROR_CODES = {
  ERR_FRAME_TOO_LARGE: 'a length prefix exceeds the frame size limit',
  ERR_FRAME_EMPTY: 'a length prefix of zero',
  ERR_TRUNCATED: 'the stream ended in the middle of a frame',
  ERR_MSGPACK: 'a frame body is not valid msgpack',
  ERR_UNKNOWN_TYPE: 'a message type this side does not know',
  ERR_UNKNOWN_KIND: 'an event kind this side does not know',
  ERR_SCHEMA: 'a message that does not match its schema',
  ERR_VERSION: 'an unsupported protocol version',
  ERR_UNEXPECTED: 'a valid message at the wrong moment (e.g. events before hello)',
  ERR_RATE_LIMIT: 'the peer sent more than its budget allows',
  ERR_IDLE: 'the peer stayed silent past the idle timeout',
} as const;

export type ProtocolErrorCode = keyof typeof PROTOCOL_ERROR_CODES;

export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
  constructor(
    readonly code: ProtocolErrorCode,
    message: string,
  ) {
    super(message);
  }
}
