// Waiting on a condition, for the tests of every package. Tests never sleep for a fixed
// time and hope: they wait for what they need, with a deadline generous enough for a
// loaded machine, and a timeout names what did not happen.

// Taken when the module loads, before a test can fake the timers: waitFor waits in real
// time even while a test runs on fake time (it is then waiting on real I/O, which fake
// time does not move).
const realSetTimeout = globalThis.setTimeout;
const realNow = performance.now.bind(performance);

export interface WaitOptions {
  /** Generous by default: the machine running the tests may be loaded. */
  timeoutMs?: number;
  intervalMs?: number;
}

/**
 * Polls `fn` until it returns a truthy value, and returns that value. After `timeoutMs`
 * it fails naming `what` and the last value seen, so a timeout says what was awaited.
 */
export async function waitFor<T>(
  what: string,
  fn: () => T | Promise<T>,
  { timeoutMs = 15_000, intervalMs = 25 }: WaitOptions = {},
): Promise<NonNullable<T>> {
  const deadline = realNow() + timeoutMs;
  for (;;) {
    const last = await fn();
    if (last) return last as NonNullable<T>;
    if (realNow() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last value: ${describe(last)}`);
    await new Promise((r) => realSetTimeout(r, intervalMs));
  }
}

function describe(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value); // a cycle or a BigInt: still say something
  }
}
