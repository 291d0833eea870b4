// The probe's sampling loop. Two callers ask for a sample: the loop itself (every interval)
// and a notify datagram (a phase marker often comes right before a bind or an exit: look
// again at once). Each request replaces the pending one, so there is never more than one
// pending sample: two independent chains of timers would each sample at the full rate and
// never merge again (one probe was seen reading everything twice a second).

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
