// Start-up guard for the internal API pipe.ts depends on (Node's Pipe handle and
// net.Server's _listen2). Over a socketpair, both ends wrapped with socketFromFd, it checks
// what the probe needs from a vsock connection: bytes both ways, half-close (one side
// end()s, the other sees 'end' and can still write back), and close on both sides.

import { once } from 'node:events';
import type net from 'node:net';
import { loadNative, type NativeAddon } from '../native.js';
import { serverHookPresent, socketFromFd } from './pipe.js';

const SELF_TEST_TIMEOUT_MS = 1000;
const PREFIX = "this Node version's internal Pipe handle does not work with foreign sockets: ";

/** Resolves when `got()` reaches `want`; rejects on mismatch, on 'error', or if the socket ends first. */
function receive(sock: net.Socket, got: () => string, want: string, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const s = got();
      if (s === want) return done(null);
      if (!want.startsWith(s)) return done(new Error(`${what}: got ${JSON.stringify(s)}, want ${JSON.stringify(want)}`));
    };
    const onEnd = () => done(new Error(`${what}: stream ended after ${JSON.stringify(got())}`));
    const done = (err: Error | null) => {
      sock.off('data', check).off('end', onEnd).off('error', done);
      if (err) reject(err);
      else resolve();
    };
    sock.on('data', check).on('end', onEnd).on('error', done);
    check();
  });
}

async function exchange(a: net.Socket, b: net.Socket): Promise<void> {
  let atA = '';
  let atB = '';
  a.setEncoding('latin1').on('data', (d: string) => (atA += d));
  b.setEncoding('latin1').on('data', (d: string) => (atB += d));
  // Created early, awaited late: mark them handled so a failure elsewhere is reported once.
  const closed = Promise.all([once(a, 'close'), once(b, 'close')]);
  closed.catch(() => {});

  a.write('ping');
  await receive(b, () => atB, 'ping', 'a -> b');
  b.write('pong');
  await receive(a, () => atA, 'pong', 'b -> a');

  // Half-close: a's end() must be shutdown(SHUT_WR), so b sees 'end' and can still reply.
  const bEnded = once(b, 'end');
  bEnded.catch(() => {});
  a.end();
  await bEnded;
  const aEnded = once(a, 'end');
  aEnded.catch(() => {});
  b.end('after-end');
  await receive(a, () => atA, 'pongafter-end', 'b -> a after a.end()');
  await aEnded;
  // Both directions are shut: with autoDestroy both sockets close their handles.
  await closed;
}

/**
 * Throws (rejects) with a message starting "this Node version's internal Pipe handle does
 * not work with foreign sockets: " unless the checks pass within 1 s.
 */
export async function pipeSelfTest(addon: NativeAddon = loadNative()): Promise<void> {
  const sockets: net.Socket[] = [];
  let timer: NodeJS.Timeout | undefined;
  try {
    if (!serverHookPresent()) throw new Error('net.Server.prototype._listen2 is missing (needed to serve a listening fd)');
    const [fa, fb] = addon.socketPair();
    try {
      sockets.push(socketFromFd(fa, { allowHalfOpen: true }));
    } catch (err) {
      addon.closeFd(fa);
      addon.closeFd(fb);
      throw err;
    }
    try {
      sockets.push(socketFromFd(fb, { allowHalfOpen: true }));
    } catch (err) {
      addon.closeFd(fb);
      throw err;
    }
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no result within ${SELF_TEST_TIMEOUT_MS} ms`)), SELF_TEST_TIMEOUT_MS);
    });
    await Promise.race([exchange(sockets[0]!, sockets[1]!), timeout]);
  } catch (err) {
    throw new Error(PREFIX + (err instanceof Error ? err.message : String(err)), { cause: err });
  } finally {
    clearTimeout(timer);
    for (const s of sockets) s.destroy(); // no-op once closed; frees the fds after a failure
  }
}
