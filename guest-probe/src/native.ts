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
  /**
   * Stops reading (also from inside onDatagram: no datagram follows the current one), so
   * datagrams wait in the kernel's queue and, once it is full, senders block or get EAGAIN.
   * A paused socket does not keep the event loop alive. No-op when paused or closed.
   */
  pause(): void;
  /** Reads again, queued datagrams first. No-op unless paused; throws the errno Error if polling cannot restart. */
  resume(): void;
}

/** Called once per datagram: at most MAX_NOTIFY_DATAGRAM bytes, the sender pid (0 if unknown), and whether it was longer. */
export type NotifyDatagramCallback = (buf: Buffer, pid: number, truncated: boolean) => void;

export interface NativeAddon {
  /**
   * Binds an AF_UNIX SOCK_DGRAM socket at `path` ('@name' = abstract namespace) and
   * calls `onDatagram` for every datagram. Throws an Error whose `code` is the errno
   * name (EADDRINUSE, ENAMETOOLONG, EACCES, ...).
   */
  notifyBind(path: string, onDatagram: NotifyDatagramCallback): NotifyHandle;

  // Stream sockets (native/src/vsock.c). Every fd is SOCK_STREAM, non-blocking, close-on-exec,
  // for socketFromFd/serverFromFd (src/vsock/pipe.ts). Bad arguments throw TypeError
  // (ERR_INVALID_ARG_TYPE) or RangeError (ERR_INVALID_ARG_VALUE); syscall failures throw or
  // reject with an Error whose `code` is the errno name, plus `errno` (negative) and `syscall`.
  /**
   * socket(AF_VSOCK) + bind(cid, port) + listen(backlog). cid 0xFFFFFFFF = VMADDR_CID_ANY.
   * Throws EADDRINUSE, EAFNOSUPPORT (no vsock), ENODEV, ... as "vsock listen CID:PORT: <reason>".
   */
  vsockListen(cid: number, port: number, backlog: number): number;
  /**
   * A fresh non-blocking AF_VSOCK socket, connected; the wait runs on the threadpool.
   * Rejects ETIMEDOUT after timeoutMs, ECONNRESET, ECONNREFUSED, ...; the fd is closed then.
   */
  vsockConnect(cid: number, port: number, timeoutMs: number): Promise<number>;
  /** unixListen/unixConnect: the same code paths over AF_UNIX ('@name' = abstract namespace). */
  unixListen(path: string, backlog: number): number;
  /** Rejects ENOENT, ECONNREFUSED, EAGAIN (listener queue full), ... */
  unixConnect(path: string, timeoutMs: number): Promise<number>;
  /** TCP to a numeric IPv4/IPv6 address: the EINPROGRESS + worker path without vsock (tests). */
  tcpConnect(ip: string, port: number, timeoutMs: number): Promise<number>;
  /** IOCTL_VM_SOCKETS_GET_LOCAL_CID on /dev/vsock; throws ENOENT when there is no vsock device. */
  localCid(): number;
  /** socketpair(AF_UNIX, SOCK_STREAM): two connected fds. */
  socketPair(): [number, number];
  /** close(fd), for fds that never reached a handle. Throws EBADF for a closed fd. */
  closeFd(fd: number): void;
  /** One read(fd) into `buffer`: the bytes read, or null when nothing waits (EAGAIN), without
   *  the exception fs.readSync makes of that. EINTR is retried; other errors throw. */
  readNow(fd: number, buffer: Buffer): number | null;
  /**
   * TCP sockets in LISTEN (IPv4 and IPv6) from a netlink sock_diag dump of the calling
   * thread's network namespace, optionally only those bound to `port`. Throws an Error whose
   * `code` is the errno name if the kernel refuses the query; TypeError/RangeError for a bad port.
   */
  diagListeners(port?: number): import('./diag.js').TcpListener[];
  /**
   * The LISTEN socket a connection to `address`:`port` would reach, looked up by the kernel
   * without a dump (a wildcard listener answers for any address), or null. Throws as above;
   * TypeError for an address that is neither IPv4 nor IPv6 text.
   */
  diagListener(address: string, port: number): import('./diag.js').TcpListener | null;
  /** Counts TCP sockets by state and by remote, in C, from one dump per family. See diag.ts. */
  diagCensus(opts?: import('./diag.js').SocketCensusOptions): import('./diag.js').SocketCensus;
  /** True when a NETLINK_SOCK_DIAG socket opens and answers a LISTEN query. Never throws. */
  diagAvailable(): boolean;
  /** A 64-bit hash of the bytes, taken a word at a time (native/src/checksum.c), 16 hex digits (the launcher's code cache check). TypeError for a non-buffer. */
  checksum(bytes: Buffer | NodeJS.TypedArray): string;
  /**
   * The payload of a file written as `magic + checksum(payload) + payload`: a Buffer when the
   * magic and the checksum match, 'missing' when it cannot be opened (or is not a regular file),
   * 'corrupt' otherwise (shorter than its header, over 64 MiB, or changed while read).
   * TypeError for a non-string path or magic, or magic not 1-15 characters.
   */
  readSealed(path: string, magic: string): Buffer | 'missing' | 'corrupt';
  /**
   * An ASCII file that ends with `trailer`, less the trailer, as a string whose characters stay
   * in the file's pages (an external string over a read-only mapping, for the launcher's
   * bundle); null when the file cannot be opened, is not a regular file, lacks the trailer or
   * holds a byte over 0x7f. The file must not change in place while the string lives.
   * TypeError for non-string arguments. See source.c.
   */
  mapSource(path: string, trailer: string): string | null;
  /** `n` bytes (1-64) of /dev/urandom as hex; null when there is none. RangeError for another `n`. */
  randomHex(n: number): string | null;
  /**
   * process_vm_readv of `count` ranges of process `pid` (segs: [address, length] pairs) into
   * `dst`, packed one after another; `got[i]` is set to the bytes range i gave (less than its
   * length where it does not read). Throws an Error whose `code` is the errno name for
   * anything but an unmapped range: ESRCH (gone), EPERM (no ptrace-attach right), … See memread.c.
   */
  memRead(pid: number, dst: Buffer, segs: Float64Array, count: number, got: Int32Array): void;
  /**
   * A non-blocking NETLINK_KOBJECT_UEVENT socket in the kernel's multicast group, listen-only
   * (see uevent.c); close it with closeFd. Throws an Error whose `code` is the errno name.
   */
  ueventOpen(): number;
  /** The next uevent datagram, an empty Buffer when the kernel dropped some (ENOBUFS), or
   *  null when none is waiting. */
  ueventRead(fd: number): Buffer | null;
  /**
   * Pause mode's copy of a stopped Go process (memread.c): the `count` g's that `allgs` points
   * to (`gSize` bytes each, into hdr; their addresses into addrs) and, per g, its stack from
   * its walk's start to stack.hi (fields: the atomicstatus, stack.lo, stack.hi, sched.sp and
   * syscallsp offsets). `window[k]` is where g k's window starts in the returned buffer, or
   * -3 (no g), -2 (dead), -1 (running); `got[k]` the bytes of it that read. null, having read
   * only the g's, when the windows would take more than maxStackBytes. The windows go into
   * `into` (which is then returned) when they fit, else into a new Buffer. Errors as memRead.
   */
  memSnapshot(
    pid: number,
    allgs: Buffer,
    count: number,
    gSize: number,
    fields: Int32Array,
    addrs: Float64Array,
    hdr: Buffer,
    window: Float64Array,
    got: Int32Array,
    maxStackBytes: number,
    into?: Buffer,
  ): Buffer | null;
}

const ADDON_FILE = 'vsockdiag.node';

/** Where the addon is looked for, in order; each made only if the one before it is missing
 *  (the development path's URL arithmetic costs the bundled probe's start-up otherwise). */
function* nativeCandidates(): Generator<string> {
  // The bundled probe ships vsockdiag.node beside its script.
  const script = process.argv[1];
  if (script) yield path.join(path.dirname(path.resolve(script)), ADDON_FILE);
  // Development: the node-gyp build output, relative to this source file.
  yield fileURLToPath(new URL(`../native/build/Release/${ADDON_FILE}`, import.meta.url));
}

let cached: NativeAddon | undefined;

/** Loads the addon once; throws an Error listing every path tried if none loads. */
export function loadNative(): NativeAddon {
  if (cached) return cached;
  const tried: string[] = [];
  for (const file of nativeCandidates()) {
    if (!existsSync(file)) {
      tried.push(`${file}: not found`);
      continue;
    }
    try {
      // The launcher required the same file: Node's module cache answers.
      cached = createRequire(file)(file) as NativeAddon;
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

/** The addon, or null where it does not load: for the parts that work without it. (What
 *  needs it, the notify socket and vsock, says so where it is used.) */
export function addonOrNull(): NativeAddon | null {
  try {
    return loadNative();
  } catch {
    return null;
  }
}
