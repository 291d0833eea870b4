// Watches the expected port for a LISTEN socket and reports the edges: bound (with the
// owning pid, found through the socket's inode) and unbound. Sampled fast during boot, so
// the bind time is known to within the boot interval.
//
// Where LISTEN sockets come from: a netlink sock_diag query (the addon; a dump ~0.06 ms, a
// known listener looked up alone a fraction of that) when the kernel answers one, else
// /proc/net/tcp{,6} (milliseconds of kernel time per read, more under an MMDS poll storm).
// The probe reports which one it uses.

import type { EventBody } from '@vsockdiag/proto';
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

/**
 * Listeners from sock_diag. Once one is known, each query first asks the kernel for it alone
 * (findListener: a hash lookup) and dumps the listening sockets only when that socket is gone
 * or another answers in its place. The dump walks the kernel's whole listening hash, twice
 * (IPv4, IPv6): the largest part of a settled probe's tick. A second listener that joins the
 * port beside the known one is not reported while the known one stays; only the first listener
 * was ever reported (ListenerWatcher).
 */
export function sockDiagListenerQuery(find = findListener, dump = listListeners): ListenerQuery {
  let known: TcpListener | null = null;
  return {
    source: 'sock_diag',
    listening(port) {
      if (known !== null && known.port === port) {
        // A kernel that refuses the lookup (none seen; the dump's own errors still surface)
        // costs this query a dump, as before lookups.
        let now: TcpListener | null = null;
        try {
          now = find(known.address, port);
        } catch {}
        if (now !== null && now.inode === known.inode) {
          known = now;
          return [now];
        }
      }
      const all = dump(port);
      known = all[0] ?? null;
      return all;
    },
  };
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
