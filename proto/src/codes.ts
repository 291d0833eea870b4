// The codes both sides share, each defined once with its meaning: why a probe ↔ collector
// connection was closed, why an address could not be used, and the dump vocabulary (modes
// asked for, sources answered with).
// They live in proto/ because the guest and the host both speak them; codes only one side
// uses live on that side (the collector's in host-collector/src/catalogue.ts).
//
// This module imports nothing, so the dashboard may bundle it (see the trust boundary test),
// and docs/codes.md lists every entry: host-collector/test/catalogue-docs.test.ts fails when
// the two differ.

/** Who a close code blames, as seen by the side that closes: `peer` sent something it must
 *  not; `link` means nothing wrong was sent, the connection went quiet or was cut; `local`
 *  is this side's own failure. A collector cools a sandbox down only for `peer`. */
export type CloseCause = 'peer' | 'link' | 'local';

/** Why a connection was closed. Like ws's WS_ERR_* codes they are part of the interface:
 *  logs, the session history, metrics and tests match on them. */
export const PROTOCOL_ERROR_CODES = {
  ERR_FRAME_TOO_LARGE: { cause: 'peer', meaning: 'a length prefix exceeds the frame size limit' },
  ERR_FRAME_EMPTY: { cause: 'peer', meaning: 'a length prefix of zero' },
  ERR_TRUNCATED: { cause: 'link', meaning: 'the stream ended in the middle of a frame' },
  ERR_MSGPACK: { cause: 'peer', meaning: 'a frame body is not valid msgpack, or is nested too deep' },
  ERR_UNKNOWN_TYPE: { cause: 'peer', meaning: 'a message type this side does not know' },
  ERR_UNKNOWN_KIND: { cause: 'peer', meaning: 'an event kind this side does not know' },
  ERR_SCHEMA: { cause: 'peer', meaning: 'a message that does not match its schema' },
  ERR_VERSION: { cause: 'peer', meaning: 'an unsupported protocol version' },
  ERR_UNEXPECTED: { cause: 'peer', meaning: 'a valid message at the wrong moment (e.g. events before hello, no hello in time)' },
  ERR_RATE_LIMIT: { cause: 'peer', meaning: 'the peer sent more than its budget allows' },
  ERR_IDLE: { cause: 'link', meaning: 'the peer stayed silent past the idle timeout' },
  ERR_STORE: { cause: 'local', meaning: 'the collector could not commit the events it received (none were acked)' },
  ERR_INTERNAL: { cause: 'local', meaning: 'this side failed while handling a valid message' },
} as const satisfies Record<string, { cause: CloseCause; meaning: string }>;

export type ProtocolErrorCode = keyof typeof PROTOCOL_ERROR_CODES;

/** Why an address (a flag, a setting) cannot be used: raised before any connection exists. */
export const ADDRESS_ERROR_CODES = {
  ERR_BAD_ADDRESS: { meaning: 'not an address: one of `vsock:CID:PORT`, `unix:PATH` or `tcp:HOST:PORT`, in range' },
  ERR_VSOCK_UNAVAILABLE: { meaning: "a vsock address in a process without the probe's native vsock addon" },
} as const satisfies Record<string, { meaning: string }>;

export type AddressErrorCode = keyof typeof ADDRESS_ERROR_CODES;

/** What a dump asks for (the `mode` of a dump command, the API and `vsockdiag dump`). The
 *  dashboard shows these meanings as they are, so they are plain text, not markdown. */
export const DUMP_MODE_INFO = {
  threads: { meaning: 'every task of the target: state, wait channel, syscall and kernel stack, from /proc (harmless)' },
  goroutines: { meaning: "a Go dump: the target's pprof page or its memory (harmless), or SIGQUIT when destructive (ends the target)" },
  native: { meaning: 'native stacks by gdb, else eu-stack (both stop the target briefly)' },
} as const satisfies Record<string, { meaning: string }>;

export type DumpMode = keyof typeof DUMP_MODE_INFO;
export const DUMP_MODES = Object.keys(DUMP_MODE_INFO) as readonly DumpMode[];

/** How the probe took a dump (the `source` of its answer). */
export const DUMP_SOURCE_INFO = {
  proc: { meaning: "the target's `/proc` (threads)" },
  pprof: { meaning: "the target's goroutine pprof page (`--pprof-url`)" },
  memory: { meaning: "read from the target's memory, the target neither stopped nor signalled" },
  sigquit: { meaning: "the Go runtime's own traceback, printed on SIGQUIT as the target exits" },
  gdb: { meaning: 'gdb attached to the target' },
  'eu-stack': { meaning: "elfutils' eu-stack attached to the target" },
  none: { meaning: 'no dump was taken (the answer carries the error)' },
} as const satisfies Record<string, { meaning: string }>;

export type DumpSource = keyof typeof DUMP_SOURCE_INFO;
export const DUMP_SOURCES = Object.keys(DUMP_SOURCE_INFO) as readonly DumpSource[];
