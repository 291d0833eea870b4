// The socket picture of the sandbox, cheap enough for every tick: totals from
// /proc/net/sockstat (~0.01 ms) each tick, and a census (counts by TCP state and the
// busiest remote endpoints, aggregated in the addon from one sock_diag dump) only every
// CENSUS_EVERY_MS or when the totals jump. Never a /proc/net/tcp scan per tick: with an
// MMDS poll storm's thousands of sockets that alone would cost a large share of a core.

import type { EventBody } from '@vsockdiag/proto';
import type { SocketCensus } from './diag.js';
import { readSockstat } from './proc/index.js';

// Every 30 s when nothing changes (a census is milliseconds of kernel time with thousands of
// sockets); sooner when the totals jump.
export const CENSUS_EVERY_MS = 30_000;
/** Totals are re-sent when they moved by this fraction (or every TOTALS_EVERY_MS). */
const TOTALS_CHANGE = 0.1;
const TOTALS_EVERY_MS = 10_000;
/** A census is taken early when the totals grew this much since the last one… */
const CENSUS_GROWTH = 0.25;
/** …but not more often than this. */
const CENSUS_MIN_GAP_MS = 1000;
const TOP_REMOTES = 10;

export interface SocketWatcherOptions {
  procRoot: string;
  emit: (body: EventBody) => void;
  /** The addon's census, or null when sock_diag is not available (then only totals). */
  census: ((top: number) => SocketCensus) | null;
  /** Guest time (ms since boot) to stamp a census with. */
  sinceBootMs: () => number;
  now?: () => number;
}

export class SocketWatcher {
  private sentTotal = -1;
  private sentAt = Number.NEGATIVE_INFINITY;
  private censusTotal = 0;
  private censusAt = Number.NEGATIVE_INFINITY;
  private readonly now: () => number;

  constructor(private readonly opts: SocketWatcherOptions) {
    this.now = opts.now ?? Date.now;
  }

  tick(): void {
    const st = readSockstat(this.opts.procRoot);
    if (!st) return;
    const now = this.now();
    const total = st.tcpInUse + st.tcpTimeWait;
    const grown = total - this.censusTotal >= Math.max(50, this.censusTotal * CENSUS_GROWTH);
    const censusDue =
      this.opts.census !== null && (now - this.censusAt >= CENSUS_EVERY_MS || (grown && now - this.censusAt >= CENSUS_MIN_GAP_MS));
    const moved = Math.abs(total - this.sentTotal) > Math.max(10, this.sentTotal * TOTALS_CHANGE);
    if (!censusDue && !moved && now - this.sentAt < TOTALS_EVERY_MS) return;

    const body: Extract<EventBody, { kind: 'sockets' }> = { kind: 'sockets', tcpInUse: st.tcpInUse, timeWait: st.tcpTimeWait };
    if (censusDue) {
      const c = this.opts.census!(TOP_REMOTES);
      body.byState = Object.fromEntries(Object.entries(c.byState).filter(([, n]) => n > 0));
      body.top = c.byRemote.slice(0, TOP_REMOTES).map((r) => ({ address: r.address, port: r.port, count: r.count }));
      body.remotesDistinct = c.remotesDistinct;
      body.censusAt = this.opts.sinceBootMs();
      this.censusTotal = total;
      this.censusAt = now;
    }
    this.sentTotal = total;
    this.sentAt = now;
    this.opts.emit(body);
  }
}
