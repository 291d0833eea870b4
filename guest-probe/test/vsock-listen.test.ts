// AF_VSOCK, listen-only. This VM's vsock host is not ours: nothing here may connect() an
// AF_VSOCK socket to any CID, so vsockConnect and backend.dial are never called. The
// connect path is tested over AF_UNIX/TCP in vsock-pipe.test.ts.

import { once } from 'node:events';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';

import { listen, useVsockBackend } from '@vsockdiag/proto';
import { loadNative } from '../src/native.js';
import { createVsockBackend } from '../src/vsock/backend.js';
import { enableVsock, vsockUsable } from '../src/vsock/index.js';
import { serverFromFd } from '../src/vsock/pipe.js';

const CID_ANY = 0xffffffff;
const addon = loadNative();
const hasVsock = existsSync('/dev/vsock');
if (!hasVsock) console.log('vsock-listen tests skipped: /dev/vsock is absent (no vsock device in this machine)');

const openFds: number[] = [];
const servers: net.Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
  for (const fd of openFds.splice(0)) addon.closeFd(fd);
});

/** A random high port (vsock ports are 32-bit) that we can bind; its fd is returned open. */
function listenOnRandomPort(): { port: number; fd: number } {
  for (let i = 0; i < 20; i++) {
    const port = 100_000 + Math.floor(Math.random() * 4_000_000_000);
    try {
      return { port, fd: addon.vsockListen(CID_ANY, port, 16) };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
    }
  }
  throw new Error('no free vsock port found');
}

describe.skipIf(!hasVsock)('vsock, listen only', () => {
  it('localCid() is a guest CID (>= 3)', () => {
    const cid = addon.localCid();
    expect(Number.isInteger(cid)).toBe(true);
    expect(cid).toBeGreaterThanOrEqual(3);
    expect(cid).toBeLessThan(CID_ANY);
  });

  it('vsockListen binds CID_ANY:port; a second listen on the port gives EADDRINUSE', () => {
    const { port, fd } = listenOnRandomPort();
    openFds.push(fd);
    expect(fd).toBeGreaterThan(2);
    let err: NodeJS.ErrnoException | undefined;
    try {
      openFds.push(addon.vsockListen(CID_ANY, port, 16));
    } catch (e) {
      err = e as NodeJS.ErrnoException;
    }
    expect(err).toBeInstanceOf(Error);
    expect(err!.code).toBe('EADDRINUSE');
    expect(err!.syscall).toBe('bind');
    expect(err!.message).toBe(`vsock listen ${CID_ANY}:${port}: Address already in use`);
  });

  it('serverFromFd listens on the fd, and close() frees the port at once', async () => {
    const { port, fd } = listenOnRandomPort();
    const server = serverFromFd(fd, () => {});
    await once(server, 'listening');
    expect(server.listening).toBe(true);
    expect(server.address()).toBeNull(); // a Pipe handle has no getsockname
    const closed = once(server, 'close');
    server.close();
    // No waiting: the fd is closed synchronously by the handle's close.
    const again = addon.vsockListen(CID_ANY, port, 16);
    openFds.push(again);
    await closed;
  });

  it('server.close() releases the libuv handle, so it no longer keeps the process alive', async () => {
    const pipes = () => process.getActiveResourcesInfo().filter((r) => r === 'PipeWrap').length;
    await new Promise((r) => setTimeout(r, 5)); // let handles closed by earlier tests finish closing
    const before = pipes();
    const { fd } = listenOnRandomPort();
    const server = serverFromFd(fd, () => {});
    await once(server, 'listening');
    expect(pipes()).toBe(before + 1);
    server.close();
    await once(server, 'close');
    await new Promise((r) => setTimeout(r, 5)); // the uv_close callback runs on the next loop turn
    expect(pipes()).toBe(before);
  });

  it("Node's own fd path rejects a vsock fd (EINVAL), which is why serverFromFd uses a Pipe handle", async () => {
    const { fd } = listenOnRandomPort();
    openFds.push(fd); // net did not adopt it
    const server = net.createServer();
    server.listen({ fd });
    const [err] = (await once(server, 'error').catch((e: unknown) => [e])) as [NodeJS.ErrnoException];
    expect(err.code).toBe('EINVAL');
    expect(() => new net.Socket({ fd })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_FD_TYPE' }));
  });

  it('backend.listen binds once and its server closes cleanly; the port can be listened on again', async () => {
    const backend = createVsockBackend(addon, () => vsockUsable(addon));
    const { port, fd } = listenOnRandomPort();
    addon.closeFd(fd); // just to pick a free port
    const server = await backend.listen(CID_ANY, port, () => {});
    expect(server.listening).toBe(true);
    await expect(backend.listen(CID_ANY, port, () => {})).rejects.toMatchObject({ code: 'EADDRINUSE' });
    server.close();
    const again = await backend.listen(CID_ANY, port, () => {});
    servers.push(again);
  });

  it('enableVsock() registers the backend: proto listen("vsock:any:PORT") works', async () => {
    const { port, fd } = listenOnRandomPort();
    addon.closeFd(fd);
    try {
      enableVsock();
      const server = await listen(`vsock:any:${port}`, () => {});
      expect(server.listening).toBe(true);
      expect(() => addon.vsockListen(CID_ANY, port, 1)).toThrow(expect.objectContaining({ code: 'EADDRINUSE' }));
      server.close();
    } finally {
      useVsockBackend(null);
    }
  });

  it('bad arguments throw TypeError/RangeError before any socket is made', () => {
    const bad: [unknown, unknown, unknown, string, string][] = [
      [-1, 5000, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [1.5, 5000, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [2 ** 32, 5000, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [NaN, 5000, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [Infinity, 5000, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      ['3', 5000, 1, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [undefined, 5000, 1, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [CID_ANY, -1, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [CID_ANY, 2 ** 32, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [CID_ANY, 5000.25, 1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [CID_ANY, '5000', 1, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [CID_ANY, 5000, -1, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [CID_ANY, 5000, 2 ** 31, 'RangeError', 'ERR_INVALID_ARG_VALUE'],
      [CID_ANY, 5000, null, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    ];
    for (const [cid, port, backlog, name, code] of bad) {
      const call = () => (addon.vsockListen as (...a: unknown[]) => number)(cid, port, backlog);
      expect(call, `vsockListen(${String(cid)}, ${String(port)}, ${String(backlog)})`).toThrow(
        expect.objectContaining({ name, code, message: expect.stringMatching(/^vsockListen: (cid|port|backlog) must be /) }),
      );
    }
  });
});

describe.skipIf(hasVsock)('vsock absent', () => {
  it('localCid() throws ENOENT', () => {
    expect(() => addon.localCid()).toThrow(expect.objectContaining({ code: 'ENOENT' }));
  });
});
