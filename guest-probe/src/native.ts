// Loads vsockdiag.node, the probe's own N-API addon (guest-probe/native).
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** An open sd_notify datagram socket. */
export interface NotifyHandle {
  /** The socket fd (kept as it was after close()). */
  readonly fd: number;
  /** Stops polling, closes the fd and removes the socket file (not for '@' names). Idempotent. */
  close(): void;
}

/** Called once per datagram: at most 4096 bytes, the sender pid (0 if unknown), and whether it was longer. */
export type NotifyDatagramCallback = (buf: Buffer, pid: number, truncated: boolean) => void;

export interface NativeAddon {
  /**
   * Binds an AF_UNIX SOCK_DGRAM socket at `path` ('@name' = abstract namespace) and
   * calls `onDatagram` for every datagram. Throws an Error whose `code` is the errno
   * name (EADDRINUSE, ENAMETOOLONG, EACCES, ...).
   */
  notifyBind(path: string, onDatagram: NotifyDatagramCallback): NotifyHandle;
}

const ADDON_FILE = 'vsockdiag.node';

/** Where the addon is looked for, in order. */
function nativeCandidates(): string[] {
  const out: string[] = [];
  // The bundled probe ships vsockdiag.node beside its script.
  const script = process.argv[1];
  if (script) out.push(path.join(path.dirname(path.resolve(script)), ADDON_FILE));
  // Development: the node-gyp build output, relative to this source file.
  out.push(fileURLToPath(new URL(`../native/build/Release/${ADDON_FILE}`, import.meta.url)));
  return out;
}

let cached: NativeAddon | undefined;

/** Loads the addon once; throws an Error listing every path tried if none loads. */
export function loadNative(): NativeAddon {
  if (cached) return cached;
  const require = createRequire(import.meta.url);
  const tried: string[] = [];
  for (const file of nativeCandidates()) {
    if (!existsSync(file)) {
      tried.push(`${file}: not found`);
      continue;
    }
    try {
      cached = require(file) as NativeAddon;
      return cached;
    } catch (err) {
      tried.push(`${file}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  throw new Error(
    `cannot load the vsockdiag native addon (${ADDON_FILE}); build it with ` +
      `"cd guest-probe/native && npm_config_nodedir=/usr node ../node_modules/node-gyp/bin/node-gyp.js rebuild". ` +
      `Tried:\n  ${tried.join('\n  ')}`,
  );
}
