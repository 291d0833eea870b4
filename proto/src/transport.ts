// dial() and listen() for every address kind, yielding ordinary net.Socket / net.Server
// objects so the protocol code above never knows which transport it runs on. Unix and
// tcp come from Node itself; vsock needs the guest's native addon, which registers itself
// with useVsockBackend() (the collector never needs vsock: on the host, Firecracker's
// vsock *is* a Unix socket).

import fs from 'node:fs';
import net from 'node:net';
import { formatAddress, parseAddress, type Address } from './address.js';

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
  (err as NodeJS.ErrnoException).code = 'ERR_VSOCK_UNAVAILABLE';
  throw err;
}

const toAddress = (a: Address | string): Address => (typeof a === 'string' ? parseAddress(a) : a);

/** Opens a fresh connection. Rejects on error or after `timeoutMs`. */
export function dial(address: Address | string, opts: { timeoutMs?: number } = {}): Promise<net.Socket> {
  const a = toAddress(address);
  const timeoutMs = opts.timeoutMs ?? 3000;
  if (a.kind === 'vsock') return needVsock(a).dial(a.cid, a.port, timeoutMs);
  return new Promise((resolve, reject) => {
    const socket = a.kind === 'unix' ? net.connect({ path: a.path }) : net.connect({ host: a.host, port: a.port });
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
  /** Replace a socket file nobody listens on any more (left by a crash). A live one is an error. */
  replaceStale?: boolean;
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
  const server = net.createServer(onConnection);
  const bind = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      const done = () => {
        server.removeListener('error', reject);
        resolve();
      };
      if (a.kind === 'unix') server.listen(a.path, done);
      else server.listen(a.port, a.host, done);
    });
  try {
    await bind();
  } catch (err) {
    if (a.kind !== 'unix' || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || !opts.replaceStale) throw err;
    if (await isLive(a.path)) throw err;
    fs.rmSync(a.path, { force: true });
    await bind();
  }
  return server;
}

/** Is something accepting connections on this Unix socket path? */
function isLive(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.connect({ path });
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
}
