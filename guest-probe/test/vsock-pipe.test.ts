// The vsock I/O path without vsock: fds from the addon's unixListen/unixConnect (and
// tcpConnect on loopback, which takes the EINPROGRESS -> threadpool-wait route that a
// vsock connect takes) wrapped by socketFromFd/serverFromFd; and serverAtPath, the probe's
// Unix listener on the same Pipe handle.

import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import fs, { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { listen, useUnixListener } from '@vsockdiag/proto';
import { childReaper } from '../../test/support/children.js';

import { loadNative } from '../src/native.js';
import { serverAtPath, serverFromFd, socketFromFd } from '../src/vsock/pipe.js';

const addon = loadNative();

let dir: string;
const children = childReaper();
const cleanups: (() => void)[] = [];
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'vsock-pipe-'));
});
afterEach(() => {
  for (const fn of cleanups.splice(0).reverse()) fn();
  rmSync(dir, { recursive: true, force: true });
});

/** unixListen + serverFromFd, resolved once listening; closed after the test. */
async function unixServer(file: string, onConnection: (s: net.Socket) => void, allowHalfOpen = true): Promise<net.Server> {
  const server = serverFromFd(addon.unixListen(file, 16), onConnection, { allowHalfOpen });
  await once(server, 'listening');
  cleanups.push(() => server.close());
  return server;
}

async function unixClient(file: string, allowHalfOpen = true): Promise<net.Socket> {
  const sock = socketFromFd(await addon.unixConnect(file, 1000), { allowHalfOpen });
  cleanups.push(() => sock.destroy());
  return sock;
}

function collect(sock: net.Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  sock.on('data', (c: Buffer) => chunks.push(c));
  return once(sock, 'end').then(() => Buffer.concat(chunks));
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function expectCode(p: Promise<unknown>, code: string): Promise<NodeJS.ErrnoException> {
  const err = (await p.then(
    () => {
      throw new Error(`expected a rejection with ${code}`);
    },
    (e: unknown) => e,
  )) as NodeJS.ErrnoException;
  expect(err).toBeInstanceOf(Error);
  expect(err.code).toBe(code);
  return err;
}

describe('socketFromFd / serverFromFd over AF_UNIX fds from the addon', () => {
  it('echoes 8 MiB with backpressure (write() false, then drain) and half-closes both ways', async () => {
    const file = path.join(dir, 'echo.sock');
    let serverClosed!: Promise<unknown>;
    await unixServer(file, (s) => {
      serverClosed = once(s, 'close');
      s.pipe(s); // echo; when the client's end() arrives, pipe() end()s our side too
    });

    const client = await unixClient(file);
    const payload = randomBytes(8 * 1024 * 1024);
    const echoed = collect(client);

    let sawFalse = 0;
    let drains = 0;
    const CHUNK = 256 * 1024;
    for (let off = 0; off < payload.length; off += CHUNK) {
      if (!client.write(payload.subarray(off, off + CHUNK))) {
        sawFalse++;
        await once(client, 'drain');
        drains++;
      }
    }
    client.end(); // SHUT_WR: the echo server sees 'end' and ends its side after the echo

    const got = await echoed;
    expect(got.length).toBe(payload.length);
    expect(sha(got)).toBe(sha(payload));
    expect(sawFalse).toBeGreaterThan(0);
    expect(drains).toBe(sawFalse);
    await once(client, 'close');
    await serverClosed;
  });

  it('half-close from the server: the client sees end and can still write back', async () => {
    const file = path.join(dir, 'half.sock');
    let fromClient: Promise<Buffer> | undefined;
    await unixServer(file, (s) => {
      fromClient = collect(s);
      s.end('hello'); // server shuts its write side first
    });
    const client = await unixClient(file);
    const fromServer = await collect(client);
    expect(fromServer.toString()).toBe('hello');
    expect(client.writable).toBe(true); // allowHalfOpen: our side is still open
    client.end('bye after your end');
    await once(client, 'close');
    await expect(fromClient).resolves.toEqual(Buffer.from('bye after your end'));
  });

  it('without allowHalfOpen the socket ends its side when the peer does, like any net.Socket', async () => {
    const file = path.join(dir, 'auto.sock');
    let resolveAccepted!: (s: net.Socket) => void;
    const accepted = new Promise<net.Socket>((r) => (resolveAccepted = r));
    await unixServer(file, (s) => resolveAccepted(s), false);
    const client = await unixClient(file, false);
    const serverSide = await accepted;
    serverSide.resume();
    const serverEnd = once(serverSide, 'end');
    client.end();
    await serverEnd;
    // The server side answered our FIN with its own, so both close without calling end() there.
    await Promise.all([once(client, 'close'), once(serverSide, 'close')]);
  });

  it('destroy() on one side closes the fd: the peer sees end and close', async () => {
    const file = path.join(dir, 'close.sock');
    let resolveAccepted!: (s: net.Socket) => void;
    const accepted = new Promise<net.Socket>((r) => (resolveAccepted = r));
    await unixServer(file, (s) => resolveAccepted(s), false);
    const client = await unixClient(file);
    const serverSide = await accepted;
    client.write('x');
    client.destroy();
    await once(client, 'close');
    serverSide.resume();
    await once(serverSide, 'end');
    await once(serverSide, 'close');
  });

  it('server.close() closes the listening fd at once: connects then fail with ECONNREFUSED', async () => {
    const file = path.join(dir, 'gone.sock');
    const server = await unixServer(file, () => {});
    expect(server.listening).toBe(true);
    server.close();
    expect(server.listening).toBe(false);
    // We bound the path ourselves, so libuv does not unlink it: a stale socket file is left.
    await expectCode(addon.unixConnect(file, 1000), 'ECONNREFUSED');
  });

  it('accepts many connections and counts them like any net.Server', async () => {
    const file = path.join(dir, 'many.sock');
    const seen: string[] = [];
    const serverClosed: Promise<unknown>[] = [];
    const server = await unixServer(
      file,
      (s) => {
        serverClosed.push(once(s, 'close'));
        s.setEncoding('utf8').on('data', (d: string) => seen.push(d));
      },
      false,
    );
    const clients = await Promise.all([1, 2, 3].map(() => unixClient(file)));
    clients.forEach((c, i) => c.end(`c${i}`));
    await Promise.all(clients.map((c) => once(c, 'close')));
    await Promise.all(serverClosed);
    expect(seen.sort()).toEqual(['c0', 'c1', 'c2']);
    const open = await new Promise<number>((resolve, reject) => server.getConnections((e, n) => (e ? reject(e) : resolve(n))));
    expect(open).toBe(0); // Node's own bookkeeping of accepted sockets works on this handle
  });
});

describe('unixConnect / unixListen errors', () => {
  it('rejects fast with ENOENT when nothing is at the path', async () => {
    const t0 = Date.now();
    const err = await expectCode(addon.unixConnect(path.join(dir, 'nothing.sock'), 5000), 'ENOENT');
    expect(Date.now() - t0).toBeLessThan(500);
    expect(err.message).toBe(`unix connect ${path.join(dir, 'nothing.sock')}: No such file or directory`);
    expect(err.syscall).toBe('connect');
    expect(err.errno).toBe(-os.constants.errno.ENOENT);
  });

  it('rejects fast with ECONNREFUSED for a socket file nobody listens on', async () => {
    const file = path.join(dir, 'stale.sock');
    addon.closeFd(addon.unixListen(file, 1)); // leaves the file behind
    const t0 = Date.now();
    await expectCode(addon.unixConnect(file, 5000), 'ECONNREFUSED');
    expect(Date.now() - t0).toBeLessThan(500);
  });

  it('a full AF_UNIX accept queue fails a non-blocking connect at once with EAGAIN (it never waits)', async () => {
    const file = path.join(dir, 'full.sock');
    const lfd = addon.unixListen(file, 0); // never accepted: the queue holds 1
    cleanups.push(() => addon.closeFd(lfd));
    const first = await addon.unixConnect(file, 1000);
    cleanups.push(() => addon.closeFd(first));
    await expectCode(addon.unixConnect(file, 5000), 'EAGAIN');
  });

  it('works with abstract names and reports EADDRINUSE for a second bind', async () => {
    const name = `@vsockdiag-test-${process.pid}-${randomBytes(4).toString('hex')}`;
    const server = await unixServer(name, (s) => s.end('hi'));
    expect(() => addon.unixListen(name, 1)).toThrow(expect.objectContaining({ code: 'EADDRINUSE', syscall: 'bind' }));
    const client = await unixClient(name);
    expect((await collect(client)).toString()).toBe('hi');
    server.close();
  });

  it('bad paths: too long, empty, or with a NUL reject with an errno code; wrong types throw TypeError', async () => {
    await expectCode(addon.unixConnect('/' + 'x'.repeat(200), 100), 'ENAMETOOLONG');
    await expectCode(addon.unixConnect('', 100), 'EINVAL');
    expect(() => addon.unixListen('/tmp/a\0b', 1)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => addon.unixConnect(42 as unknown as string, 100)).toThrow(
      expect.objectContaining({ name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' }),
    );
    expect(() => addon.unixConnect('/x', -1)).toThrow(expect.objectContaining({ name: 'RangeError', code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => addon.unixListen('/x', 1.5)).toThrow(expect.objectContaining({ name: 'RangeError' }));
  });

  it('closeFd throws EBADF for an fd that is not open', () => {
    const [a, b] = addon.socketPair();
    addon.closeFd(a);
    addon.closeFd(b);
    expect(() => addon.closeFd(a)).toThrow(expect.objectContaining({ code: 'EBADF' }));
  });

  it('readNow reads what waits, null when nothing does, 0 once the peer is gone; throws other errors', () => {
    const [a, b] = addon.socketPair();
    const buf = Buffer.alloc(16);
    expect(addon.readNow(a, buf)).toBeNull();
    fs.writeSync(b, 'kernel');
    expect(addon.readNow(a, buf)).toBe(6);
    expect(buf.toString('latin1', 0, 6)).toBe('kernel');
    expect(addon.readNow(a, buf)).toBeNull();
    addon.closeFd(b);
    expect(addon.readNow(a, buf)).toBe(0);
    addon.closeFd(a);
    expect(() => addon.readNow(a, buf)).toThrow(expect.objectContaining({ code: 'EBADF', syscall: 'read' }));
    expect(() => addon.readNow(a, 'buf' as unknown as Buffer)).toThrow(
      expect.objectContaining({ name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' }),
    );
  });

  it('socketFromFd leaves a bad fd to the caller and says why', () => {
    expect(() => socketFromFd(-1)).toThrow(RangeError);
    const [a, b] = addon.socketPair();
    addon.closeFd(b);
    const s = socketFromFd(a); // fine: the peer is gone, reads will see EOF
    s.destroy();
  });
});

/**
 * A loopback TCP listener (backlog 1) in a child process whose event loop is blocked, so
 * nothing ever accepts, with its queue filled by two connections: SYNs to it are dropped
 * and a connect waits. Returns the port.
 */
async function fullTcpListener(): Promise<number> {
  const child: ChildProcess = spawn(
    process.execPath,
    [
      '-e',
      `const s = require('net').createServer();
       s.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
         process.stdout.write(s.address().port + '\\n');
         Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20000); // never accept
         process.exit(0);
       });`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.track(child);
  const [line] = (await once(child.stdout!, 'data')) as [Buffer];
  const port = Number(line.toString().trim());
  expect(port).toBeGreaterThan(0);
  // Backlog 1 queues two handshaken connections; these never get accepted.
  const fillers = [net.connect(port, '127.0.0.1'), net.connect(port, '127.0.0.1')];
  cleanups.push(() => fillers.forEach((f) => f.destroy()));
  await Promise.all(fillers.map((f) => once(f, 'connect')));
  return port;
}

// The connect path vsock takes: connect() returns EINPROGRESS and the wait runs on the
// threadpool. AF_UNIX never gets there (its connect finishes inside connect()), TCP does.
describe('tcpConnect: the EINPROGRESS path, on loopback', () => {
  it('connects through the worker and the fd works as a net.Socket', async () => {
    const server = net.createServer((s) => s.pipe(s));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    cleanups.push(() => server.close());
    const { port } = server.address() as net.AddressInfo;
    const sock = socketFromFd(await addon.tcpConnect('127.0.0.1', port, 2000), { allowHalfOpen: true });
    cleanups.push(() => sock.destroy());
    const got = collect(sock);
    sock.end('round trip');
    expect((await got).toString()).toBe('round trip');
  });

  it('rejects with ECONNREFUSED read from SO_ERROR after the wait', async () => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as net.AddressInfo;
    await new Promise((r) => server.close(r));
    const err = await expectCode(addon.tcpConnect('127.0.0.1', port, 2000), 'ECONNREFUSED');
    expect(err.message).toBe(`tcp connect 127.0.0.1:${port}: Connection refused`);
  });

  // A full accept queue on a loopback TCP listener makes the kernel drop SYNs, so the
  // connect waits: the one local way to reach the poll timeout.
  it('rejects with ETIMEDOUT after timeoutMs when the connect cannot complete', async () => {
    const port = await fullTcpListener();
    const t0 = Date.now();
    const err = await expectCode(addon.tcpConnect('127.0.0.1', port, 300), 'ETIMEDOUT');
    const took = Date.now() - t0;
    expect(took).toBeGreaterThanOrEqual(280);
    expect(took).toBeLessThan(2000);
    expect(err.message).toBe(`tcp connect 127.0.0.1:${port}: Connection timed out`);
  });

  it('waits off the main thread: timers keep firing during a connect wait', async () => {
    const port = await fullTcpListener();
    let ticks = 0;
    const iv = setInterval(() => ticks++, 10);
    await expectCode(addon.tcpConnect('127.0.0.1', port, 250), 'ETIMEDOUT');
    clearInterval(iv);
    // A wait on the main thread would let no timer run before the promise settles (0 ticks).
    // Two prove the loop turned; asking for the ~25 an idle machine gets would fail on a
    // loaded one, where a starved process misses intervals (they are not caught up).
    expect(ticks).toBeGreaterThanOrEqual(2);
  });

  it('rejects non-numeric hosts and bad ports with TypeError/RangeError', () => {
    expect(() => addon.tcpConnect('localhost', 80, 100)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => addon.tcpConnect('127.0.0.1', 65536, 100)).toThrow(RangeError);
    expect(() => addon.tcpConnect('127.0.0.1', '80' as unknown as number, 100)).toThrow(TypeError);
  });
});

describe('serverAtPath: a Unix socket path on a Pipe handle, as proto listen() uses it in the probe', () => {
  afterEach(() => useUnixListener(null));

  /** Answers every connection with `text`. A connection that only checks the listener is live
   *  (proto's stale-socket check) resets before the answer: not an error here. */
  const answer = (text: string) => (s: net.Socket) => {
    s.on('error', () => {});
    s.end(text);
  };

  it('binds the path, accepts, and removes the file when it closes, as Node listen() does', async () => {
    const file = path.join(dir, 'cmd.sock');
    const server = serverAtPath(file, answer('hi'));
    await once(server, 'listening');
    expect(fs.statSync(file).isSocket()).toBe(true);
    const c = net.connect(file);
    expect((await collect(c)).toString()).toBe('hi');
    server.close();
    expect(fs.existsSync(file)).toBe(false);
  });

  it("throws bind's error with its code, before any listening", async () => {
    const file = path.join(dir, 'taken.sock');
    const first = serverAtPath(file, () => {});
    await once(first, 'listening');
    cleanups.push(() => first.close());
    expect(() => serverAtPath(file, () => {})).toThrow(expect.objectContaining({ code: 'EADDRINUSE', syscall: 'bind' }));
    // libuv reports a missing folder as EACCES, for Node's own listen() too.
    expect(() => serverAtPath(path.join(dir, 'no-such-dir', 's.sock'), () => {})).toThrow(expect.objectContaining({ code: 'EACCES' }));
  });

  it('proto listen() with it registered: the mode from the start, a stale file replaced, a live one refused', async () => {
    useUnixListener(serverAtPath);
    const file = path.join(dir, 'm.sock');
    const server = await listen(`unix:${file}`, answer('x'), { mode: 0o600 });
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    // A stale socket: the file kept while its listener goes.
    fs.linkSync(file, `${file}.keep`);
    server.close();
    fs.renameSync(`${file}.keep`, file);
    await expect(listen(`unix:${file}`, () => {})).rejects.toMatchObject({ code: 'EADDRINUSE' });
    const again = await listen(`unix:${file}`, answer('again'), { replaceStale: true });
    cleanups.push(() => again.close());
    expect((await collect(net.connect(file))).toString()).toBe('again');
    await expect(listen(`unix:${file}`, () => {}, { replaceStale: true })).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });
});
