// Watches the expected port for a LISTEN socket and reports the edges: bound (with the
// owning pid, found through the socket's inode) and unbound. Sampled fast during boot, so
// the bind time is known to within the boot interval.

import type { EventBody } from '@vsockdiag/proto';
import { TcpState, findSocketOwner, listPids, readTcpSockets } from './proc/index.js';

const LISTEN_ONLY = new Set<number>([TcpState.LISTEN]);

export interface ListenerOptions {
  port: number;
  procRoot: string;
  emit: (body: EventBody) => void;
  /** The target's pid, checked first when looking for the socket's owner. */
  targetPid: () => number | null;
}

export class ListenerWatcher {
  private inode = 0;
  private bound = false;

  constructor(private readonly opts: ListenerOptions) {}

  tick(): void {
    const { port, procRoot } = this.opts;
    const entries = readTcpSockets({ states: LISTEN_ONLY, localPort: port }, procRoot);
    const first = entries[0];
    if (!first) {
      if (this.bound) {
        this.bound = false;
        this.inode = 0;
        this.opts.emit({ kind: 'listener.unbound', port });
      }
      return;
    }
    if (this.bound && first.inode === this.inode) return;
    this.bound = true;
    this.inode = first.inode;
    const target = this.opts.targetPid();
    // The owner is usually the target; only otherwise scan every process's fds (rare: on an edge).
    const owner =
      (target !== null ? findSocketOwner(first.inode, [target], procRoot) : null) ??
      findSocketOwner(first.inode, listPids(procRoot), procRoot);
    this.opts.emit({
      kind: 'listener.bound',
      port,
      address: first.localAddress,
      inode: first.inode,
      pid: owner,
      acceptQueue: first.rxQueue,
    });
  }
}
