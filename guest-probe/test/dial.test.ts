// collectorDialer: each session's hello written on the raw fd, then the socket for the rest.
// Over Unix sockets (what the host side of Firecracker's vsock is) and tcp; never AF_VSOCK.

import { once } from 'node:events';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { collectorDialer, rawDialer } from '../src/dial.js';
import { loadNative } from '../src/native.js';
import { vsockUsable } from '../src/vsock/index.js';

let dir: string;
const cleanups: (() => void)[] = [];
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'vd-dial-'));
});
afterEach(() => {
  for (const fn of cleanups.splice(0).reverse()) fn();
  rmSync(dir, { recursive: true, force: true });
});

/** A server that keeps everything each connection sends; the first connection's socket. */
async function server(listenOn: string | number): Promise<{ address: string; first: Promise<{ socket: net.Socket; got: () => Buffer }> }> {
  const srv = net.createServer();
  cleanups.push(() => srv.close());
  const first = new Promise<{ socket: net.Socket; got: () => Buffer }>((resolve) =>
    srv.once('connection', (socket) => {
      cleanups.push(() => socket.destroy());
      const chunks: Buffer[] = [];
      socket.on('data', (d: Buffer) => chunks.push(d));
      resolve({ socket, got: () => Buffer.concat(chunks) });
    }),
  );
  if (typeof listenOn === 'string') {
    await new Promise<void>((r) => srv.listen(listenOn, r));
    return { address: `unix:${listenOn}`, first };
  }
  await new Promise<void>((r) => srv.listen(listenOn, '127.0.0.1', r));
  return { address: `tcp:127.0.0.1:${(srv.address() as net.AddressInfo).port}`, first };
}

const openFds = () => readdirSync('/proc/self/fd').length;

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000 && !check(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!check()) throw new Error(`timed out waiting for ${what}`);
}

type Peer = Awaited<Awaited<ReturnType<typeof server>>['first']>;

/** The hello came first, then what the socket sends; and what the peer sends comes back. */
async function expectSession(socket: net.Socket, peer: Peer, hello: string): Promise<void> {
  socket.write('+rest');
  await until(() => peer.got().length === hello.length + 5, 'both writes');
  expect(peer.got().toString()).toBe(`${hello}+rest`);
  peer.socket.write('welcome');
  const [answer] = (await once(socket, 'data')) as [Buffer];
  expect(answer.toString()).toBe('welcome');
}

describe('collectorDialer', () => {
  for (const kind of ['unix', 'tcp'] as const) {
    it(`${kind}: the hello is the first thing the collector reads, and the socket carries the rest both ways`, async () => {
      const s = await server(kind === 'unix' ? path.join(dir, 'c.sock') : 0);
      let calls = 0;
      const socket = await collectorDialer(s.address)(1000, () => {
        calls++;
        return Buffer.from('HELLO');
      });
      cleanups.push(() => socket.destroy());
      expect(calls).toBe(1);
      await expectSession(socket, await s.first, 'HELLO');
    });
  }

  it("vsock's steps over a Unix fd: the hello on the raw fd, then the Pipe self-test, then the wrap", async () => {
    // collectorDialer gives a vsock address exactly these steps with addon.vsockConnect as
    // `connect`; here it is a Unix connect: tests never open AF_VSOCK.
    const s = await server(path.join(dir, 'c.sock'));
    const addon = loadNative();
    const steps: string[] = [];
    let peer: Peer | undefined;
    void s.first.then((p) => (peer = p));
    const dial = rawDialer(
      addon,
      (ms) => {
        steps.push(`connect ${ms} ms`);
        return addon.unixConnect(path.join(dir, 'c.sock'), ms);
      },
      async () => {
        // The collector has the hello before the self-test runs.
        await until(() => peer?.got().toString() === 'HELLO', 'the hello');
        steps.push('hello received');
        await vsockUsable(addon);
        steps.push('self-test passed');
      },
    );
    const socket = await dial(1000.4, () => Buffer.from('HELLO'));
    cleanups.push(() => socket.destroy());
    expect(steps).toEqual(['connect 1001 ms', 'hello received', 'self-test passed']);
    await expectSession(socket, peer!, 'HELLO');
  });

  it('a failing check before the wrap rejects and closes the fd, after the hello went out', async () => {
    const s = await server(path.join(dir, 'c.sock'));
    const addon = loadNative();
    const before = openFds();
    const dial = rawDialer(
      addon,
      (ms) => addon.unixConnect(path.join(dir, 'c.sock'), ms),
      () => Promise.reject(new Error('self-test failed')),
    );
    const err = (await dial(1000, () => Buffer.from('HELLO')).catch((e: unknown) => e)) as Error;
    expect(err.message).toBe('self-test failed');
    expect(openFds()).toBe(before);
    const peer = await s.first;
    await once(peer.socket, 'end');
    expect(peer.got().toString()).toBe('HELLO');
  });

  it('unix: what the kernel does not take at once, the socket writes, in order', async () => {
    const s = await server(path.join(dir, 'c.sock'));
    // Far over a Unix socket's buffer: the one non-blocking write(2) takes only part of it.
    const big = Buffer.alloc(8 << 20);
    for (let i = 0; i < big.length; i += 4) big.writeUInt32LE(i, i);
    const socket = await collectorDialer(s.address)(1000, () => big);
    cleanups.push(() => socket.destroy());
    socket.write('after');
    const peer = await s.first;
    await until(() => peer.got().length === big.length + 5, 'the whole frame and what followed');
    expect(peer.got().equals(Buffer.concat([big, Buffer.from('after')]))).toBe(true);
  });

  it('a failed connect rejects with the errno name, builds no hello and leaves no fd open', async () => {
    const dial = collectorDialer(`unix:${path.join(dir, 'nobody.sock')}`);
    const before = openFds();
    let built = false;
    const err = (await dial(1000, () => {
      built = true;
      return Buffer.from('HELLO');
    }).catch((e: unknown) => e)) as NodeJS.ErrnoException;
    expect(err.code).toBe('ENOENT');
    expect(built).toBe(false);
    expect(openFds()).toBe(before);
  });

  it('a hello that cannot be built rejects and closes the connected fd', async () => {
    const s = await server(path.join(dir, 'c.sock'));
    const before = openFds();
    const err = (await collectorDialer(s.address)(1000, () => {
      throw new Error('no hello');
    }).catch((e: unknown) => e)) as Error;
    expect(err.message).toBe('no hello');
    expect(openFds()).toBe(before);
    // The collector sees the connection end with nothing sent.
    const peer = await s.first;
    await once(peer.socket, 'end');
    expect(peer.got().length).toBe(0);
  });
});
