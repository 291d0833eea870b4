// The addon's mapSource(), with which the launcher hands V8 the probe's bundle as an external
// string over the file's own pages (native/src/source.c).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { loadNative } from '../src/native.js';

const { mapSource } = loadNative();
const TRAILER = '(exports, require, module, __filename, __dirname);\n';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-source-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function file(name: string, bytes: string | Buffer): string {
  const p = path.join(dir, name);
  fs.writeFileSync(p, bytes);
  return p;
}

it('gives the text before the trailer', () => {
  const text = '(function () {\n  return "a\\u00e9";\n})';
  expect(mapSource(file('b.js', text + TRAILER), TRAILER)).toBe(text);
  expect(mapSource(file('one.js', `x${TRAILER}`), TRAILER)).toBe('x');
});

it('gives null for what it cannot map as ASCII text ending in the trailer', () => {
  expect(mapSource(path.join(dir, 'missing.js'), TRAILER)).toBeNull();
  expect(mapSource(dir, TRAILER)).toBeNull(); // not a regular file
  expect(mapSource(file('plain.js', 'process.exit(3)\n'), TRAILER)).toBeNull();
  expect(mapSource(file('only.js', TRAILER), TRAILER)).toBeNull(); // no text before it
  expect(mapSource(file('empty.js', ''), TRAILER)).toBeNull();
  // UTF-8 would be read as Latin-1: not ASCII, not mapped.
  expect(mapSource(file('utf8.js', `"\u00e9"${TRAILER}`), TRAILER)).toBeNull();
  expect(mapSource(file('high.js', Buffer.concat([Buffer.from([0x61, 0x80]), Buffer.from(TRAILER)])), TRAILER)).toBeNull();
});

it('throws a TypeError for arguments that are not strings', () => {
  const call = mapSource as unknown as (...args: unknown[]) => unknown;
  expect(() => call(1, TRAILER)).toThrow(TypeError);
  expect(() => call(path.join(dir, 'x'))).toThrow(TypeError);
});

function rssKb(): { anon: number; file: number } {
  const s = fs.readFileSync('/proc/self/status', 'utf8');
  return { anon: Number(/^RssAnon:\s+(\d+)/m.exec(s)![1]), file: Number(/^RssFile:\s+(\d+)/m.exec(s)![1]) };
}

it("keeps the characters in the file's pages, not in anonymous memory", () => {
  const MiB = 1024 * 1024;
  const big = file('big.js', Buffer.concat([Buffer.alloc(32 * MiB, 'a'), Buffer.from(`b${TRAILER}`)]));
  const before = rssKb();
  const text = mapSource(big, TRAILER)!;
  // Reads every character (the one b is at the end): each page is faulted in once.
  expect(text.lastIndexOf('a', text.length - 2)).toBe(32 * MiB - 1);
  expect(text.indexOf('b')).toBe(32 * MiB);
  const after = rssKb();
  expect(after.file - before.file).toBeGreaterThan(24 * 1024); // the 32 MiB read, as file pages
  expect(after.anon - before.anon).toBeLessThan(8 * 1024); // a copy would be 32 MiB
});
