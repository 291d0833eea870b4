// Per-sandbox token buckets: what one guest may send per second (bytes, frames, events), with
// a burst large enough for a full ring replay after a reconnect. The sandbox owns its budget
// and every connection it accepts spends from it: reconnecting does not refill the buckets.
//
// A guest over budget is first throttled, then cut off:
//   - throttled: a spend that leaves a bucket in the red answers how long to stop reading
//     until it is paid back; the connection pauses its socket for that long (back-pressure:
//     the guest's writes block in its own kernel, nothing is dropped, and acks, which follow
//     the store, simply come later). What was already read is processed: one socket read
//     (64 KiB) at most, as the socket is paused right after it.
//   - cut off: when throttling goes on for longer than `cutoffAfterMs` (a spell: throttles
//     that follow each other with less than CALM_MS in between), or one spend digs a hole
//     deeper than that to pay back, the spend throws ERR_RATE_LIMIT and the connection
//     closes. Every close the guest caused (this one, or any other protocol error) starts a
//     reconnect penalty: 2 s, doubling with each offence up to `penaltyMaxMs`, forgotten
//     once the guest has gone `forgiveAfterMs` without one.
//
// Data the collector asks for (a dump) comes out of a grant made for that one request, on
// top of the buckets; the grant is spent first and whatever is left of it is taken back
// when the request settles, so a request that never gets its answer leaves nothing behind.

import { ProtocolError } from '@vsockdiag/proto';

export interface BudgetLimits {
  bytesPerSec: number;
  burstBytes: number;
  framesPerSec: number;
  burstFrames: number;
  eventsPerSec: number;
  burstEvents: number;
  /** Frames an accepted connection is charged, for what opening a session costs the host. */
  framesPerConnection: number;
  /** Throttled this long without a break: cut off. */
  cutoffAfterMs: number;
  /** The first reconnect penalty after an offence; each further offence doubles it… */
  penaltyMs: number;
  /** …up to this. */
  penaltyMaxMs: number;
  /** An offence this long after the previous one starts again from penaltyMs. */
  forgiveAfterMs: number;
}

/** The defaults, documented in README ("Limits"). An honest probe stays far under them: a
 *  heartbeat a second, a few events a second once ready (a few dozen while booting), log
 *  batches of at most 200 × 2 KiB lines a second; its ring (4096 events, 1 MiB) replays in
 *  one burst. */
export const DEFAULT_BUDGET: BudgetLimits = {
  bytesPerSec: 512 * 1024,
  burstBytes: 8 * 1024 * 1024,
  framesPerSec: 500,
  burstFrames: 5000,
  eventsPerSec: 1000,
  burstEvents: 10_000,
  // Opening a session (accept, hello, its row, a verdict, log records, the close) cost the
  // collector 1.8 ms of CPU on the bench host, where a heartbeat cost 0.02 ms and a batch of
  // one event 0.4. At one frame a connection, a guest reconnecting in a loop got 250 sessions
  // a second, 45 % of a core; at 50, at most 10 a second after a burst of 100 (2 %), and a
  // probe restarting every second (its unit's RestartSec) still gets in every time.
  framesPerConnection: 50,
  cutoffAfterMs: 10_000,
  penaltyMs: 2000,
  penaltyMaxMs: 60_000,
  forgiveAfterMs: 60_000,
};

/** Throttles less than this apart are one spell (a flood that resumes the moment it is let
 *  go); a guest quiet for longer starts a new one. */
export const CALM_MS = 1000;

export type Bucket = 'bytes' | 'frames' | 'events';

/** Why a connection was refused at accept ('store': the collector cannot write, a full disk). */
export type RefusedReason = 'penalty' | 'pending' | 'frames' | 'closed' | 'store';

/** What the budget did to its guest, for the sandbox's detail and /metrics. */
export interface LimitCounters {
  /** Times reading was paused, by the bucket that ran dry. */
  throttled: Record<Bucket, number>;
  /** Time spent paused, all connections together (ms). */
  throttledMs: number;
  /** Connections cut off for staying over budget (ERR_RATE_LIMIT), a subset of offences. */
  cutoffs: number;
  /** Closes the guest caused, by protocol error code (ERR_RATE_LIMIT included). */
  offences: Record<string, number>;
  /** Connections refused at accept, by reason. */
  refused: Record<RefusedReason, number>;
  /** The penalty the next offence will start (ms), and until when the current one runs. */
  nextPenaltyMs: number;
  penaltyUntil: number | null;
}

/** What is left of one request's grant; see Budget.grant. */
interface Allowance {
  bytes: number;
  frames: number;
  events: number;
}

export interface Grant {
  /** Takes back what the request did not use. */
  release(): void;
}

export class Budget {
  private readonly level: Record<Bucket, number>;
  private last: number;
  /** Grants of requests in flight, oldest first: spent in that order, before the buckets. */
  private readonly grants = new Set<Allowance>();
  private spellStart = 0;
  /** When the last throttle ends (0: none yet). */
  private heldUntil = 0;
  private penaltyEnds = 0;
  private nextPenalty: number;
  private lastOffence = -Infinity;
  private readonly count: LimitCounters = {
    throttled: { bytes: 0, frames: 0, events: 0 },
    throttledMs: 0,
    cutoffs: 0,
    offences: {},
    refused: { penalty: 0, pending: 0, frames: 0, closed: 0, store: 0 },
    nextPenaltyMs: 0,
    penaltyUntil: null,
  };

  private readonly limits: BudgetLimits;

  /** `limits` over DEFAULT_BUDGET (a test, or a collector configured otherwise). */
  constructor(limits: Partial<BudgetLimits> = {}, now = Date.now()) {
    this.limits = { ...DEFAULT_BUDGET, ...limits };
    const l = this.limits;
    this.level = { bytes: l.burstBytes, frames: l.burstFrames, events: l.burstEvents };
    this.last = now;
    this.nextPenalty = l.penaltyMs;
    this.count.nextPenaltyMs = l.penaltyMs;
  }

  get counters(): Readonly<LimitCounters> {
    return this.count;
  }

  /** Allows `bytes` (and their frames and events) on top of the budget until released: data
   *  the collector asked for. */
  grant(bytes: number): Grant {
    const allowance: Allowance = { bytes, frames: Math.ceil(bytes / 1024) + 16, events: 0 };
    this.grants.add(allowance);
    return { release: () => void this.grants.delete(allowance) };
  }

  /** Charges raw bytes received: the ms to stop reading (0: read on). Throws ERR_RATE_LIMIT
   *  when the guest is to be cut off. */
  spendBytes(size: number, now = Date.now()): number {
    return this.spend('bytes', size, now);
  }

  /** Charges one decoded frame (or one accepted connection); see spendBytes. */
  spendFrame(now = Date.now()): number {
    return this.spend('frames', 1, now);
  }

  /** Charges the events of one batch; see spendBytes. */
  spendEvents(n: number, now = Date.now()): number {
    return this.spend('events', n, now);
  }

  /** Why a new connection is to be refused now, or null to take it. A connection costs
   *  framesPerConnection frames, so dialling in a loop is rate-limited like sending is. */
  refuse(pending: number, maxPending: number, now = Date.now()): RefusedReason | null {
    let why: RefusedReason | null = null;
    if (now < this.penaltyEnds) why = 'penalty';
    else if (pending >= maxPending) why = 'pending';
    else {
      this.refill(now);
      this.level.frames -= this.fromGrants('frames', this.limits.framesPerConnection);
      if (this.level.frames < 0) why = 'frames';
    }
    if (why) this.count.refused[why]++;
    return why;
  }

  /** Counts a refusal decided elsewhere (the sandbox is closing). */
  refused(why: RefusedReason): void {
    this.count.refused[why]++;
  }

  /** The guest caused a close (`code`): its next connections are refused for a penalty
   *  that doubles with each offence, until it has behaved for forgiveAfterMs. */
  offended(code: string, now = Date.now()): void {
    this.count.offences[code] = (this.count.offences[code] ?? 0) + 1;
    if (now - this.lastOffence > this.limits.forgiveAfterMs) this.nextPenalty = this.limits.penaltyMs;
    this.lastOffence = now;
    this.penaltyEnds = now + this.nextPenalty;
    this.count.penaltyUntil = this.penaltyEnds;
    this.nextPenalty = Math.min(this.limits.penaltyMaxMs, this.nextPenalty * 2);
    this.count.nextPenaltyMs = this.nextPenalty;
  }

  /** Time a connection actually stayed paused (it may end sooner than asked). */
  held(ms: number): void {
    this.count.throttledMs += ms;
  }

  private spend(kind: Bucket, amount: number, now: number): number {
    this.refill(now);
    this.level[kind] -= this.fromGrants(kind, amount);
    if (this.level[kind] >= 0) return 0;
    const rate = this.limits[kind === 'bytes' ? 'bytesPerSec' : kind === 'frames' ? 'framesPerSec' : 'eventsPerSec'];
    const wait = Math.ceil((-this.level[kind] / rate) * 1000);
    if (now - this.heldUntil > CALM_MS) this.spellStart = now;
    const until = now + wait;
    if (until - this.spellStart > this.limits.cutoffAfterMs) {
      this.count.cutoffs++;
      this.heldUntil = 0;
      throw new ProtocolError(
        'ERR_RATE_LIMIT',
        `over its ${kind} budget (${rate}/s) for more than ${this.limits.cutoffAfterMs} ms; ${-Math.round(this.level[kind])} in the red`,
      );
    }
    this.count.throttled[kind]++;
    this.heldUntil = Math.max(this.heldUntil, until);
    return wait;
  }

  /** Takes up to `amount` from the grants; returns what they could not cover. */
  private fromGrants(kind: keyof Allowance, amount: number): number {
    for (const g of this.grants) {
      if (amount === 0) break;
      const take = Math.min(g[kind], amount);
      g[kind] -= take;
      amount -= take;
    }
    return amount;
  }

  private refill(now: number): void {
    const dt = Math.max(0, now - this.last) / 1000;
    this.last = now;
    const l = this.limits;
    this.level.bytes = Math.min(l.burstBytes, this.level.bytes + dt * l.bytesPerSec);
    this.level.frames = Math.min(l.burstFrames, this.level.frames + dt * l.framesPerSec);
    this.level.events = Math.min(l.burstEvents, this.level.events + dt * l.eventsPerSec);
  }
}
