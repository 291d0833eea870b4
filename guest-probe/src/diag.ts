/**
 * TCP socket queries through the addon's netlink sock_diag (inet_diag) code.
 *
 * COST: a LISTEN-only dump walks only the kernel's listening hash
 * (tens of microseconds), so listListeners() can run every tick; findListener() looks one
 * socket up without walking anything, so a listener already known is checked that way. socketCensus()
 * dumps every socket of the requested states; the kernel walks its whole established hash for
 * that (a fixed floor of a few hundred microseconds on a large hash, plus the sockets), but no
 * text is formatted and no JS object is made per socket: the counting happens in C. Run it at
 * a lower rate, or when /proc/net/sockstat totals grow. readTcpSockets() in proc/net-tcp.ts is
 * the /proc fallback and gives the same answers (same state numbers, same address text).
 *
 * All queries see the network namespace of the calling thread.
 */
import { loadNative } from './native.js';
import { TcpState } from './proc/net-tcp.js';

/** A TCP state name as in TcpState / TCP_STATE_NAMES. */
export type TcpStateName = keyof typeof TcpState;

/** A TCP socket in LISTEN. */
export interface TcpListener {
  family: 4 | 6;
  /** Dotted IPv4, or RFC 5952 IPv6 with IPv4-mapped addresses as ::ffff:a.b.c.d (as net-tcp.ts). */
  address: string;
  port: number;
  /** Socket inode (matches the `socket:[inode]` fd link). */
  inode: number;
  /** Connections completed by the kernel and waiting for accept() (sk_ack_backlog; /proc's rx_queue). */
  acceptQueue: number;
  /** The listen() backlog limit in force (sk_max_ack_backlog: min(backlog, net.core.somaxconn)). */
  backlog: number;
}

export interface SocketCensusOptions {
  /**
   * Bitmask of TCP states to count, bit (1 << TcpState.X) per state; default all. Build it with
   * tcpStateMask(). Asking for SYN_RECV also counts the kernel's request sockets.
   */
  states?: number;
  /** Count only sockets whose peer is this address (and port, if given). An IPv4 address also
   * matches IPv6 sockets whose peer is the IPv4-mapped form of it. */
  remote?: { address: string; port?: number };
  /** How many remotes byRemote lists (default 10, at most 100). */
  top?: number;
  /**
   * How many distinct remotes are counted one by one (default 16384, 1–65536). Past that,
   * sockets of new remotes only add to otherRemotes.
   */
  maxRemotes?: number;
}

export interface RemoteCount {
  /** Formatted as TcpListener.address (an IPv4-mapped peer stays ::ffff:a.b.c.d). */
  address: string;
  port: number;
  /** Sockets with this peer. */
  count: number;
}

export interface SocketCensus {
  /** Sockets counted (those of the requested states, matching `remote` if given). */
  total: number;
  /** Per state, every name present (0 when none); the kernel's request sockets count as SYN_RECV. */
  byState: Record<TcpStateName, number>;
  /**
   * The `top` remotes by socket count, descending; ties in order of family (IPv4 first), address
   * bytes, then port. Sockets without a peer (LISTEN) are not counted here.
   */
  byRemote: RemoteCount[];
  /** Distinct remotes counted (a lower bound when otherRemotes > 0). */
  remotesDistinct: number;
  /**
   * Sockets whose remote did not fit in the table once maxRemotes distinct remotes were seen.
   * Remotes are admitted first come, first served, so when this is above 0 a large remote first
   * seen late may be missing from byRemote.
   */
  otherRemotes: number;
}

/** Bitmask for SocketCensusOptions.states from state numbers or names. */
export function tcpStateMask(states: Iterable<number | TcpStateName>): number {
  let mask = 0;
  for (const s of states) {
    const n = typeof s === 'number' ? s : TcpState[s];
    if (!Number.isInteger(n) || n < 1 || n > 12) throw new RangeError(`not a TCP state: ${String(s)}`);
    mask |= 1 << n;
  }
  return mask;
}

/**
 * TCP listeners (IPv4 and IPv6), optionally only those on `port`. Throws an Error with the
 * errno name as `code` when the kernel refuses the query, or if the addon cannot be loaded.
 */
export function listListeners(port?: number): TcpListener[] {
  return loadNative().diagListeners(port);
}

/**
 * The listener a connection to `address`:`port` would reach, or null: one hash lookup in the
 * kernel, no dump (see diag.c). Pass a listener's own address (from listListeners()) to ask
 * whether it is still there; compare inodes to know it is the same socket. Throws like
 * listListeners().
 */
export function findListener(address: string, port: number): TcpListener | null {
  return loadNative().diagListener(address, port);
}

/** Counts TCP sockets by state and by remote; see SocketCensusOptions. Throws like listListeners(). */
export function socketCensus(opts: SocketCensusOptions = {}): SocketCensus {
  return loadNative().diagCensus(opts);
}

/**
 * True when the kernel answers a sock_diag LISTEN query (false without NETLINK_SOCK_DIAG or
 * inet_diag). Throws if the addon itself cannot be loaded, with the paths it tried.
 */
export function diagAvailable(): boolean {
  return loadNative().diagAvailable();
}
