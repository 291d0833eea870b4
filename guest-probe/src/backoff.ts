// Reconnect delays: exponential from tens of milliseconds, capped, with jitter so a fleet
// of probes restored at once does not reconnect in lockstep.

export class Backoff {
  private attempt = 0;

  constructor(
    private readonly baseMs = 20,
    private readonly capMs = 2000,
    private readonly random: () => number = Math.random,
  ) {}

  /** The next delay: half fixed, half random, of min(cap, base·2^attempt). */
  next(): number {
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.attempt, 20));
    this.attempt++;
    return ceiling / 2 + this.random() * (ceiling / 2);
  }

  /** After a healthy session, start over from the base delay. */
  reset(): void {
    this.attempt = 0;
  }
}
