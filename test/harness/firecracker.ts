// Emulator of Firecracker's host side of the hybrid vsock device, for ONE VM.
//
// Integration tests use it in place of a real Firecracker. Everything is AF_UNIX stream
// sockets under temporary directories: this module never creates an AF_VSOCK socket.
//
// What the host sees is Firecracker's exact contract (its docs/vsock.md,
// https://github.com/firecracker-microvm/firecracker/blob/main/docs/vsock.md, and
// src/vmm/src/devices/virtio/vsock/unix/muxer.rs; docs/orchestrator.md §1 here):
//   - guest-initiated: Firecracker connects to `<uds_path>_<port>` and writes nothing;
//   - host-initiated: the host connects to `<uds_path>`, sends `CONNECT <port>\n` and reads
//     `OK <local_port>\n` once the guest accepted.
// The guest's AF_VSOCK is stood in for by Unix sockets in a per-VM `guestDir`:
//   - `${guestDir}/host_<P>.sock` (guestHostPath): connecting there is the guest's
//     "connect to CID 2, port P"; the emulator listens on it (exposeHostPort).
//   - `${guestDir}/listen_<P>.sock` (guestListenPath): the guest's "listen on vsock port P";
//     the guest program (or the test) listens there, never the emulator.
// Known gap: by default an EOF is forwarded as a half-close, which real Firecracker does not do;
// pass `halfClose: 'firecracker'` for its shutdown semantics (see FirecrackerVsockOptions).
//
// Fault models of Firecracker vsock bugs met in the field (E2B pins 1.10–1.14, and newer
// releases brought bugs of their own); each method says what it reproduces and its source:
//   reset({ holdRx })   1.16 (#5882): RX to the guest held until the guest acks the reset;
//   bareResume()        #6100: after a bare pause/resume, host-initiated CONNECTs hang forever;
//   txStall(on)         #5958/#5969: after a restore with a TX descriptor in flight, nothing
//                       the guest sends reaches the host;
//   connectEof(on)      every CONNECT answered by EOF (the guest answers RST: #5688's port
//                       collisions after a restore, a listener that is gone);
//   the connection limit (maxConnections, FC_MAX_CONNECTIONS) is enforced at all times.

import { EventEmitter } from 'node:events';
import { promises as fsp } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/** unix/mod.rs `defs::MAX_CONNECTIONS`: connections per vsock device. */
export const FC_MAX_CONNECTIONS = 1023;
/** csm/mod.rs `defs::CONN_REQUEST_TIMEOUT_MS`: how long a host-initiated request waits for the guest. */
export const FC_CONN_REQUEST_TIMEOUT_MS = 2000;
/** csm/mod.rs `defs::CONN_SHUTDOWN_TIMEOUT_MS`: how long a closing connection may take to drain. */
export const FC_CONN_SHUTDOWN_TIMEOUT_MS = 2000;
/**
 * Emulator choice (not a Firecracker constant): how long the whole `CONNECT <port>\n` line may
 * take to arrive. Firecracker reads it with a non-blocking `read_exact` when the stream first
 * becomes readable, so a line split across writes usually fails; we approximate that with a
 * short deadline rather than depending on how the kernel happens to coalesce writes.
 */
export const CONNECT_LINE_TIMEOUT_MS = 100;
/**
 * Linux `vsock_connect`'s default `connect_timeout` (VSOCK_DEFAULT_CONNECT_TIMEOUT, 2 s): how
 * long a guest's connect waits for Firecracker's RESPONSE before it fails with ETIMEDOUT. Used
 * by txStall(), where the guest's REQUEST never reaches Firecracker.
 */
export const GUEST_CONNECT_TIMEOUT_MS = 2000;

/** muxer.rs `read_local_stream_port`: the command buffer is 32 bytes. */
const CONNECT_LINE_MAX = 32;
/** muxer.rs `allocate_local_port`: host-side ports are allocated in [2^30, 2^31). */
const LOCAL_PORT_BASE = 2 ** 30;
const LOCAL_PORT_MASK = 2 ** 30 - 1;
const VSOCK_PORT_MAX = 0xffff_ffff;
/** sizeof(sockaddr_un.sun_path) - 1. Node silently truncates longer paths, so refuse them. */
const UNIX_PATH_MAX = 107;

function assertSocketPath(socketPath: string): void {
  if (Buffer.byteLength(socketPath) > UNIX_PATH_MAX) {
    throw new RangeError(`unix socket path longer than ${UNIX_PATH_MAX} bytes: ${socketPath}`);
  }
}

function assertPort(port: number): void {
  if (!Number.isInteger(port) || port < 0 || port > VSOCK_PORT_MAX) {
    throw new RangeError(`invalid vsock port: ${port}`);
  }
}

/** Guest-facing stand-in for "connect to CID 2 (the host), port `port`". */
export function guestHostPath(guestDir: string, port: number): string {
  assertPort(port);
  return path.join(guestDir, `host_${port}.sock`);
}

/** Guest-side stand-in for an AF_VSOCK socket listening on port `port`. */
export function guestListenPath(guestDir: string, port: number): string {
  assertPort(port);
  return path.join(guestDir, `listen_${port}.sock`);
}

/** Where Firecracker connects for a guest-initiated connection: muxer.rs `format!("{}_{}", host_sock_path, port)`. */
export function hostPortPath(udsPath: string, port: number): string {
  assertPort(port);
  return `${udsPath}_${port}`;
}

/**
 * Parses a host `CONNECT <port>` command the way muxer.rs `read_local_stream_port` does:
 * UTF-8, split on whitespace, first word case-insensitively `connect`, second word a u32
 * (Rust's `u32::from_str`: ASCII digits with an optional leading `+`). Like Firecracker, any
 * further words are ignored. Returns null when the command is invalid.
 */
export function parseConnectLine(line: Uint8Array): number | null {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(line);
  } catch {
    return null;
  }
  const words = text.split(/\s+/).filter((w) => w.length > 0);
  const [verb, port] = words;
  if (verb === undefined || verb.toLowerCase() !== 'connect') return null;
  if (port === undefined || !/^\+?[0-9]+$/.test(port)) return null;
  const value = Number(port);
  return value <= VSOCK_PORT_MAX ? value : null;
}

export interface FirecrackerVsockOptions {
  /** The `uds_path` of `PUT /vsock`. */
  udsPath: string;
  /** Directory holding the guest's AF_VSOCK stand-ins (host_P.sock, listen_P.sock). */
  guestDir: string;
  /** Connection limit (both directions together). Default FC_MAX_CONNECTIONS (1023). */
  maxConnections?: number;
  /** Guest accept deadline for host-initiated connections. Default FC_CONN_REQUEST_TIMEOUT_MS. */
  connRequestTimeoutMs?: number;
  /** Deadline for the whole CONNECT line. Default CONNECT_LINE_TIMEOUT_MS. */
  connectLineTimeoutMs?: number;
  /**
   * What an EOF from one side does (default 'preserve'):
   * - 'preserve': a half-close, forwarded as end() to the other side, which may keep sending.
   * - 'firecracker': what csm/connection.rs does. A host EOF (0-byte read) makes Firecracker
   *   send SHUTDOWN(RCV|SEND) to the guest: the guest reads what is left, then EOF, and can send
   *   nothing more; the connection then goes away. A guest shutdown never reaches the host
   *   stream as an EOF; the host sees EOF only when the guest closes and the connection is
   *   removed. Unix stand-ins cannot tell a guest shutdown(SHUT_WR) from close(), so a guest
   *   EOF is taken as close(). Either way: the closing side's bytes are delivered, then EOF,
   *   nothing more moves, and both streams are closed (within FC_CONN_SHUTDOWN_TIMEOUT_MS).
   */
  halfClose?: 'preserve' | 'firecracker';
}

export interface FirecrackerVsockStats {
  /** Guest-initiated connections that were established (cumulative). */
  guestInitiated: number;
  /** Host-initiated connections that were established, i.e. got `OK` (cumulative). */
  hostInitiated: number;
  /** Connection attempts that failed, either direction (cumulative). */
  refused: number;
  /** Connections currently counted against the limit (Firecracker's `conn_map`). */
  live: number;
}

export type Initiator = 'guest' | 'host';

export type RefusalReason =
  /** guest-initiated: nothing accepts at `<uds_path>_<port>` (missing or stale file). */
  | 'host-unreachable'
  /** either direction: the connection limit is reached. */
  | 'connection-limit'
  /** host-initiated: bad verb, bad port, no LF within 32 bytes, or EOF before the LF. */
  | 'malformed-connect'
  /** host-initiated: the CONNECT line did not arrive within connectLineTimeoutMs. */
  | 'connect-line-timeout'
  /** host-initiated: nothing listens on the guest port (the guest answered RST). */
  | 'no-guest-listener'
  /** host-initiated: the guest did not answer within connRequestTimeoutMs. */
  | 'guest-timeout'
  /** host-initiated: the guest answered RST although it listens (the connectEof fault). */
  | 'guest-reset'
  /** guest-initiated: the guest's REQUEST never reached Firecracker and its connect timed out (txStall). */
  | 'guest-connect-timeout'
  /** the initiating side went away while the connection was being set up. */
  | 'aborted';

export interface ConnectionInfo {
  initiator: Initiator;
  /** The vsock port on the guest's side of the host (guest-initiated) or the guest port (host-initiated). */
  port: number;
  /** Host-initiated only: the local port reported in `OK <localPort>`. */
  localPort?: number;
}

export interface RefusalInfo {
  initiator: Initiator;
  /** Unknown (null) when the host connection is refused before its CONNECT line is read. */
  port: number | null;
  reason: RefusalReason;
}

export type FirecrackerVsockEvents = {
  /** A connection was established (bytes can flow). */
  established: [ConnectionInfo];
  /** A connection left the live set (closed, reset, or aborted during setup). */
  closed: [ConnectionInfo];
  refused: [RefusalInfo];
};

type Side = 'host' | 'guest';
const otherSide = (side: Side): Side => (side === 'host' ? 'guest' : 'host');

interface SpliceOwner {
  readonly blackholed: boolean;
  /** Reads from this side are held (left in its socket buffer) for now: see holdRx / txStall. */
  holds(side: Side): boolean;
  readonly halfClose: 'preserve' | 'firecracker';
  /** The splice left the live set. `aborted`: its initiator went away during setup. */
  spliceDone(splice: Splice, aborted: boolean): void;
}

/**
 * One connection in Firecracker's `conn_map`: the host-side Unix stream and the guest-side
 * stand-in, spliced byte for byte. Created in 'pending' state with only the initiator's
 * socket; `open()` is called once the peer socket is connected.
 */
class Splice {
  state: 'pending' | 'open' | 'dead' = 'pending';
  private readonly sockets: Record<Side, net.Socket | null> = { host: null, guest: null };
  private readonly closed: Record<Side, boolean> = { host: false, guest: false };
  /** EOF received from this side before the splice opened, to forward on open. */
  private readonly earlyEnd: Record<Side, boolean> = { host: false, guest: false };
  /** Bytes from the initiator to forward on open (the rest of the CONNECT chunk). */
  private early: Buffer | null = null;
  /** 'firecracker' half-close mode: the connection is draining towards its end. */
  private closing = false;
  /** This side is paused until the other side's socket drains (backpressure). */
  private readonly draining: Record<Side, boolean> = { host: false, guest: false };
  /** While pending: the peer socket being dialled. */
  dialing: net.Socket | null = null;
  /** Setup deadline while pending; drain deadline while closing. */
  timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly owner: SpliceOwner,
    readonly info: ConnectionInfo,
  ) {}

  /** Takes ownership of `socket` as `side`. The socket stays paused until open(). */
  attach(side: Side, socket: net.Socket): void {
    this.sockets[side] = socket;
    socket.pause();
    socket.on('data', (chunk: Buffer) => this.onData(side, chunk));
    socket.on('end', () => this.onEnd(side));
    socket.on('error', () => {
      // A 'close' (hadError = true) follows; handled there.
    });
    socket.on('close', (hadError: boolean) => this.onClose(side, hadError));
  }

  /** Queues bytes the initiator sent before the splice opened. */
  addEarlyBytes(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.early = this.early ? Buffer.concat([this.early, bytes]) : bytes;
  }

  open(): void {
    if (this.state !== 'pending') return;
    this.state = 'open';
    this.clearSetup();
    if (this.early) {
      const bytes = this.early;
      this.early = null;
      this.forward('host', bytes);
    }
    for (const side of ['host', 'guest'] as const) if (this.earlyEnd[side]) this.forwardEnd(side);
    this.applyHolds();
  }

  /** Pauses the sides whose reads the owner holds, resumes the others (once open). */
  applyHolds(): void {
    if (this.state !== 'open') return;
    for (const side of ['host', 'guest'] as const) {
      const socket = this.sockets[side];
      if (!socket) continue;
      if (this.owner.holds(side)) socket.pause();
      else if (!this.draining[side]) socket.resume();
    }
  }

  /** Destroys both sides at once (transport reset, restore, close, setup failure). */
  kill(aborted = false): void {
    if (this.state === 'dead') return;
    this.dialing?.destroy();
    this.sockets.host?.destroy();
    this.sockets.guest?.destroy();
    this.finish(aborted);
  }

  private clearSetup(): void {
    this.dialing = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private finish(aborted: boolean): void {
    if (this.state === 'dead') return;
    this.state = 'dead';
    this.clearSetup();
    this.owner.spliceDone(this, aborted);
  }

  private onData(side: Side, chunk: Buffer): void {
    if (this.state === 'open') this.forward(side, chunk);
    // Sockets stay paused while pending, so this should not happen; keep the bytes anyway.
    else if (this.state === 'pending') this.addEarlyBytes(chunk);
  }

  /** Forwards bytes read from `from` to the other side, with backpressure. */
  private forward(from: Side, chunk: Buffer): void {
    // Blackhole: bytes read while it is on are discarded, never delivered later.
    // Closing ('firecracker' mode): nothing moves after the EOF.
    if (this.owner.blackholed || this.closing) return;
    const src = this.sockets[from];
    const dst = this.sockets[otherSide(from)];
    if (!dst || dst.destroyed || dst.writableEnded) return;
    if (!dst.write(chunk) && src) {
      src.pause();
      this.draining[from] = true;
      dst.once('drain', () => {
        this.draining[from] = false;
        this.applyHolds();
      });
    }
  }

  private onEnd(side: Side): void {
    if (this.state === 'pending') this.earlyEnd[side] = true;
    else if (this.state === 'open') this.forwardEnd(side);
  }

  /** EOF on one side becomes end() (shutdown of writes) on the other; see `halfClose`. */
  private forwardEnd(from: Side): void {
    // Blackhole: the EOF is dropped like data; the peer is never told.
    if (this.owner.blackholed || this.closing) return;
    const dst = this.sockets[otherSide(from)];
    if (!dst || dst.destroyed || dst.writableEnded) return;
    if (this.owner.halfClose === 'preserve') {
      dst.end();
      return;
    }
    // 'firecracker': deliver what is buffered, then EOF, then drop both streams
    // (LocalClosed / PeerClosed(true, true) → RST → remove_connection).
    this.closing = true;
    this.timer = setTimeout(() => this.kill(), FC_CONN_SHUTDOWN_TIMEOUT_MS);
    dst.end(() => this.kill());
  }

  private onClose(side: Side, hadError: boolean): void {
    this.closed[side] = true;
    if (this.state === 'pending') {
      // The initiator went away during setup.
      this.kill(true);
      return;
    }
    if (this.state !== 'open') return;
    const socket = this.sockets[side];
    const clean = !hadError && socket !== null && socket.readableEnded && socket.writableFinished;
    if (!clean) {
      // An abrupt close (reset, error, destroy) on one side kills the connection: in
      // Firecracker a host stream error kills the connection (RST to the guest), and a guest
      // RST removes the connection and drops the host stream.
      this.sockets[otherSide(side)]?.destroy();
    }
    // After a clean close both directions have been shut down; the other side closes by itself
    // once it has flushed what we wrote to it.
    if (this.closed.host && this.closed.guest) this.finish(false);
  }
}

function listen(server: net.Server, socketPath: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once('error', onError);
    server.listen(socketPath, () => {
      server.off('error', onError);
      server.on('error', () => {
        // Errors after listening (e.g. EMFILE on accept) are not fatal to the emulator.
      });
      resolve();
    });
  });
}

function closeServer(server: net.Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      resolve();
      return;
    }
    server.close(() => resolve());
  });
}

/**
 * The host side of one VM's vsock device.
 *
 *   const vm = new FirecrackerVsock({ udsPath, guestDir });
 *   await vm.start();                                // PUT /vsock binds uds_path
 *   const connectTo = await vm.exposeHostPort(52000); // guest "connect(CID 2, 52000)" path
 */
export class FirecrackerVsock extends EventEmitter<FirecrackerVsockEvents> implements SpliceOwner {
  readonly guestDir: string;
  private currentUdsPath: string;
  private readonly maxConnections: number;
  private readonly connRequestTimeoutMs: number;
  private readonly connectLineTimeoutMs: number;
  readonly halfClose: 'preserve' | 'firecracker';

  private hostServer: net.Server | null = null;
  private readonly guestServers = new Map<number, { server: net.Server; ready: Promise<string> }>();
  /** Firecracker's `conn_map`: pending and established connections. */
  private readonly conns = new Set<Splice>();
  /**
   * Host streams whose CONNECT line is still being read (muxer.rs `EpollListener::LocalStream`),
   * each with a function that drops it silently.
   */
  private readonly handshakes = new Map<net.Socket, () => void>();
  /** Short-lived host connections made only to be dropped (limit reached, see onGuestConnection). */
  private readonly strays = new Set<net.Socket>();
  /** Socket files this emulator bound and must remove. */
  private readonly ownedFiles = new Set<string>();

  /** muxer.rs: `local_port_last` starts at (1 << 30) - 1; `local_port_set` holds ports in use. */
  private localPortLast = LOCAL_PORT_BASE - 1;
  private readonly localPorts = new Set<number>();

  private blackholeOn = false;
  /**
   * Firecracker's `pending_event_ack` RX gate. 'all': after a 1.16 transport reset, nothing
   * goes to the guest until it acks (host-initiated requests wait, host→guest bytes stay in
   * the host stream). 'requests': the gate #6100 arms on a bare resume, with no reset for the
   * guest to ack: only host-initiated connection requests are held (guest-initiated
   * connections keep working, as the PR says).
   */
  private rxGate: 'all' | 'requests' | null = null;
  /** Host-initiated connections whose REQUEST waits behind the RX gate, with how to send it. */
  private readonly heldRequests = new Map<Splice, () => void>();
  private txStalled = false;
  /** Guest connects the emulator swallowed while TX is stalled (txStall), until their timeout. */
  private readonly stalledGuests = new Set<net.Socket>();
  private connectEofOn = false;
  private started = false;
  private closing: Promise<void> | null = null;
  private readonly counters = { guestInitiated: 0, hostInitiated: 0, refused: 0 };

  constructor(options: FirecrackerVsockOptions) {
    super();
    this.currentUdsPath = options.udsPath;
    this.guestDir = options.guestDir;
    this.maxConnections = options.maxConnections ?? FC_MAX_CONNECTIONS;
    this.connRequestTimeoutMs = options.connRequestTimeoutMs ?? FC_CONN_REQUEST_TIMEOUT_MS;
    this.connectLineTimeoutMs = options.connectLineTimeoutMs ?? CONNECT_LINE_TIMEOUT_MS;
    this.halfClose = options.halfClose ?? 'preserve';
    if (!Number.isInteger(this.maxConnections) || this.maxConnections < 0) {
      throw new RangeError(`invalid maxConnections: ${this.maxConnections}`);
    }
    assertSocketPath(guestListenPath(this.guestDir, VSOCK_PORT_MAX));
    assertSocketPath(this.currentUdsPath);
  }

  /** The current `uds_path` (changes with moveUds). */
  get udsPath(): string {
    return this.currentUdsPath;
  }

  get blackholed(): boolean {
    return this.blackholeOn;
  }

  guestHostPath(port: number): string {
    return guestHostPath(this.guestDir, port);
  }

  guestListenPath(port: number): string {
    return guestListenPath(this.guestDir, port);
  }

  /**
   * Binds `udsPath` (muxer.rs `VsockMuxer::new` → `UnixListener::bind`). Like Firecracker it
   * fails (EADDRINUSE) if the path already exists: remove a stale file first.
   */
  async start(): Promise<void> {
    if (this.closing) throw new Error('FirecrackerVsock is closed');
    if (this.started) throw new Error('FirecrackerVsock already started');
    this.started = true;
    await fsp.mkdir(this.guestDir, { recursive: true });
    this.hostServer = await this.listenHost(this.currentUdsPath);
  }

  /**
   * Lets the guest connect to host port `port`: listens on guestHostPath(port) and returns that
   * path. Idempotent per port.
   */
  exposeHostPort(port: number): Promise<string> {
    this.assertRunning();
    const existing = this.guestServers.get(port);
    if (existing) return existing.ready;
    const socketPath = this.guestHostPath(port);
    assertSocketPath(socketPath);
    assertSocketPath(hostPortPath(this.currentUdsPath, port));
    const server = net.createServer({ allowHalfOpen: true }, (socket) => this.onGuestConnection(port, socket));
    const ready = listen(server, socketPath).then(
      () => {
        this.ownedFiles.add(socketPath);
        return socketPath;
      },
      (err: unknown) => {
        this.guestServers.delete(port);
        throw err;
      },
    );
    this.guestServers.set(port, { server, ready });
    return ready;
  }

  /**
   * Snapshot TRANSPORT_RESET (device.rs `prepare_save`): on resume the guest driver closes
   * every established connection, so every connection of this VM dies, both sides of every
   * splice, both directions. Listeners survive: the emulator's (host_P, uds_path) and the
   * guest's own listen_P sockets. Host streams still sending their CONNECT line are not
   * connections yet and are left alone.
   */
  reset(opts: { holdRx?: boolean } = {}): void {
    for (const splice of [...this.conns]) splice.kill();
    if (opts.holdRx) this.rxGate = 'all';
  }

  /**
   * The guest acknowledged the TRANSPORT_RESET (its driver's `handle_evq_event`): the RX gate
   * opens, held connection requests go to the guest, held bytes flow. This also clears the
   * gate bareResume() armed: a later snapshot publishes a real reset, which the guest acks.
   */
  ackTransportReset(): void {
    this.rxGate = null;
    for (const splice of this.conns) splice.applyHolds();
    const held = [...this.heldRequests.values()];
    this.heldRequests.clear();
    for (const send of held) send();
  }

  /**
   * Fault, firecracker#6100 (unreleased fix; 1.16.x): `PATCH /vm Paused` then `Resumed`, no
   * snapshot. resume_vm kicks the device, and kick() arms the TRANSPORT_RESET RX gate with
   * no reset event for the guest to ack: from now on every new host-initiated connection
   * hangs forever. Its `CONNECT` is read, but the REQUEST never reaches the guest, so no `OK`
   * comes, no EOF, and not even CONN_REQUEST_TIMEOUT_MS fires (Firecracker applies it only
   * reactively, #5688). Guest-initiated and established connections keep working.
   * ackTransportReset() (after a later snapshot's reset) clears it.
   */
  bareResume(): void {
    if (this.rxGate === null) this.rxGate = 'requests';
  }

  /**
   * Fault, firecracker#5958 / #5969 (v1.16.0, fixed in 1.16.1): a snapshot taken while a TX
   * descriptor was available but unconsumed. With EVENT_IDX the restored guest thinks it has
   * already notified the host and never kicks the TX queue again, so nothing the guest sends
   * reaches Firecracker:
   *   - a guest connect's REQUEST is never seen: no connect to `<uds_path>_<port>`, and the
   *     guest's connect times out (GUEST_CONNECT_TIMEOUT_MS, then the guest socket closes);
   *   - a host CONNECT reaches the guest, which accepts, but its RESPONSE rots in the TX
   *     queue: no `OK`, and the request is killed after CONN_REQUEST_TIMEOUT_MS (EOF);
   *   - bytes the guest writes on open connections stay in its socket.
   * Call it with `true` after reset() (the restore); `false` is a Firecracker with the fix.
   */
  txStall(on: boolean): void {
    this.txStalled = on;
    for (const splice of this.conns) splice.applyHolds();
  }

  /**
   * Fault: every `CONNECT <port>` is answered by EOF without `OK`, whether or not the guest
   * listens: what the host sees when the guest answers RST (docs/vsock.md "If no one is
   * listening, Firecracker will terminate the host connection"; after a restore, a REQUEST
   * that collides with a connection the guest still has, #5688).
   */
  connectEof(on: boolean): void {
    this.connectEofOn = on;
  }

  /** SpliceOwner: host→guest reads wait behind the RX gate; guest→host reads behind a TX stall. */
  holds(side: Side): boolean {
    return side === 'host' ? this.rxGate === 'all' : this.txStalled;
  }

  /**
   * While on, established connections stay open but no bytes (nor EOFs) are forwarded in
   * either direction; what is read meanwhile is dropped. New connections are still made (the
   * `OK` reply is still written). Models Firecracker bugs where a reset never reaches the guest.
   */
  blackhole(on: boolean): void {
    this.blackholeOn = on;
  }

  /**
   * Restore with `vsock_override: { uds_path }` (vmm/persist.rs): existing connections are
   * reset, the old uds_path listener is closed and its file removed, and `newPath` is bound.
   * Guest-initiated connections then go to `<newPath>_<port>`.
   */
  async moveUds(newPath: string): Promise<void> {
    this.assertRunning();
    if (!this.hostServer) throw new Error('FirecrackerVsock not started');
    assertSocketPath(newPath);
    for (const port of this.guestServers.keys()) assertSocketPath(hostPortPath(newPath, port));
    this.reset();
    // A restore is a new Firecracker process: half-read CONNECT lines die too.
    for (const drop of [...this.handshakes.values()]) drop();
    const oldPath = this.currentUdsPath;
    const oldServer = this.hostServer;
    this.hostServer = null;
    await closeServer(oldServer);
    await fsp.rm(oldPath, { force: true });
    this.ownedFiles.delete(oldPath);
    this.currentUdsPath = newPath;
    this.hostServer = await this.listenHost(newPath);
  }

  stats(): FirecrackerVsockStats {
    return { ...this.counters, live: this.conns.size };
  }

  /** Closes every connection and listener and removes the socket files it created. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.reset();
    for (const drop of [...this.handshakes.values()]) drop();
    for (const socket of this.strays) socket.destroy();
    for (const socket of this.stalledGuests) socket.destroy();
    const servers = [...this.guestServers.values()].map(async ({ server, ready }) => {
      await ready.catch(() => undefined);
      await closeServer(server);
    });
    if (this.hostServer) servers.push(closeServer(this.hostServer));
    this.hostServer = null;
    await Promise.all(servers);
    await Promise.all([...this.ownedFiles].map((file) => fsp.rm(file, { force: true })));
    this.ownedFiles.clear();
  }

  /** SpliceOwner: a connection left `conn_map` (muxer.rs `remove_connection` frees its local port). */
  spliceDone(splice: Splice, aborted: boolean): void {
    if (!this.conns.delete(splice)) return;
    this.heldRequests.delete(splice);
    if (splice.info.localPort !== undefined) this.localPorts.delete(splice.info.localPort);
    if (aborted) this.refuse(splice.info.initiator, splice.info.port, 'aborted');
    this.emit('closed', splice.info);
  }

  private assertRunning(): void {
    if (this.closing) throw new Error('FirecrackerVsock is closed');
  }

  private async listenHost(socketPath: string): Promise<net.Server> {
    const server = net.createServer({ allowHalfOpen: true }, (socket) => this.onHostConnection(socket));
    await listen(server, socketPath);
    this.ownedFiles.add(socketPath);
    return server;
  }

  private refuse(initiator: Initiator, port: number | null, reason: RefusalReason): void {
    if (this.closing) return;
    this.counters.refused++;
    this.emit('refused', { initiator, port, reason });
  }

  private established(splice: Splice): void {
    if (splice.info.initiator === 'guest') this.counters.guestInitiated++;
    else this.counters.hostInitiated++;
    this.emit('established', splice.info);
  }

  /** muxer.rs `allocate_local_port`: round-robin in [2^30, 2^31), skipping ports in use. */
  private allocateLocalPort(): number {
    for (;;) {
      // (last + 1) & !(1 << 31) | (1 << 30), in JS-safe arithmetic.
      this.localPortLast = LOCAL_PORT_BASE + ((this.localPortLast + 1) & LOCAL_PORT_MASK);
      if (!this.localPorts.has(this.localPortLast)) {
        this.localPorts.add(this.localPortLast);
        return this.localPortLast;
      }
    }
  }

  // ---- guest-initiated -------------------------------------------------------------------

  /** The guest connected to host_P.sock: its "connect(CID 2, P)" (muxer.rs `handle_peer_request_pkt`). */
  private onGuestConnection(port: number, guest: net.Socket): void {
    guest.pause();
    guest.on('error', () => undefined);
    if (this.closing) {
      guest.destroy();
      return;
    }
    const hostPath = hostPortPath(this.currentUdsPath, port);

    if (this.txStalled) {
      // txStall: the REQUEST never reaches Firecracker; the guest's connect times out.
      this.stalledGuests.add(guest);
      const timer = setTimeout(() => guest.destroy(), GUEST_CONNECT_TIMEOUT_MS);
      guest.once('close', () => {
        clearTimeout(timer);
        this.stalledGuests.delete(guest);
        this.refuse('guest', port, 'guest-connect-timeout');
      });
      return;
    }

    if (this.conns.size >= this.maxConnections) {
      // Firecracker connects to <uds_path>_<port> first and only then fails `add_connection`
      // (TooManyConnections): the host listener sees a connection dropped at once with no
      // bytes, and the guest gets RST.
      guest.destroy();
      const stray = net.connect({ path: hostPath });
      this.strays.add(stray);
      stray.on('error', () => undefined);
      stray.on('connect', () => stray.destroy());
      stray.on('close', () => this.strays.delete(stray));
      this.refuse('guest', port, 'connection-limit');
      return;
    }

    const splice = new Splice(this, { initiator: 'guest', port });
    this.conns.add(splice);
    splice.attach('guest', guest);

    // Firecracker's connect is a blocking UnixStream::connect and writes NO handshake bytes.
    const host = net.connect({ path: hostPath, allowHalfOpen: true });
    host.pause();
    splice.dialing = host;
    const onError = () => {
      // Missing path or stale file (ENOENT / ECONNREFUSED): Firecracker queues an RST, the
      // real guest's connect() fails with ECONNRESET. Here the guest's socket is destroyed.
      // A full accept backlog (EAGAIN) lands here too; real Firecracker would instead block
      // its event thread in connect() (an inference, see the reference note).
      splice.kill();
      this.refuse('guest', port, 'host-unreachable');
    };
    host.once('error', onError);
    host.once('connect', () => {
      host.off('error', onError);
      if (splice.state !== 'pending') {
        host.destroy();
        return;
      }
      splice.attach('host', host);
      splice.open();
      this.established(splice);
    });
    // If the guest leaves while we dial, Splice.kill() destroys `host` (splice.dialing).
  }

  // ---- host-initiated --------------------------------------------------------------------

  /** A host client connected to uds_path (muxer.rs `EpollListener::HostSock`). */
  private onHostConnection(socket: net.Socket): void {
    socket.on('error', () => undefined);
    if (this.closing) {
      socket.destroy();
      return;
    }
    if (this.conns.size >= this.maxConnections) {
      // "If we're already maxed-out on connections, we'll just accept and immediately discard
      // this potentially new one."
      socket.destroy();
      this.refuse('host', null, 'connection-limit');
      return;
    }
    this.readConnectLine(socket);
  }

  /**
   * Reads `CONNECT <port>\n` (muxer.rs `read_local_stream_port`): up to 32 bytes, up to LF.
   * Differences from Firecracker, chosen for deterministic tests:
   *   - Firecracker does one non-blocking `read_exact` of 10 bytes and then reads byte by byte,
   *     so a line split across writes fails if the first part arrives alone. We accept a split
   *     line only if the whole of it arrives within connectLineTimeoutMs (100 ms).
   *   - Firecracker parses whatever it has after 32 bytes even without an LF; we require the LF
   *     within the first 32 bytes.
   * Any failure closes the stream with no reply. Bytes after the LF in the same chunk are kept
   * and forwarded to the guest after `OK` (Firecracker leaves them unread in the socket).
   */
  private readConnectLine(socket: net.Socket): void {
    let buffered: Buffer = Buffer.alloc(0);
    const cleanup = () => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      this.handshakes.delete(socket);
    };
    const fail = (reason: RefusalReason) => {
      cleanup();
      socket.destroy();
      this.refuse('host', null, reason);
    };
    const onData = (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const lf = buffered.subarray(0, CONNECT_LINE_MAX).indexOf(0x0a);
      if (lf < 0) {
        if (buffered.length >= CONNECT_LINE_MAX) fail('malformed-connect');
        return;
      }
      const port = parseConnectLine(buffered.subarray(0, lf + 1));
      if (port === null) {
        fail('malformed-connect');
        return;
      }
      cleanup();
      socket.pause();
      this.startHostInitiated(socket, port, buffered.subarray(lf + 1));
    };
    // EOF before the LF: Firecracker's read_exact fails and the stream is dropped.
    const onEnd = () => fail('malformed-connect');
    const onClose = () => {
      cleanup();
      this.refuse('host', null, 'aborted');
    };
    const timer = setTimeout(() => fail('connect-line-timeout'), this.connectLineTimeoutMs);
    this.handshakes.set(socket, () => {
      cleanup();
      socket.destroy();
    });
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('close', onClose);
  }

  /** The CONNECT line was valid: ask the guest (VSOCK_OP_REQUEST) and wait for its answer. */
  private startHostInitiated(host: net.Socket, port: number, rest: Buffer): void {
    if (this.closing) {
      host.destroy();
      return;
    }
    if (this.conns.size >= this.maxConnections) {
      // muxer.rs `add_connection`: TooManyConnections, the stream is dropped.
      host.destroy();
      this.refuse('host', port, 'connection-limit');
      return;
    }
    if (this.connectEofOn) {
      // connectEof: the guest answers RST; the muxer drops the stream, the host reads EOF.
      host.destroy();
      this.refuse('host', port, 'guest-reset');
      return;
    }
    const localPort = this.allocateLocalPort();
    const splice = new Splice(this, { initiator: 'host', port, localPort });
    this.conns.add(splice);
    splice.attach('host', host);
    splice.addEarlyBytes(rest);
    if (this.rxGate !== null) {
      // Behind the RX gate: the REQUEST waits in the muxer, with no timeout running.
      this.heldRequests.set(splice, () => this.requestGuest(splice, host, port, localPort));
      return;
    }
    this.requestGuest(splice, host, port, localPort);
  }

  /** Sends the guest VSOCK_OP_REQUEST for a host-initiated connection and waits for its answer. */
  private requestGuest(splice: Splice, host: net.Socket, port: number, localPort: number): void {
    if (splice.state !== 'pending') return;
    // "Accept" is the Unix connect completing, i.e. the connection is queued on the guest
    // listener: the moment a Linux guest's vsock transport answers RESPONSE.
    const guest = net.connect({ path: this.guestListenPath(port), allowHalfOpen: true });
    guest.pause();
    splice.dialing = guest;
    const fail = (reason: RefusalReason) => {
      if (splice.state !== 'pending') return;
      // The host sees EOF without "OK" (the muxer drops the connection).
      splice.kill();
      this.refuse('host', port, reason);
    };
    // CONN_REQUEST_TIMEOUT_MS: a request the guest never answers is killed.
    splice.timer = setTimeout(() => fail('guest-timeout'), this.connRequestTimeoutMs);
    // Nothing listens (ENOENT / ECONNREFUSED): the guest answers RST.
    const onError = () => fail('no-guest-listener');
    guest.once('error', onError);
    guest.once('connect', () => {
      guest.off('error', onError);
      if (splice.state !== 'pending') {
        guest.destroy();
        return;
      }
      // txStall: the guest accepted, but its RESPONSE never leaves the TX queue: no OK, and
      // the request timer kills the connection (the host reads EOF).
      if (this.txStalled) return;
      // Guest RESPONSE: "OK <local_port>\n" in one write (muxer.rs `apply_conn_mutation`), then
      // the stream carries raw bytes.
      host.write(`OK ${localPort}\n`);
      splice.attach('guest', guest);
      splice.open();
      this.established(splice);
    });
  }
}
