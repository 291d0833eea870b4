import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BOOT_FAST_FOR_MS, SampleLoop, SampleRate } from '../src/sample-loop.js';

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

describe('SampleRate', () => {
  const intervals = { intervalMs: 1000, bootIntervalMs: 40, hungIntervalMs: 250 };

  it('samples a boot at the boot interval, then at the hung interval, and a ready target at the interval', () => {
    const r = new SampleRate(intervals, 0);
    r.saw(null, false, 0);
    expect(r.delayMs(0)).toBe(40);
    expect(r.delayMs(BOOT_FAST_FOR_MS - 1)).toBe(40);
    expect(r.delayMs(BOOT_FAST_FOR_MS)).toBe(250);
    r.saw(null, true, BOOT_FAST_FOR_MS + 10);
    expect(r.delayMs(BOOT_FAST_FOR_MS + 10)).toBe(1000);
  });

  it('starts a boot again when the target appears, goes, is replaced, or stops being ready', () => {
    const r = new SampleRate(intervals, 0);
    const hung = (at: number) => r.delayMs(at) === 250;
    // Found late: its boot is timed from then, not from the probe's start.
    r.saw(null, false, 0);
    r.saw(7, false, 20_000);
    expect(hung(40_000)).toBe(false);
    expect(hung(50_000)).toBe(true);
    // Exited, then restarted under another pid: fast again, each time.
    r.saw(null, false, 60_000);
    expect(hung(60_040)).toBe(false);
    r.saw(8, false, 89_000);
    expect(hung(100_000)).toBe(false);
    // Ready, then not (its listener closed): a new boot.
    r.saw(8, true, 130_000);
    expect(r.delayMs(130_000)).toBe(1000);
    r.saw(8, false, 200_000);
    expect(hung(200_040)).toBe(false);
    expect(hung(200_000 + BOOT_FAST_FOR_MS)).toBe(true);
    // Nothing changes while it stays hung.
    r.saw(8, false, 200_000 + BOOT_FAST_FOR_MS);
    expect(hung(200_000 + BOOT_FAST_FOR_MS + 40)).toBe(true);
  });

  it('never samples a hung boot faster than the boot interval', () => {
    const r = new SampleRate({ intervalMs: 1000, bootIntervalMs: 500, hungIntervalMs: 250 }, 0);
    expect(r.delayMs(BOOT_FAST_FOR_MS)).toBe(500);
  });
});
