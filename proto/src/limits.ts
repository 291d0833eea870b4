// Every limit and default that both sides must agree on lives here, once.

export const PROTOCOL_VERSION = 1;

/** Largest frame body either side accepts. Checked on the length prefix, before decoding. */
export const MAX_FRAME_BYTES = 1024 * 1024;
/** Largest frame body accepted before the peer's hello: a connection that has not said who
 *  it is may not make the collector buffer a whole MAX_FRAME_BYTES. The largest hello the
 *  schema allows is about 35 KiB (status keyframe with every text at MAX_TEXT in 3-byte
 *  UTF-8), so an honest hello always fits. */
export const MAX_HELLO_FRAME_BYTES = 64 * 1024;
/** Deepest nesting of arrays and maps a frame body may have (the outermost map is 1). The
 *  deepest valid message has 7: events → event → keyframe status → sockets → top → entry.
 *  Checked before decoding, so a deeply nested frame costs next to nothing to refuse. */
export const MAX_NESTING_DEPTH = 16;
/** Length prefix size: 4-byte big-endian unsigned body length. */
export const FRAME_HEADER_BYTES = 4;

export const MAX_EVENTS_PER_BATCH = 256;
/** Bound for free text from the guest (status lines, reasons, log lines). */
export const MAX_TEXT = 4096;
/** Bound for names (phases, processes, keys). */
export const MAX_NAME = 256;
/** Free-form fields of a phase marker: how many, and how long a key may be. */
export const MAX_FIELDS = 64;
export const MAX_FIELD_KEY = 64;
/** Log lines (wrap mode, followed logs) are cut to this many characters… */
export const MAX_LOG_LINE = 2048;
/** …and sent at most this many per batch (about one batch a second). */
export const MAX_LOG_LINES_PER_BATCH = 200;
/** sd_notify datagrams above this are rejected (systemd uses the same order of size). The addon
 *  enforces it in C: guest-probe/native/src/notify.h has the same number (a test checks). */
export const MAX_NOTIFY_DATAGRAM = 4096;

/** Dumps travel in chunks of at most this many bytes… */
export const DUMP_CHUNK_BYTES = 256 * 1024;
/** …and are cut (marked incomplete) beyond this size. A 10,000-goroutine Go dump is ~10 MB. */
export const MAX_DUMP_BYTES = 64 * 1024 * 1024;

/** Each side sends a heartbeat after this long with nothing else sent (any frame proves it is
 *  alive), and checks the other's silence as often. Two and a half of them fit in the idle
 *  timeout. Not one a second: a settled probe sends an events batch every few seconds, so
 *  heartbeats were most of the link's frames both ways, and each is a wake-up of the guest
 *  and a write on the collector for every sandbox (issue 17: the probe's CPU at 1 Hz). */
export const HEARTBEAT_INTERVAL_MS = 2000;
/** Silence longer than this means the link is dead even if no socket error surfaced
 *  (a snapshot's transport reset may never reach the guest as an error). */
export const IDLE_TIMEOUT_MS = 5000;

export const DEFAULTS = {
  vsockPort: 52000,
  probePort: 52001,
  target: 'envd',
  expectPort: 49983,
  http: '127.0.0.1:7070',
  dataDir: './data',
  stallAfterMs: 5000,
  startDeadlineMs: 30000,
  /** Sampling period once the target is ready (the probe's --interval). */
  intervalMs: 1000,
  /** Sampling period until the target is ready: bind time known to within 50 ms. */
  bootIntervalMs: 40,
  /** Sampling period of a boot still not ready once its fast start is over (the probe's
   *  --hung-interval; guest-probe/src/sample-loop.ts): a hung target is watched at 4 Hz, not 25. */
  hungIntervalMs: 250,
  notifySocket: '/run/vsockdiag/notify.sock',
} as const;
