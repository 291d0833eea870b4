// The socket picture of the sandbox, cheap enough for every tick: totals from
// /proc/net/sockstat (~0.01 ms; kept open, read again each tick), and a census (counts by
// TCP state and the busiest remote endpoints, aggregated in the addon from one sock_diag
// dump) only now and then (CENSUS_EVERY_MS, longer when a census is costly) or when the
// totals jump. Never a /proc/net/tcp scan per tick: with an MMDS poll storm's thousands of
// sockets that alone would cost a large share of a core.

import type { EventBody } from '@vsockdiag/proto';
import type { SocketCensus } from './diag.js';
import { readSockstat, sockstatFiles, type SockstatFiles } from './proc/index.js';
import { monotonicMs } from './clock.js';

/** A census at least this often when nothing changes; sooner when the totals jump. */
export const CENSUS_EVERY_MS = 30_000;
/** …and no more often than keeps the periodic censuses within this share of a core: a census
 *  walks the kernel's socket table, ~25 ms with 10,000 sockets, which every 30 s would be
 *  most of a settled probe's CPU at 1 Hz. The next one waits cost / share (25 ms: 250 s).
 *  A twentieth of the settled probe's 0.2 %: at 0.02 % the periodic censuses were a tenth of
 *  its CPU, repeating a picture the totals said had not changed (a jump still takes one). */
export const CENSUS_CPU_SHARE = 0.0001;

/** The wait before the next periodic census, after one that took `costMs`. */
export function censusPeriodMs(costMs: number): number {
  return Math.max(CENSUS_EVERY_MS, costMs / CENSUS_CPU_SHARE);
}
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
  /** Monotonic ms (monotonicMs by default): the periods, and what a census cost. */
  now?: () => number;
}

export class SocketWatcher {
  private sentTotal = -1;
  private sentAt = Number.NEGATIVE_INFINITY;
  private censusTotal = 0;
  private censusAt = Number.NEGATIVE_INFINITY;
  /** Until the next census when nothing changes: censusPeriodMs of the last one's cost. */
  private censusEveryMs = CENSUS_EVERY_MS;
  private readonly now: () => number;
  private readonly sockstat: SockstatFiles;

  constructor(private readonly opts: SocketWatcherOptions) {
    this.now = opts.now ?? (() => monotonicMs());
    this.sockstat = sockstatFiles(opts.procRoot);
  }

  /** Closes the totals' files. */
  stop(): void {
    this.sockstat.v4.close();
    this.sockstat.v6.close();
  }

  tick(): void {
    const st = readSockstat(this.sockstat);
    if (!st) return;
    const now = this.now();
    const total = st.tcpInUse + st.tcpTimeWait;
    const grown = total - this.censusTotal >= Math.max(50, this.censusTotal * CENSUS_GROWTH);
    const censusDue =
      this.opts.census !== null && (now - this.censusAt >= this.censusEveryMs || (grown && now - this.censusAt >= CENSUS_MIN_GAP_MS));
    const moved = Math.abs(total - this.sentTotal) > Math.max(10, this.sentTotal * TOTALS_CHANGE);
    if (!censusDue && !moved && now - this.sentAt < TOTALS_EVERY_MS) return;

    const body: Extract<EventBody, { kind: 'sockets' }> = { kind: 'sockets', tcpInUse: st.tcpInUse, timeWait: st.tcpTimeWait };
    if (censusDue) {
      const c = this.opts.census!(TOP_REMOTES);
      this.censusEveryMs = censusPeriodMs(this.now() - now);
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
