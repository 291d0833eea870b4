// dial() and listen() for every address kind, yielding ordinary net.Socket / net.Server
// objects so the protocol code above never knows which transport it runs on. Unix and
// tcp come from Node itself; vsock needs the guest's native addon, which registers itself
// with useVsockBackend() (the collector never needs vsock: on the host, Firecracker's
// vsock *is* a Unix socket).
//
// node:net is required on first use, not when this module loads: loading it (and the
// streams under it) is a few milliseconds of the probe's start-up, and the probe writes its
// first hello on a raw fd before it needs net at all (guest-probe/src/dial.ts).

import fs from 'node:fs';
import { createRequire } from 'node:module';
import type net from 'node:net';
import { formatAddress, parseAddress, type Address } from './address.js';
import type { AddressErrorCode } from './codes.js';

// Made on first use, like net itself: createRequire resolves this file's URL into a module.
let require: NodeJS.Require | undefined;
const nodeNet = (): typeof net => (require ??= createRequire(import.meta.url))('node:net') as typeof net;

export interface VsockBackend {
  dial(cid: number, port: number, timeoutMs: number): Promise<net.Socket>;
  listen(cid: number, port: number, onConnection: (socket: net.Socket) => void): Promise<net.Server>;
}

let vsockBackend: VsockBackend | null = null;

export function useVsockBackend(backend: VsockBackend | null): void {
  vsockBackend = backend;
}

function needVsock(a: Address): VsockBackend {
  if (vsockBackend) return vsockBackend;
  const err = new Error(
    `${formatAddress(a)}: vsock is not available in this process (it needs the probe's native vsock addon); ` +
      'use unix:PATH or tcp:HOST:PORT',
  );
  (err as NodeJS.ErrnoException).code = 'ERR_VSOCK_UNAVAILABLE' satisfies AddressErrorCode;
  throw err;
}

/**
 * Makes a server listening on a Unix socket path, bound before it returns (throwing bind's
 * error, e.g. EADDRINUSE, with its code) and emitting 'listening' or 'error' after. Node's
 * own listen() goes through its cluster support, which loads node:cluster and with it
 * child_process and dgram: ten modules a probe never uses, which stay in its heap. The probe
 * registers one that does without them (guest-probe/src/vsock/pipe.ts, serverAtPath).
 */
export type UnixListener = (path: string, onConnection: (socket: net.Socket) => void) => net.Server;

let unixListener: UnixListener | null = null;

/** How listen() binds Unix paths from now on (null: Node's listen()). */
export function useUnixListener(listener: UnixListener | null): void {
  unixListener = listener;
}

const toAddress = (a: Address | string): Address => (typeof a === 'string' ? parseAddress(a) : a);

/** Opens a fresh connection. Rejects on error or after `timeoutMs`. */
export function dial(address: Address | string, opts: { timeoutMs?: number } = {}): Promise<net.Socket> {
  const a = toAddress(address);
  const timeoutMs = opts.timeoutMs ?? 3000;
  if (a.kind === 'vsock') return needVsock(a).dial(a.cid, a.port, timeoutMs);
  return new Promise((resolve, reject) => {
    const socket = a.kind === 'unix' ? nodeNet().connect({ path: a.path }) : nodeNet().connect({ host: a.host, port: a.port });
    const timer = setTimeout(() => {
      const err = new Error(`connect to ${formatAddress(a)} timed out after ${timeoutMs} ms`);
      (err as NodeJS.ErrnoException).code = 'ETIMEDOUT';
      socket.destroy(err);
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeListener('error', onError);
      resolve(socket);
    });
    const onError = (err: Error) => {
      clearTimeout(timer);
      reject(err);
    };
    socket.once('error', onError);
  });
}

export interface ListenOptions {
  /** Replace a socket file nobody listens on any more (left by a crash). A live socket, and
   *  anything that is not a socket (a regular file, a symlink, a folder), is an error. */
  replaceStale?: boolean;
  /** Unix sockets: the file's mode, set at bind time (no window with a wider one). Without
   *  it the process umask decides. */
  mode?: number;
  /** Unix sockets: the group the file is given (Firecracker's jailer runs the VMM under its
   *  own uid; a shared group lets it connect while the mode keeps everyone else out). */
  gid?: number;
}

/**
 * Listens and resolves once bound. To stop, call server.close() and do not wait for its
 * callback unless every accepted connection will end too: libuv removes a Unix socket's
 * file as soon as the listener closes, while the callback waits for the connections.
 */
export async function listen(
  address: Address | string,
  onConnection: (socket: net.Socket) => void,
  opts: ListenOptions = {},
): Promise<net.Server> {
  const a = toAddress(address);
  if (a.kind === 'vsock') return needVsock(a).listen(a.cid, a.port, onConnection);
  const make = (): Promise<net.Server> => {
    if (a.kind === 'unix' && unixListener) return listening(unixListener(a.path, onConnection));
    const server = nodeNet().createServer(onConnection);
    return listening(server, () => (a.kind === 'unix' ? server.listen(a.path) : server.listen(a.port, a.host)));
  };
  const bind = (): Promise<net.Server> => {
    if (a.kind !== 'unix' || opts.mode === undefined) return make();
    // bind(2) creates the file with the umask's mode, synchronously inside listen() (and the
    // unix listener): a umask set around the call alone gives the file its mode from the
    // start, and is restored before anything else runs.
    const umask = process.umask(0o777 & ~opts.mode);
    try {
      return make();
    } finally {
      process.umask(umask);
    }
  };
  let server: net.Server;
  try {
    server = await bind();
  } catch (err) {
    if (a.kind !== 'unix' || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || !opts.replaceStale) throw err;
    await removeStaleSocket(a.path, err as Error);
    server = await bind();
  }
  if (a.kind === 'unix' && opts.gid !== undefined) fs.chownSync(a.path, -1, opts.gid);
  return server;
}

/** Resolves with `server` once it emits 'listening' (after `start`, if given), or rejects
 *  with its 'error'. */
function listening(server: net.Server, start?: () => void): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.once('listening', () => {
      server.removeListener('error', reject);
      resolve(server);
    });
    start?.();
  });
}

/**
 * Removes what stands at `path` only if lstat shows a socket (never following a symlink) and
 * nothing accepts on it; otherwise rethrows `inUse` with the reason. The caller may be root
 * and `path` may come from an API request: nothing else is ever deleted.
 */
async function removeStaleSocket(path: string, inUse: Error): Promise<void> {
  const st = fs.lstatSync(path, { throwIfNoEntry: false });
  if (st && !st.isSocket()) {
    const what = st.isSymbolicLink() ? 'a symbolic link' : st.isDirectory() ? 'a directory' : 'not a socket';
    inUse.message = `${path} exists and is ${what}; refusing to replace it`;
    throw inUse;
  }
  if (st && (await isLive(path))) throw inUse;
  // Only the socket lstat saw: if it was swapped since, the unlink fails or removes a socket.
  const again = fs.lstatSync(path, { throwIfNoEntry: false });
  if (again?.isSocket() && again.ino === st?.ino) fs.unlinkSync(path);
}

/** Is something accepting connections on this Unix socket path? */
function isLive(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = nodeNet().connect({ path });
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
}
