// Grouping rules (src/dumps/group.ts): identity, blockedIn, interest order, summary.
import { describe, expect, it } from 'vitest';
import { packageOf, type Frame, type Goroutine } from '../src/dumps/goroutines.js';
import { blockedInFrame, groupGoroutines, isApplicationPackage, summarize } from '../src/dumps/group.js';

function frame(func: string, file = '/x/x.go', line = 1, args?: string): Frame {
  const f: Frame = { func, pkg: packageOf(func), file, line };
  if (args !== undefined) f.args = args;
  return f;
}

function g(id: number, state: string, frames: Frame[], extra: Partial<Goroutine> = {}): Goroutine {
  return { id, state, lockedToThread: false, frames, elided: false, ...extra };
}

describe('isApplicationPackage', () => {
  it('tells the standard library from application code', () => {
    for (const p of ['runtime', 'net/http', 'sync', 'internal/poll', 'os/signal', 'vendor/golang.org/x/net/http2/hpack', 'time']) {
      expect(isApplicationPackage(p), p).toBe(false);
    }
    for (const p of [
      'main',
      'github.com/e2b-dev/infra/packages/envd/internal/host',
      'gopkg.in/yaml.v3',
      'envd/internal/host',
      'golang.org/x/sys/unix',
    ]) {
      expect(isApplicationPackage(p), p).toBe(true);
    }
    expect(isApplicationPackage('')).toBe(false);
  });
});

describe('blockedInFrame', () => {
  it('skips runtime, internal/…, sync, syscall and time to the first other frame', () => {
    const frames = [
      frame('runtime.gopark'),
      frame('runtime.semacquire1'),
      frame('internal/sync.(*Mutex).lockSlow'),
      frame('sync.(*Mutex).Lock'),
      frame('syscall.Syscall6'),
      frame('time.Sleep'),
      frame('net.(*netFD).accept'),
      frame('main.serve'),
    ];
    expect(blockedInFrame(frames)?.func).toBe('net.(*netFD).accept');
  });

  it('keeps sync when nothing else is there, else falls back to the top frame', () => {
    expect(blockedInFrame([frame('runtime.gopark'), frame('sync.(*WaitGroup).Wait'), frame('runtime.goexit')])?.func).toBe(
      'sync.(*WaitGroup).Wait',
    );
    expect(blockedInFrame([frame('runtime.gopark'), frame('runtime.bgsweep'), frame('runtime.goexit')])?.func).toBe('runtime.gopark');
    expect(blockedInFrame([frame('panic'), frame('main.crash')])?.func).toBe('main.crash');
    expect(blockedInFrame([])).toBeUndefined();
  });
});

describe('groupGoroutines', () => {
  const stack = (args: string) => [frame('runtime.gopark', '/go/src/runtime/proc.go', 363, args), frame('main.loop', '/src/a.go', 10)];

  it('groups identical state + func/file/line sequences, ignoring args; ids sorted, first 20 kept', () => {
    const gs: Goroutine[] = [];
    for (let id = 100; id > 70; id--) gs.push(g(id, 'select', stack(`0x${id}`), id === 80 ? { waitMinutes: 4 } : {}));
    const groups = groupGoroutines(gs, { allIds: true });
    expect(groups).toHaveLength(1);
    expect(groups[0]).toMatchObject({ count: 30, state: 'select', waitMinutes: 4, application: true });
    expect(groups[0]?.ids).toEqual(Array.from({ length: 20 }, (_, i) => 71 + i));
    expect(groups[0]?.allIds).toHaveLength(30);
    expect(groups[0]?.frames[0]?.args).toBeUndefined();
    expect(groupGoroutines(gs)[0]?.allIds).toBeUndefined();
  });

  it('keeps stacks apart however many sites a dump has (keys of one and of two characters per frame)', () => {
    // 75,000 distinct sites: the numbers past 2^15 take two characters each, and past 2^16
    // they would wrap in one. Every stack is there twice, and none meets another.
    const gs: Goroutine[] = [];
    for (let i = 0; i < 50_000; i++) {
      const frames =
        i % 2
          ? [frame(`main.f${i}`, '/a.go', i), frame(`main.h${i}`, '/a.go', i)]
          : [frame('main.f0', '/a.go', 0), frame(`main.g${i}`, '/b.go', i)];
      gs.push(
        g(2 * i, 'select', frames),
        g(
          2 * i + 1,
          'select',
          frames.map((f) => ({ ...f })),
        ),
      );
    }
    const groups = groupGoroutines(gs);
    expect(groups).toHaveLength(50_000);
    expect(groups.every((x) => x.count === 2 && x.ids[1] === x.ids[0]! + 1)).toBe(true);
  });

  it('splits on state, line, locked to thread, elided and created-by location', () => {
    const base = stack('x');
    const moved = [base[0]!, frame('main.loop', '/src/a.go', 11)];
    const groups = groupGoroutines([
      g(1, 'select', base),
      g(2, 'chan receive', base),
      g(3, 'select', moved),
      g(4, 'select', base, { lockedToThread: true }),
      g(5, 'select', base, { elided: true }),
      g(6, 'select', base, { createdBy: { ...frame('main.main', '/src/m.go', 5), goroutine: 1 } }),
      g(7, 'select', base, { createdBy: { ...frame('main.main', '/src/m.go', 5), goroutine: 9 } }),
      g(8, 'select', base),
    ]);
    expect(groups.map((x) => x.ids)).toEqual([[1, 8], [6, 7], [2], [3], [4], [5]]);
    // The creating goroutine differs: kept out of the group's createdBy.
    expect(groups[1]?.createdBy).toEqual({ func: 'main.main', pkg: 'main', file: '/src/m.go', line: 5 });
  });

  it('splits on the state flags (leaked, durable) and keeps unparsed headers apart', () => {
    const base = stack('x');
    const groups = groupGoroutines([
      g(1, 'chan receive', base),
      g(2, 'chan receive', base, { leaked: true }),
      g(3, 'chan receive', base, { leaked: true }),
      g(4, 'chan receive', base, { durable: true }),
      g(5, '?', base, { unparsed: true, header: 'goroutine 5 [x] ??:', headerLine: 9 }),
      g(6, '?', base),
    ]);
    expect(groups.map((x) => [x.ids, x.leaked, x.durable, x.unparsed])).toEqual([
      [[2, 3], true, undefined, undefined],
      [[1], undefined, undefined, undefined],
      [[4], undefined, true, undefined],
      [[5], undefined, undefined, true],
      [[6], undefined, undefined, undefined],
    ]);
  });

  it('does not split on labels: lists the label sets, the most common first', () => {
    const base = stack('x');
    const labels = (o: Record<string, string>) => Object.assign(Object.create(null) as Record<string, string>, o);
    const gs = [
      g(1, 'select', base),
      ...Array.from({ length: 8 }, (_, i) => g(10 + i, 'select', base, { labels: labels({ req: `r${i}`, worker: 'mmds' }) })),
      ...Array.from({ length: 3 }, (_, i) => g(30 + i, 'select', base, { labels: labels({ worker: 'mmds', req: 'r5' }) })),
      g(40, 'select', base, { labels: labels(JSON.parse('{"__proto__": "p"}') as Record<string, string>) }),
    ];
    const groups = groupGoroutines(gs);
    expect(groups).toHaveLength(1);
    const grp = groups[0]!;
    expect(grp).toMatchObject({ count: 13, labelled: 12, labelSetsTotal: 9 });
    // {req: r5, worker: mmds} in either key order is one set of 4; then the others as first seen.
    expect(grp.labelSets!.map((x) => [{ ...x.labels }, x.count])).toEqual([
      [{ req: 'r5', worker: 'mmds' }, 4],
      [{ req: 'r0', worker: 'mmds' }, 1],
      [{ req: 'r1', worker: 'mmds' }, 1],
      [{ req: 'r2', worker: 'mmds' }, 1],
      [{ req: 'r3', worker: 'mmds' }, 1],
    ]);
    expect(summarize(groups)).toBe(
      '13  select  -  blocked in main.loop (a.go:10)  labels {req: r5, worker: mmds} ×4, +8 more sets, 1 without',
    );
    // The group's sets are copies: the goroutines' own objects are not shared.
    expect(grp.labelSets![0]!.labels).not.toBe(gs[6]!.labels);
    expect(Object.getOwnPropertyDescriptor(groupGoroutines([gs[12]!])[0]!.labelSets![0]!.labels, '__proto__')?.value).toBe('p');
  });

  it('orders by application frame, then wait, then count, then id', () => {
    const runtimeOnly = [frame('runtime.gopark'), frame('runtime.bgscavenge')];
    const app = (line: number) => [frame('runtime.gopark'), frame('main.f', '/src/a.go', line)];
    const groups = groupGoroutines([
      g(1, 'GC scavenge wait', runtimeOnly, { waitMinutes: 90 }),
      g(2, 'select', app(1)),
      g(3, 'select', app(2)),
      g(4, 'select', app(2)),
      g(5, 'select', app(3), { waitMinutes: 1 }),
      g(6, 'select', app(4)),
    ]);
    expect(groups.map((x) => x.ids[0])).toEqual([5, 3, 2, 6, 1]);
  });
});

describe('summarize', () => {
  it('prints one aligned line per group and a tail line past the limit', () => {
    const groups = groupGoroutines([
      g(
        1,
        'semacquire',
        [frame('sync.(*Mutex).Lock', '/go/src/sync/mutex.go', 90), frame('main.(*m).acquire', '/src/envd/phases.go', 252)],
        {
          waitMinutes: 12,
        },
      ),
      ...Array.from({ length: 150 }, (_, i) =>
        g(10 + i, 'select', [frame('runtime.selectgo'), frame('main.poll', '/src/envd/mmds.go', 29)]),
      ),
      g(2, 'running', [], { stackUnavailable: true }),
      g(3, 'sleep', [frame('time.Sleep', '/go/src/runtime/time.go', 195)], { lockedToThread: true }),
    ]);
    const text = summarize(groups);
    expect(text.split('\n')).toEqual([
      '  1  semacquire     12m  blocked in main.(*m).acquire (phases.go:252)',
      '150  select           -  blocked in main.poll (mmds.go:29)',
      '  1  running          -  running on another thread',
      '  1  sleep, locked    -  blocked in time.Sleep (time.go:195)',
    ]);
    expect(summarize(groups, { limit: 2 }).split('\n').at(-1)).toBe('… 2 more groups (2 goroutines)');
    expect(summarize([])).toBe('');
  });
});
