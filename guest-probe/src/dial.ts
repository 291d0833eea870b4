// The probe's connections to the collector, each with its hello written on the raw socket.
//
// Why: the hello is how the collector learns that a VM's probe is up, and the probe starts
// on every boot's path. Loading node:net (and the streams under it) is a few milliseconds of
// that start, more than everything else before the hello. So the fd comes from the addon,
// the hello frame goes out with a plain write(2) (node:fs, loaded with Node itself), and
// only then is net loaded to wrap the fd in a net.Socket (for vsock, after the Pipe handle's
// self-test: vsock/index.ts). Every session connects this way: one path, not a first-time
// special case. What the kernel did not take at once (a full buffer, which a fresh socket
// does not have) the socket writes, and a write error is the socket's error: the session
// ends like any other and the link dials again.
//
// tcp: addresses (tests and local runs only; the addon connects to numeric addresses only)
// and a probe without its addon use proto's dial() and write the hello on the socket.

import fs from 'node:fs';
import type net from 'node:net';
import { dial, parseAddress } from '@vsockdiag/proto';
import { addonOrNull, loadNative, type NativeAddon } from './native.js';
import { socketFromFd, timeoutForPoll, vsockUsable } from './vsock/index.js';

/** Connects, writes the frame `hello()` returns (called once connected), and resolves with
 *  the socket the rest of the session goes over. Rejects as the connect failed. */
export type CollectorDialer = (timeoutMs: number, hello: () => Uint8Array) => Promise<net.Socket>;

export function collectorDialer(address: string): CollectorDialer {
  const a = parseAddress(address);
  // vsock needs the addon, and main() has checked it loads; without it a Unix socket still works.
  const addon = a.kind === 'vsock' ? loadNative() : a.kind === 'unix' ? addonOrNull() : null;
  if (a.kind === 'vsock' && addon) {
    return rawDialer(
      addon,
      (ms) => addon.vsockConnect(a.cid, a.port, ms),
      () => vsockUsable(addon),
    );
  }
  if (a.kind === 'unix' && addon) return rawDialer(addon, (ms) => addon.unixConnect(a.path, ms));
  return async (timeoutMs, hello) => {
    const socket = await dial(a, { timeoutMs });
    socket.write(hello());
    return socket;
  };
}

/**
 * The raw-fd path: `connect` makes a connected non-blocking fd (poll()'s timeout in ms), the
 * hello goes out on it, and the fd is wrapped once `beforeWrap` resolves (vsock: the Pipe
 * handle's self-test). Exported for the tests, which drive the vsock path's steps over a Unix
 * socket: this machine's vsock belongs to its host.
 */
export function rawDialer(
  addon: Pick<NativeAddon, 'closeFd'>,
  connect: (timeoutMs: number) => Promise<number>,
  beforeWrap?: () => Promise<void>,
): CollectorDialer {
  return async (timeoutMs, hello) => {
    const fd = await connect(timeoutForPoll(timeoutMs));
    let frame: Uint8Array;
    let written: number;
    let socket: net.Socket;
    try {
      frame = hello();
      written = writeNow(fd, frame);
      await beforeWrap?.();
      socket = socketFromFd(fd);
    } catch (err) {
      addon.closeFd(fd); // the fd is still ours until socketFromFd returns
      throw err;
    }
    if (written < frame.length) socket.write(frame.subarray(written));
    return socket;
  };
}

/** What one write(2) on the non-blocking fd took; 0 on any error (the socket writes it all
 *  again and reports the error, see above). */
function writeNow(fd: number, frame: Uint8Array): number {
  try {
    return fs.writeSync(fd, frame);
  } catch {
    return 0;
  }
}
