// Watches the expected port for a LISTEN socket and reports the edges: bound (with the
// owning pid, found through the socket's inode) and unbound. Sampled fast during boot, so
// the bind time is known to within the boot interval (within a second for a listener that a
// connection on the loopback does not reach: see sockDiagListenerQuery).
//
// Where LISTEN sockets come from: a netlink sock_diag query (the addon; a dump ~0.03–0.07 ms, a
// listener looked up alone ~0.005) when the kernel answers one, else
// /proc/net/tcp{,6} (milliseconds of kernel time per read, more under an MMDS poll storm).
// The probe reports which one it uses.

import type { EventBody } from '@vsockdiag/proto';
import { monotonicMs } from './clock.js';
import { type TcpListener, diagAvailable, findListener, listListeners } from './diag.js';
import { TcpState, findSocketOwner, listPids, readTcpSockets } from './proc/index.js';

export interface ListeningSocket {
  address: string;
  port: number;
  inode: number;
  /** Connections accepted by the kernel, waiting for the target's accept(). */
  acceptQueue: number;
}

export type ListenerSource = 'sock_diag' | 'proc';

export interface ListenerQuery {
  source: ListenerSource;
  /** Why the cheaper source is not used, when it is not. */
  fallbackReason?: string;
  listening(port: number): ListeningSocket[];
}

const LISTEN_ONLY = new Set<number>([TcpState.LISTEN]);

export function procListenerQuery(procRoot: string, fallbackReason?: string): ListenerQuery {
  return {
    source: 'proc',
    ...(fallbackReason ? { fallbackReason } : {}),
    listening: (port) =>
      readTcpSockets({ states: LISTEN_ONLY, localPort: port }, procRoot).map((s) => ({
        address: s.localAddress,
        port: s.localPort,
        inode: s.inode,
        acceptQueue: s.rxQueue,
      })),
  };
}

/** While no listener is known, the full dump runs at most this often; in between, lookups of
 *  the loopback find the listener a connection from inside the guest would reach. */
export const UNKNOWN_DUMP_EVERY_MS = 1000;
/** A lookup of 127.0.0.1 reaches a listener on 0.0.0.0 (envd binds there), on 127.0.0.1, or on
 *  a dual-stack [::]; one of ::1, a listener on [::] or [::1]. */
const LOOPBACK = ['127.0.0.1', '::1'] as const;

/**
 * Listeners from sock_diag. Once one is known, each query first asks the kernel for it alone
 * (findListener: a hash lookup) and dumps the listening sockets when that socket is gone or
 * another answers in its place. The dump walks the kernel's whole listening hash, twice (IPv4,
 * IPv6): while nothing listens yet (a boot, or a target hung before its bind, at 25 ticks a
 * second) it was most of a tick's kernel work. So while none is known, each query looks the
 * loopback up first (two hash lookups), and dumps only every UNKNOWN_DUMP_EVERY_MS, for a
 * listener on another address alone. A second listener that joins the port beside the known one
 * is not reported while the known one stays; only the first listener was ever reported
 * (ListenerWatcher).
 */
export function sockDiagListenerQuery(find = findListener, dump = listListeners, now: () => number = monotonicMs): ListenerQuery {
  let known: TcpListener | null = null;
  let dumpedAt = Number.NEGATIVE_INFINITY;
  return {
    source: 'sock_diag',
    listening(port) {
      // A lookup that throws (a kernel that refuses them, a descriptor limit) leaves this query
      // to the dump, as before lookups; the dump's own errors still surface.
      let refused = false;
      if (known !== null && known.port === port) {
        const still = lookUp(find, known.address, port);
        if (still && still.inode === known.inode) {
          known = still;
          return [still];
        }
        refused = still === undefined;
        // Gone, or another socket in its place: found again below, by the loopback lookups or
        // else by a dump at once (not a second later).
        known = null;
        dumpedAt = Number.NEGATIVE_INFINITY;
      }
      for (let i = 0; i < LOOPBACK.length && !refused; i++) {
        const reached = lookUp(find, LOOPBACK[i]!, port);
        if (reached === undefined) refused = true;
        else if (reached !== null) {
          known = reached;
          return [reached];
        }
      }
      const t = now();
      if (!refused && t - dumpedAt < UNKNOWN_DUMP_EVERY_MS) return [];
      dumpedAt = t;
      const all = dump(port);
      known = all[0] ?? null;
      return all;
    },
  };
}

/** find's answer, or undefined when it threw. */
function lookUp(find: typeof findListener, address: string, port: number): TcpListener | null | undefined {
  try {
    return find(address, port);
  } catch {
    return undefined;
  }
}

/** sock_diag when the kernel answers it (it only sees the real /proc's namespace), else /proc. */
export function pickListenerQuery(procRoot: string): ListenerQuery {
  if (procRoot !== '/proc') return procListenerQuery(procRoot);
  let why: string;
  try {
    if (diagAvailable()) return sockDiagListenerQuery();
    why = 'the kernel did not answer a sock_diag query';
  } catch (err) {
    why = (err as Error).message;
  }
  return procListenerQuery(procRoot, why);
}

export interface ListenerOptions {
  port: number;
  procRoot: string;
  query: ListenerQuery;
  emit: (body: EventBody) => void;
  /** The target's pid, checked first when looking for the socket's owner. */
  targetPid: () => number | null;
}

/** Queue depth changes are reported at once when the queue empties or starts filling,
 *  otherwise at most this often (a busy server's queue moves all the time). */
const QUEUE_REPORT_MS = 1000;

export class ListenerWatcher {
  private inode = 0;
  private bound = false;
  private queue = 0;
  private queueSentAt = 0;

  constructor(
    private readonly opts: ListenerOptions,
    private readonly now: () => number = Date.now,
  ) {}

  tick(): void {
    const { port, procRoot } = this.opts;
    const first = this.opts.query.listening(port)[0];
    if (!first) {
      if (this.bound) {
        this.bound = false;
        this.inode = 0;
        this.opts.emit({ kind: 'listener.unbound', port });
      }
      return;
    }
    if (this.bound && first.inode === this.inode) {
      this.watchQueue(first.acceptQueue);
      return;
    }
    this.bound = true;
    this.queue = first.acceptQueue;
    this.queueSentAt = this.now();
    this.inode = first.inode;
    const target = this.opts.targetPid();
    // The owner is usually the target; only otherwise scan every process's fds (rare: on an edge).
    const owner =
      (target !== null ? findSocketOwner(first.inode, [target], procRoot) : null) ??
      findSocketOwner(first.inode, listPids(procRoot), procRoot);
    this.opts.emit({
      kind: 'listener.bound',
      port,
      address: first.address,
      inode: first.inode,
      pid: owner,
      acceptQueue: first.acceptQueue,
    });
  }

  private watchQueue(depth: number): void {
    if (depth === this.queue) return;
    const edge = (depth === 0) !== (this.queue === 0);
    const now = this.now();
    if (!edge && now - this.queueSentAt < QUEUE_REPORT_MS) return;
    this.queue = depth;
    this.queueSentAt = now;
    this.opts.emit({ kind: 'listener.queue', port: this.opts.port, acceptQueue: depth });
  }
}
