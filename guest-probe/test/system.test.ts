import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventSchema, type EventBody } from '@vsockdiag/proto';
import { fakeProcTree } from '../../test/support/fake-proc.js';
import { SYSTEM_EVERY_MS, SystemSampler, UNKNOWN_BOOT_ID, readSystem, type SystemEvent } from '../src/system.js';

let root: string;

const tree = (files: Record<string, string>) => fakeProcTree(root, files).root;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'system-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

const BOOT_ID = '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0';
const FULL = {
  uptime: '12345.67 23456.78\n',
  loadavg: '0.25 1.50 10.07 2/345 6789\n',
  meminfo: 'MemTotal:        2031616 kB\nMemFree:          100000 kB\nMemAvailable:    1500000 kB\nBuffers: 1 kB\n',
  'sys/kernel/random/boot_id': `${BOOT_ID}\n`,
};

function sampler(procRoot: string, everyMs?: number) {
  const events: SystemEvent[] = [];
  let now = 1000;
  let wall = 1_700_000_000_000;
  const s = new SystemSampler({
    procRoot,
    ...(everyMs === undefined ? {} : { everyMs }),
    now: () => now,
    wallNow: () => wall,
    emit: (body: EventBody) => {
      eventSchema.parse({ ...body, seq: 1, t: 0 });
      expect(body.kind).toBe('system');
      events.push(body as SystemEvent);
    },
  });
  return {
    s,
    events,
    advance(ms: number) {
      now += ms;
      wall += ms;
    },
    stepWall(ms: number) {
      wall += ms;
    },
  };
}

describe('readSystem', () => {
  it('builds a system event from the proc files and the wall clock', () => {
    expect(readSystem(tree(FULL), () => 1_700_000_000_123)).toEqual({
      kind: 'system',
      uptimeMs: 12_345_670,
      load: [0.25, 1.5, 10.07],
      memTotalKb: 2031616,
      memAvailableKb: 1500000,
      bootId: BOOT_ID,
      wallMs: 1_700_000_000_123,
    });
  });

  it('fills what is unknown with 0, [] and "unknown"; nothing without uptime', () => {
    expect(readSystem(tree({ uptime: '5.5 1\n' }), () => 7)).toEqual({
      kind: 'system',
      uptimeMs: 5500,
      load: [],
      memTotalKb: 0,
      memAvailableKb: 0,
      bootId: UNKNOWN_BOOT_ID,
      wallMs: 7,
    });
    // Pre-3.14 meminfo (no MemAvailable), a short loadavg: the same fallbacks.
    const odd = readSystem(tree({ uptime: '1 1\n', meminfo: 'MemTotal: 10 kB\n', loadavg: '0.1 0.2\n' }))!;
    expect(odd).toMatchObject({ load: [], memTotalKb: 0, memAvailableKb: 0 });
    expect(readSystem(tree({ ...FULL, uptime: 'garbage\n' }))).toBeNull();
    expect(readSystem(tree({}))).toBeNull();
  });
});

describe('SystemSampler', () => {
  it('emits on the first tick, then at most every everyMs', () => {
    const { s, events, advance } = sampler(tree(FULL));
    expect(s.tick()).toBe(true);
    expect(events).toHaveLength(1);
    for (let i = 0; i < 9; i++) {
      advance(1000);
      expect(s.tick()).toBe(false);
    }
    advance(999);
    expect(s.tick()).toBe(false);
    advance(1);
    expect(s.tick()).toBe(true);
    expect(events).toHaveLength(2);
    expect(events[1]!.wallMs - events[0]!.wallMs).toBe(SYSTEM_EVERY_MS);
  });

  it('honours everyMs and soon()', () => {
    const { s, events, advance } = sampler(tree(FULL), 2000);
    s.tick();
    advance(1500);
    s.tick();
    expect(events).toHaveLength(1);
    s.soon();
    s.tick();
    expect(events).toHaveLength(2);
    advance(2000);
    s.tick();
    expect(events).toHaveLength(3);
  });

  it('is rate-limited by its own clock, not the wall clock (which /init may step)', () => {
    const { s, events, advance, stepWall } = sampler(tree(FULL));
    s.tick();
    stepWall(-3_600_000); // wall clock stepped back an hour
    advance(10_000);
    expect(s.tick()).toBe(true);
    expect(events[1]!.wallMs).toBe(events[0]!.wallMs + 10_000 - 3_600_000);
  });

  it('skips a sample when uptime is unreadable, and tries again only after everyMs', () => {
    const dir = tree({ loadavg: FULL.loadavg });
    const { s, events, advance } = sampler(dir);
    expect(s.tick()).toBe(false);
    writeFileSync(join(dir, 'uptime'), FULL.uptime);
    advance(5000);
    expect(s.tick()).toBe(false);
    advance(5000);
    expect(s.tick()).toBe(true);
    expect(events[0]).toMatchObject({ uptimeMs: 12_345_670, load: [0.25, 1.5, 10.07], memTotalKb: 0 });
  });

  it('never throws on an odd procRoot', () => {
    const { s } = sampler(join(root, 'missing'));
    expect(s.tick()).toBe(false);
    const file = join(root, 'plain-file');
    writeFileSync(file, 'x');
    const odd = sampler(file);
    expect(() => odd.s.tick()).not.toThrow();
  });
});

describe.skipIf(!existsSync('/proc/uptime'))('SystemSampler on the live /proc', () => {
  it('reports sane values', () => {
    const events: SystemEvent[] = [];
    const s = new SystemSampler({
      procRoot: '/proc',
      emit: (body) => {
        eventSchema.parse({ ...body, seq: 1, t: 0 });
        events.push(body as SystemEvent);
      },
    });
    const before = Date.now();
    expect(s.tick()).toBe(true);
    expect(s.tick()).toBe(false);
    const e = events[0]!;
    expect(e.uptimeMs).toBeGreaterThan(0);
    expect(e.load).toHaveLength(3);
    for (const l of e.load) expect(l).toBeGreaterThanOrEqual(0);
    expect(e.memTotalKb).toBeGreaterThan(1024);
    expect(e.memAvailableKb).toBeGreaterThan(0);
    expect(e.memAvailableKb).toBeLessThanOrEqual(e.memTotalKb);
    expect(e.bootId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(e.wallMs).toBeGreaterThanOrEqual(before);
    expect(e.wallMs).toBeLessThanOrEqual(Date.now());
  });
});
