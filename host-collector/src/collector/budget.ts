// Per-sandbox token buckets: what one guest may send per second, with a burst large
// enough for a full ring replay after a reconnect. A guest over budget is cut off; it
// cannot slow the collector down for the other sandboxes. The sandbox owns its budget and
// every connection it accepts spends from it: reconnecting does not refill the bucket.

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

export class Budget {
  private bytes: number;
  private frames: number;
  private last: number;

  constructor(
    private readonly limits: BudgetLimits = DEFAULT_BUDGET,
    now = Date.now(),
  ) {
    this.bytes = limits.burstBytes;
    this.frames = limits.burstFrames;
    this.last = now;
  }

  /** Allows `bytes` (and their frames) on top of the budget: data the collector asked for. */
  grant(bytes: number): void {
    this.bytes += bytes;
    this.frames += Math.ceil(bytes / 1024) + 16;
  }

  /** Charges raw bytes received; false when over budget. */
  spendBytes(size: number, now = Date.now()): boolean {
    this.refill(now);
    this.bytes -= size;
    return this.bytes >= 0;
  }

  /** Charges one decoded frame; false when over budget. */
  spendFrame(now = Date.now()): boolean {
    this.refill(now);
    this.frames -= 1;
    return this.frames >= 0;
  }

  private refill(now: number): void {
    const dt = Math.max(0, now - this.last) / 1000;
    this.last = now;
    // Refill up to the burst, but never take back a grant that put the bucket above it.
    this.bytes = Math.max(this.bytes, Math.min(this.limits.burstBytes, this.bytes + dt * this.limits.bytesPerSec));
    this.frames = Math.max(this.frames, Math.min(this.limits.burstFrames, this.frames + dt * this.limits.framesPerSec));
  }
}
