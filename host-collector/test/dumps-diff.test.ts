// Dump diff (src/dumps/diff.ts): goroutines and threads that stayed in the same place.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { diffDumps, diffThreads } from '../src/dumps/diff.js';
import { parseGoroutines } from '../src/dumps/goroutines.js';
import { groupGoroutines } from '../src/dumps/group.js';
import { parseThreads } from '../src/dumps/threads.js';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'dumps');
const readFixture = (name: string): string => readFileSync(path.join(fixtures, name), 'utf8');

const MUTEX = (minutes: number) => `goroutine 1 [sync.Mutex.Lock, ${minutes} minutes]:
sync.(*Mutex).Lock(...)
\t/usr/local/go/src/sync/mutex.go:46
main.(*cgroupManager).acquireRoot(0xc0000a6000)
\t/src/envd/phases.go:252 +0x33
main.main()
\t/src/envd/main.go:190 +0x185
`;

const WAITER = `goroutine 18 [chan receive]:
runtime.chanrecv1(0x0?, 0x0?)
\t/usr/local/go/src/runtime/chan.go:489 +0x12
main.main.func1()
\t/src/envd/main.go:177 +0x2c
created by main.main in goroutine 1
\t/src/envd/main.go:176 +0x15f
`;

const POLLER_SELECT = (id: number, arg: string) => `goroutine ${id} [select]:
runtime.selectgo(0xc0006cff70, ${arg})
\t/usr/local/go/src/runtime/select.go:335 +0x7a5
main.pollForMMDSOpts({0x740ad0, 0xc0000a4000})
\t/src/envd/mmds.go:29 +0xf2
created by main.startMMDSPoller in goroutine 1
\t/src/envd/phases.go:201 +0x210
`;

const POLLER_IO = (id: number) => `goroutine ${id} [IO wait]:
internal/poll.runtime_pollWait(0x7f2b3c3a5e38, 0x77)
\t/usr/local/go/src/runtime/netpoll.go:351 +0x85
net.(*netFD).connect(0xc000128080, {0x740ad0, 0xc0000a4000})
\t/usr/local/go/src/net/fd_unix.go:141 +0x6e5
main.getMMDSOpts({0x740ad0, 0xc0000a4000}, {0xc00001a078, 0x16})
\t/src/envd/mmds.go:50 +0x2a5
main.pollForMMDSOpts({0x740ad0, 0xc0000a4000})
\t/src/envd/mmds.go:34 +0x11f
created by main.startMMDSPoller in goroutine 1
\t/src/envd/phases.go:201 +0x210
`;

const SERVE = (line: number) => `goroutine 30 [IO wait]:
net/http.(*conn).serve(0xc0001a6000, {0x6c4f38, 0xc000098150})
\t/usr/local/go/src/net/http/server.go:${line} +0x785
created by net/http.(*Server).Serve in goroutine 1
\t/usr/local/go/src/net/http/server.go:3360 +0x485
`;

const ON_CPU = `goroutine 7 [running]:
\tgoroutine running on other thread; stack unavailable
created by main.main in goroutine 1
\t/src/envd/main.go:150 +0x25
`;

const G0 = `goroutine 0 gp=0x5d1c40 m=0 mp=0x5d2580 [idle]:
runtime.futex(0x5d26c0, 0x80, 0x0, 0x0, 0x0, 0x0)
\t/usr/local/go/src/runtime/sys_linux_amd64.s:557 +0x21
`;

const OTHER = (id: number) => `goroutine ${id} [sleep]:
time.Sleep(0x3b9aca00)
\t/usr/local/go/src/runtime/time.go:338 +0x167
main.ticker()
\t/src/envd/main.go:300 +0x25
`;

const dumpText = (...parts: string[]) => `SIGQUIT: quit\nPC=0x4735a1 m=0 sigcode=0\n\n${parts.join('\n')}`;

const OLDER = dumpText(
  G0,
  MUTEX(3),
  WAITER,
  ON_CPU,
  ...[20, 21, 22, 23, 24].map((id) => POLLER_SELECT(id, `0x${id}?`)),
  SERVE(2127),
  OTHER(40),
);
const NEWER = dumpText(
  G0,
  MUTEX(5),
  WAITER,
  ON_CPU,
  // args differ: still the same place
  ...[20, 21, 22].map((id) => POLLER_SELECT(id, `0x${id + 100}?`)),
  POLLER_IO(23),
  POLLER_IO(24),
  SERVE(2100),
  OTHER(41),
);

describe('diffDumps', () => {
  it('lists the goroutines that did not move, grouped, with moved / gone / appeared / unknown counts', () => {
    const diff = diffDumps(parseGoroutines(OLDER), parseGoroutines(NEWER));
    expect(diff).toMatchObject({ stuckCount: 5, moved: 3, gone: 1, appeared: 1, unknown: 2, complete: true });
    expect(diff.stuck.map((g) => [g.ids, g.blockedIn?.func])).toEqual([
      [[1], 'main.(*cgroupManager).acquireRoot'],
      [[20, 21, 22], 'main.pollForMMDSOpts'],
      [[18], 'main.main.func1'],
    ]);
    // State and wait come from the newer dump.
    expect(diff.stuck[0]).toMatchObject({ state: 'sync.Mutex.Lock', waitMinutes: 5 });
  });

  it('gives the same answer from groups made with allIds, and says when groups lack ids', () => {
    const older = parseGoroutines(OLDER);
    const newer = parseGoroutines(NEWER);
    const fromGroups = diffDumps(groupGoroutines(older, { allIds: true }), groupGoroutines(newer, { allIds: true }));
    const fromDumps = diffDumps(older, newer);
    expect(fromGroups.stuck.map((g) => g.ids)).toEqual(fromDumps.stuck.map((g) => g.ids));
    expect(fromGroups).toMatchObject({ stuckCount: 5, moved: 3, gone: 1, appeared: 1, unknown: 2, complete: true });
    // Small groups list all their ids anyway.
    expect(diffDumps(groupGoroutines(older), newer).complete).toBe(true);

    // 30 pollers: a group without allIds lists 20 of them.
    const many = dumpText(...Array.from({ length: 30 }, (_, i) => POLLER_SELECT(100 + i, '0x1')));
    const partial = diffDumps(groupGoroutines(parseGoroutines(many)), parseGoroutines(many));
    expect(partial).toMatchObject({ complete: false, stuckCount: 20, appeared: 10 });
    const full = diffDumps(groupGoroutines(parseGoroutines(many), { allIds: true }), parseGoroutines(many));
    expect(full).toMatchObject({ complete: true, stuckCount: 30, appeared: 0 });
    expect(full.stuck).toHaveLength(1);
    expect(full.stuck[0]?.count).toBe(30);
  });

  it('a dump compared with itself: everything with a stack is stuck (real fixture)', () => {
    const dump = parseGoroutines(readFixture('fake-envd-go1.19-sigquit-cgroup-hang.txt'));
    const diff = diffDumps(dump, dump);
    expect(diff).toMatchObject({ stuckCount: 8, moved: 0, gone: 0, appeared: 0, unknown: 1 });
    expect(diff.stuck[0]?.blockedIn?.func).toBe('main.(*cgroupManager).acquireRoot');
  });

  it('empty and garbage inputs give an empty diff', () => {
    expect(diffDumps(parseGoroutines('nonsense'), parseGoroutines(''))).toEqual({
      stuck: [],
      stuckCount: 0,
      moved: 0,
      gone: 0,
      appeared: 0,
      unknown: 0,
      complete: true,
    });
  });
});

describe('diffThreads', () => {
  it('two real threads dumps 0.3 s apart: the futex waiters that stayed, the threads that moved', () => {
    const a = parseThreads(readFixture('threads-fake-envd-x86_64-1.txt'));
    const b = parseThreads(readFixture('threads-fake-envd-x86_64-2.txt'));
    const diff = diffThreads(a, b);
    expect(diff).toMatchObject({ stuckCount: 4, moved: 3, gone: 0, appeared: 0, samePid: true });
    expect(diff.stuck).toHaveLength(1);
    expect(diff.stuck[0]).toMatchObject({ count: 4, blockedIn: 'futex_do_wait', tids: [2522, 2525, 2527, 2528] });
  });

  it('tids that come and go, and a different pid (a restart) compares nothing', () => {
    const head = 'threads of pid 10 (envd) arch=x86_64\n';
    const a = parseThreads(
      `${head}task 10 (envd) state=D wchan=io_schedule syscall=74 0x3\ntask 11 (envd) state=S wchan=0 syscall=running\n`,
    );
    const b = parseThreads(
      `${head}task 10 (envd) state=D wchan=io_schedule syscall=74 0x3\ntask 12 (envd) state=S wchan=0 syscall=running\n`,
    );
    expect(diffThreads(a, b)).toMatchObject({ stuckCount: 1, moved: 0, gone: 1, appeared: 1, samePid: true });
    expect(diffThreads(a, b).stuck[0]).toMatchObject({ state: 'D', blockedIn: 'io_schedule', syscall: { name: 'fsync' } });
    const restarted = parseThreads('threads of pid 99 (envd)\ntask 10 (envd) state=D wchan=io_schedule syscall=74\n');
    expect(diffThreads(a, restarted)).toEqual({ stuck: [], stuckCount: 0, moved: 0, gone: 2, appeared: 1, samePid: false });
  });
});
