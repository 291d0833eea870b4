import { describe, expect, it } from 'vitest';
import { formatDuration, parseDuration } from '../src/duration.js';

describe('formatDuration', () => {
  it.each([
    [0, '0ms'],
    [4, '4ms'],
    [0.4, '0.4ms'],
    [0.043, '0.043ms'],
    [4.23, '4.2ms'],
    [12.4, '12ms'],
    [500, '500ms'],
    [999.4, '999ms'],
    [999.6, '1.0s'],
    [1234, '1.2s'],
    [59_940, '59.9s'],
    [59_960, '1m0s'],
    [119_400, '1m59s'],
    [119_600, '2m0s'],
    [192_000, '3m12s'],
    [3_599_400, '59m59s'],
    [3_599_600, '1h0m'],
    [3_600_000, '1h0m'],
    [7_500_000, '2h5m'],
    [86_340_000, '23h59m'],
    [273_600_000, '3d4h'],
    [-1234, '-1.2s'],
    [-0.4, '-0.4ms'],
  ])('%s ms is %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

describe('parseDuration', () => {
  it('reads what formatDuration writes for whole units, and bare ms', () => {
    expect(parseDuration('250ms')).toBe(250);
    expect(parseDuration('1.5s')).toBe(1500);
    expect(parseDuration('2m')).toBe(120_000);
    expect(parseDuration('1h')).toBe(3_600_000);
    expect(parseDuration('40')).toBe(40);
  });

  it('refuses anything else', () => {
    for (const bad of ['', '5 min', '-1s', '1d', 's']) expect(() => parseDuration(bad)).toThrow(/bad duration/);
  });
});
