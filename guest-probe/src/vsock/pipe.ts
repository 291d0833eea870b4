// Turns a raw stream-socket fd (AF_VSOCK, or AF_UNIX/TCP in tests) into an ordinary
// net.Socket / net.Server by handing it to a libuv Pipe handle; and listens on a Unix path
// with one (serverAtPath), without the modules Node's own listen() loads.
//
// Why a Pipe: Node's public fd paths (new net.Socket({fd}), server.listen({fd})) ask libuv's
// uv_guess_handle() what the fd is, and that knows only TCP (AF_INET/6) and PIPE (AF_UNIX);
// an AF_VSOCK fd is UNKNOWN and rejected (ERR_INVALID_FD_TYPE / EINVAL). uv_pipe_open() does
// not check the address family, and every stream operation libuv does on a pipe (read,
// writev, EAGAIN backpressure, shutdown(SHUT_WR), listen + accept4) works on any
// SOCK_STREAM fd. The Pipe class is internal (process.binding('pipe_wrap'), on Node 20's
// process.binding allow-list; deprecated DEP0111 but silent without --pending-deprecation),
// so enableVsock() runs pipeSelfTest() before relying on it.
//
// Ownership: on success the fd belongs to the returned object (closed by destroy()/close());
// if these functions throw, the fd is still the caller's to close (closeFd).
//
// node:net is required on first use: the probe's first hello goes out on the raw fd before
// it is loaded (src/dial.ts).

import type net from 'node:net';
import util from 'node:util';
import { net as nodeNet } from '../lazy-builtins.js';

/** The parts of Node's internal PipeWrap we use. */
interface PipeHandle {
  /** uv_pipe_open: 0 or a negative libuv error (older Nodes threw instead). */
  open(fd: number): number | undefined;
  /** uv_pipe_bind: 0 or a negative libuv error. libuv removes the file when the handle closes. */
  bind(path: string): number;
  close(cb?: () => void): void;
}

interface PipeWrapBinding {
  Pipe: new (type: number) => PipeHandle;
  constants: { SOCKET: number; SERVER: number; IPC: number };
}

let binding: PipeWrapBinding | undefined;

function pipeWrap(): PipeWrapBinding {
  if (binding) return binding;
  const b = (process as unknown as { binding(name: string): Partial<PipeWrapBinding> }).binding('pipe_wrap');
  if (typeof b.Pipe !== 'function' || typeof b.constants?.SOCKET !== 'number' || typeof b.constants.SERVER !== 'number')
    throw new Error("process.binding('pipe_wrap') has no Pipe class or constants");
  binding = b as PipeWrapBinding;
  return binding;
}

function uvError(code: number, syscall: string, what: string): NodeJS.ErrnoException {
  const name = util.getSystemErrorName(code);
  const err: NodeJS.ErrnoException = new Error(`${syscall} ${what}: ${name}`);
  err.code = name;
  err.errno = code;
  err.syscall = syscall;
  return err;
}

function openPipe(fd: number, type: 'SOCKET' | 'SERVER'): PipeHandle {
  if (!Number.isInteger(fd) || fd < 0) throw new RangeError(`not a file descriptor: ${fd}`);
  const { Pipe, constants } = pipeWrap();
  const handle = new Pipe(constants[type]);
  let rc: number | undefined;
  try {
    rc = handle.open(fd);
  } catch (err) {
    handle.close(); // closes only the handle: libuv did not adopt the fd
    throw err;
  }
  if (typeof rc === 'number' && rc !== 0) {
    handle.close();
    throw uvError(rc, 'uv_pipe_open', `fd ${fd}`);
  }
  return handle;
}

export interface SocketFromFdOptions {
  /** As for net.Socket: keep the writable side open after the peer's end. Default false. */
  allowHalfOpen?: boolean;
}

/** Wraps a connected stream-socket fd. Reading starts at once, like an accepted socket. */
export function socketFromFd(fd: number, opts: SocketFromFdOptions = {}): net.Socket {
  const handle = openPipe(fd, 'SOCKET');
  // `handle` is the option Node's own net.Server uses for accepted connections.
  return new (nodeNet().Socket)({
    handle,
    readable: true,
    writable: true,
    allowHalfOpen: opts.allowHalfOpen ?? false,
  } as net.SocketConstructorOpts);
}

export interface ServerFromFdOptions {
  /** Given to every accepted socket, as with net.createServer({ allowHalfOpen }). Default false. */
  allowHalfOpen?: boolean;
  /** listen() is called again on the fd with this backlog (Node's default: 511). */
  backlog?: number;
}

/** The private net.Server members serverFromFd needs; checked by pipeSelfTest(). */
interface ServerInternals {
  _handle: unknown;
  _listen2?: (address: null, port: number, addressType: number, backlog?: number) => void;
}

/** Is the private net.Server hook serverFromFd relies on still there? */
export function serverHookPresent(): boolean {
  return typeof (nodeNet().Server.prototype as unknown as ServerInternals)._listen2 === 'function';
}

/**
 * Wraps a bound, listening stream-socket fd. 'listening' is emitted on the next tick
 * (or 'error' if listen fails; the fd is closed then). server.close() closes the fd at
 * once, so the port is free again immediately; its callback still waits for accepted
 * connections to end, as for any net.Server.
 *
 * How the handle is attached: Node 20's server.listen(handle) takes a handle object
 * only if it is `instanceof TCP`; anything else, a Pipe included, falls through to the
 * `{fd}` path, which calls uv_guess_handle() and fails with EINVAL for vsock (for an
 * AF_UNIX fd it would "work" by putting a second handle on the same fd). So we do what
 * Node's own cluster worker does with a handle it received from the primary: set
 * server._handle and call server._listen2() (setupListenHandle, kept as a "legacy alias
 * ... to avoid breaking code that wraps this method"). With a handle already present,
 * setupListenHandle skips creating one and does the rest exactly as for a normal listen:
 * async id, onconnection -> net.Socket per accepted fd (libuv accept4 + uv_accept on the
 * Pipe), handle.listen(backlog), 'listening'.
 */
export function serverFromFd(fd: number, onConnection: (socket: net.Socket) => void, opts: ServerFromFdOptions = {}): net.Server {
  if (!serverHookPresent()) throw new Error('net.Server.prototype._listen2 is missing in this Node version');
  return serverOn(openPipe(fd, 'SERVER'), onConnection, opts);
}

/**
 * Listens on a Unix socket path the way Node's own server.listen(path) does (a Pipe handle
 * bound to the path, so libuv removes the file when the server closes), attached as
 * serverFromFd attaches its handle. Node's listen() goes through its cluster support, which
 * loads node:cluster and with it child_process and dgram: ten modules the probe never uses,
 * kept in its heap for good (test/bench/FINDINGS.md). Throws bind's error (EADDRINUSE, ...)
 * with its code; 'listening' follows on the next tick. Without the _listen2 hook, it is
 * Node's listen() after all. proto's listen() uses it once registered (useUnixListener).
 */
export function serverAtPath(path: string, onConnection: (socket: net.Socket) => void, opts: ServerFromFdOptions = {}): net.Server {
  if (!serverHookPresent())
    return nodeNet()
      .createServer({ allowHalfOpen: opts.allowHalfOpen ?? false }, onConnection)
      .listen(path, opts.backlog);
  const { Pipe, constants } = pipeWrap();
  const handle = new Pipe(constants.SERVER);
  const rc = handle.bind(path);
  if (rc !== 0) {
    handle.close();
    throw uvError(rc, 'bind', path);
  }
  return serverOn(handle, onConnection, opts);
}

function serverOn(handle: PipeHandle, onConnection: (socket: net.Socket) => void, opts: ServerFromFdOptions): net.Server {
  const server = nodeNet().createServer({ allowHalfOpen: opts.allowHalfOpen ?? false }, onConnection);
  const internals = server as unknown as ServerInternals;
  internals._handle = handle;
  internals._listen2!(null, -1, -1, opts.backlog);
  return server;
}
