// How many sd_notify datagrams a second become events. Any process in the guest may write
// to the notify socket, so one can flood it: past this rate datagrams are counted and
// dropped, so a flood neither pushes out of the ring what the target said before it, nor
// spends the probe's CPU on events and the collector's budget on sending them. Readiness
// markers (READY=1, STOPPING=1) always pass: they decide the verdict.

/** Sustained rate: far above what a booting service says (a dozen phases in seconds). */
export const NOTIFY_EVENTS_PER_SEC = 100;
/** Burst: a whole boot's markers sent at once still pass. */
export const NOTIFY_BURST = 500;

export class NotifyRate {
  /** Datagrams dropped so far. */
  dropped = 0;
  private tokens: number;
  private last: number;

  constructor(
    private readonly perSec = NOTIFY_EVENTS_PER_SEC,
    private readonly burst = NOTIFY_BURST,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = burst;
    this.last = now();
  }

  /** True when one more datagram may become an event now; otherwise counts it as dropped. */
  take(): boolean {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.perSec);
    this.last = now;
    if (this.tokens >= 1) {
      this.tokens--;
      return true;
    }
    this.dropped++;
    return false;
  }
}
