// Per-sandbox token buckets: what one guest may send per second, with a burst large
// enough for a full ring replay after a reconnect. A guest over budget is cut off; it
// cannot slow the collector down for the other sandboxes. The sandbox owns its budget and
// every connection it accepts spends from it: reconnecting does not refill the bucket.
//
// Data the collector asks for (a dump) comes out of a grant made for that one request, on
// top of the bucket; the grant is spent first and whatever is left of it is taken back
// when the request settles, so a request that never gets its answer leaves nothing behind.

export interface BudgetLimits {
  bytesPerSec: number;
  burstBytes: number;
  framesPerSec: number;
  burstFrames: number;
}

export const DEFAULT_BUDGET: BudgetLimits = {
  bytesPerSec: 512 * 1024,
  burstBytes: 8 * 1024 * 1024,
  framesPerSec: 500,
  burstFrames: 5000,
};

/** What is left of one request's grant; see Budget.grant. */
interface Allowance {
  bytes: number;
  frames: number;
}

export interface Grant {
  /** Takes back what the request did not use. */
  release(): void;
}

export class Budget {
  private bytes: number;
  private frames: number;
  private last: number;
  /** Grants of requests in flight, oldest first: spent in that order, before the bucket. */
  private readonly grants = new Set<Allowance>();

  constructor(
    private readonly limits: BudgetLimits = DEFAULT_BUDGET,
    now = Date.now(),
  ) {
    this.bytes = limits.burstBytes;
    this.frames = limits.burstFrames;
    this.last = now;
  }

  /** Allows `bytes` (and their frames) on top of the budget until released: data the
   *  collector asked for. */
  grant(bytes: number): Grant {
    const allowance: Allowance = { bytes, frames: Math.ceil(bytes / 1024) + 16 };
    this.grants.add(allowance);
    return { release: () => void this.grants.delete(allowance) };
  }

  /** Charges raw bytes received; false when over budget. */
  spendBytes(size: number, now = Date.now()): boolean {
    this.refill(now);
    this.bytes -= this.fromGrants('bytes', size);
    return this.bytes >= 0;
  }

  /** Charges one decoded frame (or one accepted connection); false when over budget. */
  spendFrame(now = Date.now()): boolean {
    this.refill(now);
    this.frames -= this.fromGrants('frames', 1);
    return this.frames >= 0;
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
    this.bytes = Math.min(this.limits.burstBytes, this.bytes + dt * this.limits.bytesPerSec);
    this.frames = Math.min(this.limits.burstFrames, this.frames + dt * this.limits.framesPerSec);
  }
}
