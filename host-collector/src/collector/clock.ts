// Places guest times (ms since guest boot) on the host's clock. Every message that carries
// a guest time gives one sample of (host receive time − guest time); the smallest sample
// is the one least delayed in transit, so it is the best offset estimate. A new session
// starts a new estimate: a snapshot restore pauses the guest's clock, not the host's.

export class GuestClock {
  private offset = Number.POSITIVE_INFINITY;

  /** True when the sample improved the estimate (guest times now map elsewhere). */
  observe(guestMs: number, hostMs: number = Date.now()): boolean {
    const sample = hostMs - guestMs;
    if (sample >= this.offset) return false;
    this.offset = sample;
    return true;
  }

  get known(): boolean {
    return Number.isFinite(this.offset);
  }

  /** Host ms at guest boot by this estimate (null before any sample). */
  get bootOffsetMs(): number | null {
    return this.known ? this.offset : null;
  }

  toHost(guestMs: number): number {
    return this.known ? guestMs + this.offset : Date.now();
  }
}
