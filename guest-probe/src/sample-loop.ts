// The probe's sampling loop. Two callers ask for a sample: the loop itself (every interval)
// and a notify datagram (a phase marker often comes right before a bind or an exit: look
// again at once). Each request replaces the pending one, so there is never more than one
// pending sample: two independent chains of timers would each sample at the full rate and
// never merge again (one probe was seen reading everything twice a second).
//
// How long to wait after a sample is SampleRate's: the boot interval while a boot is young,
// the hung interval once it has gone on for BOOT_FAST_FOR_MS without the target getting
// ready, and the interval once it is.

/** How long a boot is sampled at the boot interval. The orchestrator gives envd 10 s; a boot
 *  not ready three times that long is hung, and sampling it 25 times a second for as long as
 *  it stays hung cost the probe 1.7 % of a core (BENCHMARKS.md). */
export const BOOT_FAST_FOR_MS = 30_000;

export interface SampleIntervals {
  intervalMs: number;
  bootIntervalMs: number;
  hungIntervalMs: number;
}

/**
 * The wait after each sample. A boot begins when the probe starts, when the target process
 * changes (found, gone, or another one: a restart), and when the target stops being ready;
 * for BOOT_FAST_FOR_MS after that the boot interval applies, then the hung interval (never
 * shorter than the boot interval), until the target is ready.
 */
export class SampleRate {
  #bootSince: number;
  #pid: number | null = null;
  #settled = false;

  constructor(
    private readonly intervals: SampleIntervals,
    now: number,
  ) {
    this.#bootSince = now;
  }

  /** What a sample saw: the live target's pid (null: none, or it exited) and whether it is ready. */
  saw(pid: number | null, settled: boolean, now: number): void {
    if (pid !== this.#pid || (this.#settled && !settled)) this.#bootSince = now;
    this.#pid = pid;
    this.#settled = settled;
  }

  delayMs(now: number): number {
    const { intervalMs, bootIntervalMs, hungIntervalMs } = this.intervals;
    if (this.#settled) return intervalMs;
    return now - this.#bootSince < BOOT_FAST_FOR_MS ? bootIntervalMs : Math.max(bootIntervalMs, hungIntervalMs);
  }
}

export class SampleLoop {
  #timer: NodeJS.Timeout | null = null;
  #immediate: NodeJS.Immediate | null = null;
  #stopped = false;

  constructor(
    private readonly sample: () => void,
    /** The wait after each sample (boot rate until the target is settled, then 1 Hz). */
    private readonly nextDelayMs: () => number,
  ) {}

  /** The first sample on the next turn of the event loop, after what is queued now (the
   *  hello's dial and write: the collector hears from a new probe as early as possible). */
  start(): void {
    this.#cancel();
    if (!this.#stopped) this.#immediate = setImmediate(this.#run);
  }

  /** Sample as soon as possible, instead of when the pending sample was due. */
  soon(): void {
    this.#after(0);
  }

  stop(): void {
    this.#stopped = true;
    this.#cancel();
  }

  #run = (): void => {
    if (this.#stopped) return;
    this.sample();
    this.#after(this.nextDelayMs());
  };

  #after(ms: number): void {
    this.#cancel();
    if (!this.#stopped) this.#timer = setTimeout(this.#run, ms);
  }

  #cancel(): void {
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#immediate) clearImmediate(this.#immediate);
    this.#timer = null;
    this.#immediate = null;
  }
}
