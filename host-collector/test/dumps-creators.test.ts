// The view by creator (src/dumps/creators.ts): a storm whose goroutines are caught in
// different places and states stays one row; identity, counts, order and summary.
import { describe, expect, it } from 'vitest';
import { groupByCreator, summarizeCreators } from '../src/dumps/creators.js';
import { packageOf, parseGoroutines, type CreatedBy, type Frame, type Goroutine } from '../src/dumps/goroutines.js';
import { groupGoroutines } from '../src/dumps/group.js';

function frame(func: string, file = '/x/x.go', line = 1): Frame {
  return { func, pkg: packageOf(func), file, line };
}

function creator(func: string, file: string, line: number, goroutine?: number): CreatedBy {
  return { ...frame(func, file, line), ...(goroutine !== undefined ? { goroutine } : {}) };
}

function g(id: number, state: string, frames: Frame[], extra: Partial<Goroutine> = {}): Goroutine {
  return { id, state, lockedToThread: false, frames, elided: false, ...extra };
}

// Where an MMDS poller can be caught: waiting for the tick, dialling, reading the answer.
const TICK = [frame('runtime.gopark'), frame('runtime.selectgo'), frame('main.pollForMMDSOpts', '/src/envd/mmds.go', 29)];
const DIAL = [
  frame('internal/poll.runtime_pollWait'),
  frame('net.(*netFD).connect', '/go/src/net/fd_unix.go', 141),
  frame('net/http.(*Transport).dial', '/go/src/net/http/transport.go', 1269),
  frame('main.getMMDSOpts', '/src/envd/mmds.go', 55),
  frame('main.pollForMMDSOpts', '/src/envd/mmds.go', 34),
];
const READ = [
  frame('internal/poll.runtime_pollWait'),
  frame('net.(*netFD).Read', '/go/src/net/fd_posix.go', 55),
  frame('main.getMMDSOpts', '/src/envd/mmds.go', 60),
  frame('main.pollForMMDSOpts', '/src/envd/mmds.go', 34),
];
const POLLER = creator('main.startMMDSPoller', '/src/envd/phases.go', 201, 1);

function storm(): Goroutine[] {
  const gs: Goroutine[] = [
    g(1, 'sync.Mutex.Lock', [frame('sync.(*Mutex).Lock'), frame('main.(*cgroupManager).acquireRoot', '/src/envd/phases.go', 252)], {
      waitMinutes: 2,
    }),
  ];
  for (let i = 0; i < 200; i++) {
    const id = 100 + i;
    const at = i % 10 < 6 ? ['select', TICK] : i % 10 < 9 ? ['IO wait', DIAL] : ['IO wait', READ];
    gs.push(g(id, at[0] as string, at[1] as Frame[], { createdBy: POLLER, ...(i === 7 ? { leaked: true } : {}) }));
  }
  // The Go runtime's and net/http's own goroutines around them.
  for (let i = 0; i < 3; i++)
    gs.push(
      g(400 + i, 'IO wait', READ.slice(0, 2), {
        createdBy: creator('net/http.(*Transport).dialConnFor', '/go/src/net/http/transport.go', 1538, 100 + i),
      }),
    );
  return gs;
}

describe('groupByCreator', () => {
  it('a storm caught in several places and states is one creator group', () => {
    const gs = storm();
    expect(groupGoroutines(gs).filter((x) => x.createdBy?.func === 'main.startMMDSPoller').length).toBe(4);
    const groups = groupByCreator(gs);
    expect(groups.map((x) => [x.createdBy?.func, x.count])).toEqual([
      ['main.startMMDSPoller', 200],
      [undefined, 1],
      ['net/http.(*Transport).dialConnFor', 3],
    ]);
    const pollers = groups[0]!;
    expect(pollers.createdBy).toEqual(POLLER);
    expect(pollers.ids).toEqual(Array.from({ length: 20 }, (_, i) => 100 + i));
    expect(pollers.states).toEqual([
      { state: 'select', count: 120 },
      { state: 'IO wait', count: 79 },
      { state: 'IO wait (leaked)', count: 1 },
    ]);
    expect(pollers.blockedIn.map((f) => [f.func, f.line, f.count])).toEqual([
      ['main.pollForMMDSOpts', 29, 120],
      ['net.(*netFD).connect', 141, 60],
      ['net.(*netFD).Read', 55, 20],
    ]);
    expect(pollers.stackGroups).toBe(4);
    expect(pollers.application).toBe(true);
    // The dialers are created from many pollers: no single creating goroutine.
    expect(groups[2]!.createdBy).toEqual({
      func: 'net/http.(*Transport).dialConnFor',
      pkg: 'net/http',
      file: '/go/src/net/http/transport.go',
      line: 1538,
    });
    expect(groups[2]!.application).toBe(false);
  });

  it('the creator is its func and file:line; the same func at another line is another creator', () => {
    const groups = groupByCreator([
      g(1, 'select', TICK, { createdBy: creator('main.main', '/src/m.go', 10) }),
      g(2, 'select', TICK, { createdBy: creator('main.main', '/src/m.go', 11) }),
      g(3, 'select', TICK, { createdBy: creator('main.main', '/src/m.go', 10, 1) }),
    ]);
    expect(groups.map((x) => x.ids)).toEqual([[1, 3], [2]]);
  });

  it('orders application creators first, then by count, wait and id; counts unparsed members', () => {
    const lib = creator('net/http.(*Server).Serve', '/go/src/net/http/server.go', 3360);
    const groups = groupByCreator([
      ...Array.from({ length: 5 }, (_, i) => g(10 + i, 'IO wait', READ.slice(0, 2), { createdBy: lib })),
      g(20, 'select', TICK, { createdBy: creator('main.a', '/src/a.go', 1), waitMinutes: 9 }),
      g(21, 'select', TICK, { createdBy: creator('main.b', '/src/b.go', 1) }),
      g(22, '?', TICK, { createdBy: creator('main.b', '/src/b.go', 1), unparsed: true }),
    ]);
    expect(groups.map((x) => [x.createdBy?.func, x.count, x.unparsed])).toEqual([
      ['main.b', 2, 1],
      ['main.a', 1, undefined],
      ['net/http.(*Server).Serve', 5, undefined],
    ]);
    expect(groups[1]!.waitMinutes).toBe(9);
    expect(groupByCreator([])).toEqual([]);
  });

  it('summarizes one aligned line per creator and a tail line past the limit', () => {
    const text = summarizeCreators(groupByCreator(storm()), { limit: 2 });
    expect(text.split('\n')).toEqual([
      '200  created by main.startMMDSPoller (phases.go:201)  4 stacks  120 select, 79 IO wait, 1 IO wait (leaked)  blocked in main.pollForMMDSOpts (mmds.go:29) ×120, net.(*netFD).connect (fd_unix.go:141) ×60, net.(*netFD).Read (fd_posix.go:55) ×20',
      '  1  no creator                                       1 stack   1 sync.Mutex.Lock  blocked in main.(*cgroupManager).acquireRoot (phases.go:252)',
      '… 1 more creator (3 goroutines)',
    ]);
  });

  it('works on parsed text: created by with and without "in goroutine N"', () => {
    const dump = parseGoroutines(`goroutine 5 [select]:
main.loop()
\t/src/a.go:3 +0x1
created by main.main
\t/src/m.go:9 +0x2

goroutine 6 gp=0xc000003 m=nil [chan receive]:
main.wait()
\t/src/a.go:7 +0x1
created by main.main in goroutine 1
\t/src/m.go:9 +0x2
`);
    const groups = groupByCreator(dump);
    expect(groups).toHaveLength(1);
    expect(groups[0]).toMatchObject({ count: 2, stackGroups: 2, createdBy: { func: 'main.main', line: 9 } });
    expect(groups[0]!.createdBy!.goroutine).toBeUndefined();
  });
});
