// How fast sd_notify datagrams are read. Any process in the guest may write to the notify
// socket, so one can flood it. Every datagram read takes a token; when none is left the
// listener stops reading for NOTIFY_PAUSE_MS, so the flood waits in the kernel's queue and
// its senders block or get EAGAIN, instead of costing the probe a read (and most of a core)
// each. Of what is read, the datagram that found the bucket empty is counted and dropped, so
// a flood neither pushes out of the ring what the target said before it nor spends the
// collector's budget; readiness markers (READY=1, STOPPING=1) always pass: they decide the
// verdict.

import { monotonicMs } from '../clock.js';

/** Sustained rate: far above what a booting service says (a dozen phases in seconds). */
export const NOTIFY_EVENTS_PER_SEC = 100;
/** Burst: a whole boot's markers sent at once still pass. */
export const NOTIFY_BURST = 500;
/**
 * How long reading stops once the bucket is empty (it then holds this long's worth of
 * tokens). Short, because while paused a full queue holds every sender, envd included:
 * envd's notifier gives a send 2 s (test/fake-envd/notify.go), and a sender blocked on the
 * full queue gets in when reading resumes. So a READY=1 is held back by about one pause per
 * NOTIFY_EVENTS_PER_SEC × NOTIFY_PAUSE_MS / 1000 datagrams queued before it (the queue holds
 * net.unix.max_dgram_qlen, often 10). Not shorter: each pause costs a wake-up and the one read
 * that found the bucket empty, so a flood costs 1000 / NOTIFY_PAUSE_MS reads a second on top
 * of the rate.
 */
export const NOTIFY_PAUSE_MS = 100;

/** A token bucket: NOTIFY_BURST tokens, refilled at NOTIFY_EVENTS_PER_SEC. */
export class NotifyRate {
  private tokens: number;
  private last: number;

  constructor(
    private readonly perSec = NOTIFY_EVENTS_PER_SEC,
    private readonly burst = NOTIFY_BURST,
    private readonly now: () => number = () => monotonicMs(),
  ) {
    this.tokens = burst;
    this.last = now();
  }

  /** True when one more datagram fits the rate now (and takes its token). */
  take(): boolean {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.perSec);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens--;
    return true;
  }
}
