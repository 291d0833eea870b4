import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseGoroutines } from '../src/dumps/goroutines.js';
import { groupGoroutines } from '../src/dumps/group.js';
import { whereBlocked } from '../src/dumps/where-blocked.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const fixture = (name: string) => fs.readFileSync(path.join(here, 'fixtures/dumps', name), 'utf8');

const frame = (func: string, file = '/src/x.go', line = 1) => `${func}(...)\n\t${file}:${line} +0x1\n`;
const goroutine = (id: number, state: string, frames: string[], createdBy?: string) =>
  `goroutine ${id} [${state}]:\n${frames.join('')}${createdBy ? `created by ${createdBy} in goroutine 1\n\t/src/m.go:9 +0x1\n` : ''}\n`;

describe('whereBlocked', () => {
  it('names the frame the main goroutine waits in (the fake envd hung in cgroup-manager)', () => {
    const w = whereBlocked(groupGoroutines(parseGoroutines(fixture('fake-envd-go1.19-sigquit-cgroup-hang.txt'))));
    expect(w).toMatchObject({ rule: 'main', func: 'main.(*cgroupManager).acquireRoot', state: 'semacquire' });
    expect(w!.text).toBe('main goroutine blocked in main.(*cgroupManager).acquireRoot (semacquire)');
  });

  it('without main, takes the longest application wait, with its minutes', () => {
    const text =
      goroutine(7, 'chan receive, 3 minutes', [frame('runtime.gopark'), frame('main.waitForever')]) +
      goroutine(8, 'IO wait', [frame('runtime.gopark'), frame('main.poll')]) +
      goroutine(9, 'IO wait', [frame('runtime.gopark'), frame('main.poll')]) +
      goroutine(10, 'select, 9 minutes', [frame('runtime.gopark'), frame('runtime.bgsweep')]);
    const w = whereBlocked(groupGoroutines(parseGoroutines(text)));
    expect(w).toMatchObject({ rule: 'longest-wait', func: 'main.waitForever', waitMinutes: 3 });
    expect(w!.text).toBe('1 goroutine blocked in main.waitForever (chan receive, 3 minutes), the longest wait');
  });

  it('else the largest application group, with its creator: a poll storm', () => {
    const storm = Array.from({ length: 5 }, (_, i) =>
      goroutine(
        20 + i,
        'IO wait',
        [frame('internal/poll.runtime_pollWait'), frame('main.pollMMDS', '/src/mmds.go', 40)],
        'main.startStorm',
      ),
    ).join('');
    const text = storm + goroutine(40, 'select', [frame('main.ticker')]) + goroutine(41, 'running', []);
    const w = whereBlocked(groupGoroutines(parseGoroutines(text)));
    expect(w).toMatchObject({ rule: 'largest-group', func: 'main.pollMMDS', count: 5 });
    expect(w!.text).toBe('5 goroutines blocked in main.pollMMDS (IO wait), the largest group, created by main.startStorm');
  });

  it('says nothing when no goroutine is in application code', () => {
    const text = goroutine(3, 'GC sweep wait', [frame('runtime.gopark'), frame('runtime.bgsweep')]);
    expect(whereBlocked(groupGoroutines(parseGoroutines(text)))).toBeNull();
  });
});
