import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { appendFileSync, mkdtempSync, renameSync, rmSync, truncateSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileFollower } from '../src/logs/follow-file.js';
import { LineSplitter } from '../src/logs/lines.js';
import type { LogWriter } from '../src/logs/log-watcher.js';

let dir: string;
let file: string;
const followers: FileFollower[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'vsockdiag-follow-'));
  file = join(dir, 'current');
});
afterEach(() => {
  for (const f of followers.splice(0)) f.close();
  rmSync(dir, { recursive: true, force: true });
});

function follow(opts: ConstructorParameters<typeof FileFollower>[2] = {}) {
  const lines: string[] = [];
  const chunks: number[] = [];
  const splitter = new LineSplitter((l) => lines.push(l));
  const writer: LogWriter = {
    feed: (c) => {
      chunks.push(c.length);
      splitter.feed(c);
    },
    end: () => splitter.end(),
  };
  const f = new FileFollower(file, writer, opts);
  followers.push(f);
  return { f, lines, chunks };
}

describe('FileFollower', () => {
  it('starts at the end of an existing file and follows appends', () => {
    writeFileSync(file, 'previous boot 1\nprevious boot 2\n');
    const { f, lines } = follow();
    f.poll();
    expect(lines).toEqual([]);
    appendFileSync(file, 'envd startup: creating logger\npart');
    f.poll();
    expect(lines).toEqual(['envd startup: creating logger']);
    f.poll(); // nothing new
    appendFileSync(file, 'ial line\n');
    f.tick(); // the same as poll()
    expect(lines).toEqual(['envd startup: creating logger', 'partial line']);
    expect(f.counters).toMatchObject({ opens: 1, truncations: 0, rotations: 0, bytes: 43 });
  });

  it('fromStart reads an existing file from its beginning', () => {
    writeFileSync(file, 'a\nb\n');
    const { f, lines } = follow({ fromStart: true });
    f.poll();
    expect(lines).toEqual(['a', 'b']);
  });

  it('notices truncation and reads the file again from the start', () => {
    writeFileSync(file, 'old old old old old\n');
    const { f, lines } = follow();
    appendFileSync(file, 'one\n');
    f.poll();
    truncateSync(file, 0);
    appendFileSync(file, 'two\n');
    f.poll();
    expect(lines).toEqual(['one', 'two']);
    expect(f.counters.truncations).toBe(1);
  });

  it('follows rotation (rename + new file): the rest of the old file first, then the new one', () => {
    writeFileSync(file, '');
    const { f, lines } = follow();
    appendFileSync(file, 'before\n');
    f.poll();
    // the writer adds to the old file, the rotator renames it, a new file appears
    appendFileSync(file, 'late in old\nunfinished');
    renameSync(file, join(dir, '@4000000000000000.s'));
    f.poll(); // path gone: old file drained, kept open
    expect(lines).toEqual(['before', 'late in old']);
    writeFileSync(file, 'new 1\n');
    f.poll();
    expect(lines).toEqual(['before', 'late in old', 'unfinished', 'new 1']);
    appendFileSync(file, 'new 2\n');
    f.poll();
    expect(lines.at(-1)).toBe('new 2');
    expect(f.counters).toMatchObject({ opens: 2, rotations: 1 });
  });

  it('follows rotation when the new file is already there at the next poll', () => {
    writeFileSync(file, '');
    const { f, lines } = follow();
    appendFileSync(file, 'old\n');
    renameSync(file, join(dir, 'previous'));
    writeFileSync(file, 'new\n');
    f.poll();
    expect(lines).toEqual(['old', 'new']);
  });

  it('retries a missing file quietly and reads it from the start when it appears', () => {
    const messages: string[] = [];
    const { f, lines } = follow({ log: (_l, m) => messages.push(m) });
    for (let i = 0; i < 5; i++) f.poll();
    expect(lines).toEqual([]);
    writeFileSync(file, 'first\nsecond\n');
    f.poll();
    expect(lines).toEqual(['first', 'second']);
    // deleted and created again: the new file from its start
    unlinkSync(file);
    f.poll();
    writeFileSync(file, 'third\n');
    f.poll();
    expect(lines).toEqual(['first', 'second', 'third']);
    expect(messages).toEqual([]);
  });

  it('reads a huge append in bounded slices, one per poll', () => {
    writeFileSync(file, '');
    const { f, lines, chunks } = follow();
    const line = `${'x'.repeat(99)}\n`; // 100 bytes
    appendFileSync(file, line.repeat(30_000)); // 3,000,000 bytes
    f.poll();
    expect(f.counters.bytes).toBe(256 * 1024);
    expect(Math.max(...chunks)).toBeLessThanOrEqual(64 * 1024);
    let polls = 1;
    while (f.counters.bytes < 3_000_000) {
      const before = f.counters.bytes;
      f.poll();
      polls++;
      expect(f.counters.bytes - before).toBeLessThanOrEqual(256 * 1024);
    }
    expect(polls).toBe(Math.ceil(3_000_000 / (256 * 1024)));
    expect(lines).toHaveLength(30_000);
    expect(lines.every((l) => l.length === 99)).toBe(true);
  });

  it('a huge append to a rotated-away file is drained in slices before switching', () => {
    writeFileSync(file, '');
    const { f, lines } = follow({ maxBytesPerPoll: 1000 });
    appendFileSync(file, 'o'.repeat(99).concat('\n').repeat(25)); // 2500 bytes
    renameSync(file, join(dir, 'old'));
    writeFileSync(file, 'new\n');
    f.poll();
    f.poll();
    expect(lines).toHaveLength(20);
    f.poll();
    expect(lines).toHaveLength(26);
    expect(lines.at(-1)).toBe('new');
  });

  it('close() stops following', () => {
    writeFileSync(file, '');
    const { f, lines } = follow();
    f.close();
    appendFileSync(file, 'after close\n');
    f.poll();
    expect(lines).toEqual([]);
  });
});
