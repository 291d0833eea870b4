import { describe, expect, it } from 'vitest';
import { parseSize } from '../src/cli/size.js';

describe('parseSize', () => {
  it('reads bytes and binary units', () => {
    expect(parseSize('1000')).toBe(1000);
    expect(parseSize('512KiB')).toBe(512 * 1024);
    expect(parseSize('64MiB')).toBe(64 * 1024 ** 2);
    expect(parseSize('4gib')).toBe(4 * 1024 ** 3);
    expect(parseSize('1.5 MiB')).toBe(1.5 * 1024 ** 2);
  });

  it('refuses anything else, saying how to write it', () => {
    for (const bad of ['', 'MiB', '-1MiB', '64MB', '64 megs', '1e3']) expect(() => parseSize(bad)).toThrow(/use e\.g\. 64MiB/);
  });
});
