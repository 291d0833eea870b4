import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SampleLoop } from '../src/sample-loop.js';

/** A loop at 1 Hz that records when (fake ms) each sample ran. */
function loop(delayMs = 1000) {
  const at: number[] = [];
  const l = new SampleLoop(
    () => at.push(Date.now()),
    () => delayMs,
  );
  return { l, at };
}

describe('SampleLoop', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'Date'], now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('samples on the next turn, then once per interval', async () => {
    const { l, at } = loop();
    l.start();
    expect(at).toEqual([]);
    await vi.advanceTimersByTimeAsync(5000);
    expect(at).toEqual([0, 1000, 2000, 3000, 4000, 5000]);
    l.stop();
  });

  it('keeps one chain when a notify asks for a sample before the first one ran', async () => {
    // The probe's notify socket is open before its first sample: a phase marker can come in
    // between. With two chains, every sample below would happen twice.
    const { l, at } = loop();
    l.start();
    l.soon();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(at).toHaveLength(11);
    expect(new Set(at).size).toBe(at.length);
    l.stop();
  });

  it('moves the next sample up on soon(), and the interval counts from there', async () => {
    const { l, at } = loop();
    l.start();
    await vi.advanceTimersByTimeAsync(1500);
    l.soon();
    l.soon();
    await vi.advanceTimersByTimeAsync(2000);
    expect(at).toEqual([0, 1000, 1500, 2500, 3500]);
    l.stop();
  });

  it('takes the next delay after each sample (boot rate, then settled)', async () => {
    let delay = 40;
    const at: number[] = [];
    const l = new SampleLoop(
      () => {
        at.push(Date.now());
        if (at.length === 3) delay = 1000;
      },
      () => delay,
    );
    l.start();
    await vi.advanceTimersByTimeAsync(2100);
    expect(at).toEqual([0, 40, 80, 1080, 2080]);
    l.stop();
  });

  it('samples no more after stop(), whatever was pending', async () => {
    const { l, at } = loop();
    l.start();
    await vi.advanceTimersByTimeAsync(1000);
    l.soon();
    l.stop();
    l.soon();
    l.start();
    await vi.advanceTimersByTimeAsync(5000);
    expect(at).toEqual([0, 1000]);
    expect(vi.getTimerCount()).toBe(0);
  });
});
