// The probe's VsockBackend for @vsockdiag/proto's dial()/listen(): the addon makes the
// vsock syscalls, pipe.ts turns the fds into net.Socket / net.Server.

import { once } from 'node:events';
import type net from 'node:net';
import type { VsockBackend } from '@vsockdiag/proto';
import type { NativeAddon } from '../native.js';
import { serverFromFd, socketFromFd } from './pipe.js';

/** Pending-connection queue for vsock listeners (the kernel caps it at somaxconn). */
const LISTEN_BACKLOG = 128;

/** poll()'s timeout for a connect: an integer ms count, rounded up so 0.5 ms is not "no wait". */
export function timeoutForPoll(timeoutMs: number): number {
  return Math.min(Math.max(Math.ceil(timeoutMs), 0), 0x7fffffff);
}

/** `usable` resolves once the Pipe handle is known to work (vsockUsable); no fd is wrapped before. */
export function createVsockBackend(addon: NativeAddon, usable: () => Promise<void>): VsockBackend {
  return {
    /** A fresh socket for every call: after a failed vsock connect the old fd is not reused. */
    async dial(cid: number, port: number, timeoutMs: number): Promise<net.Socket> {
      const fd = await addon.vsockConnect(cid, port, timeoutForPoll(timeoutMs));
      try {
        await usable();
        return socketFromFd(fd);
      } catch (err) {
        addon.closeFd(fd);
        throw err;
      }
    },

    /** Binds once; the listener survives vsock transport resets, so keep it for the process lifetime. */
    async listen(cid: number, port: number, onConnection: (socket: net.Socket) => void): Promise<net.Server> {
      await usable();
      const fd = addon.vsockListen(cid, port, LISTEN_BACKLOG);
      let server: net.Server;
      try {
        server = serverFromFd(fd, onConnection, { backlog: LISTEN_BACKLOG });
      } catch (err) {
        addon.closeFd(fd);
        throw err;
      }
      await once(server, 'listening'); // rejects with the 'error' if listen() failed (fd closed then)
      return server;
    },
  };
}

/** Errors worth another attempt (a fresh socket, after a backoff). */
const RETRYABLE = new Set(['ECONNRESET', 'ETIMEDOUT', 'ENODEV', 'ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EAGAIN']);

/**
 * True for transient connect/transport failures: ECONNRESET (Firecracker resets a guest
 * connect when no host listener exists; a snapshot restore resets live connections),
 * ETIMEDOUT, ENODEV (transport not (yet) there), ECONNREFUSED, EHOSTUNREACH, ENETUNREACH,
 * EAGAIN. Everything else (EINVAL, EAFNOSUPPORT, EACCES, argument errors, ...) is fatal:
 * retrying cannot fix it.
 */
export function isRetryable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && RETRYABLE.has(code);
}
