// Go traceback parser (src/dumps/goroutines.ts): a real Go 1.19 SIGQUIT dump of the
// fake envd (fixture), hand-written samples of newer and older formats (Go 1.26/1.27 labels
// and state flags among them), garbage and truncated input, headers the parser does not
// understand (kept and counted), and 250- and 10,000-goroutine synthetic dumps.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { analyzeDump, summarizeAnalysis } from '../src/dumps/analyze.js';
import { detectDumpKind } from '../src/dumps/detect.js';
import { packageOf, parseGoroutineHeader, parseGoroutines, type Goroutine } from '../src/dumps/goroutines.js';
import { formatLabels, goQuote } from '../src/dumps/labels.js';
import { groupGoroutines, summarize } from '../src/dumps/group.js';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'dumps');
const readFixture = (name: string): string => readFileSync(path.join(fixtures, name), 'utf8');
const FAKE_ENVD_DUMP = 'fake-envd-go1.19-sigquit-cgroup-hang.txt';

function byId(gs: Goroutine[], id: number): Goroutine {
  const g = gs.find((x) => x.id === id);
  if (!g) throw new Error(`goroutine ${id} not parsed`);
  return g;
}

// A Go 1.23+ SIGQUIT dump (GOTRACEBACK=system style headers), hand-written.
const NEWER = `envd: starting
SIGQUIT: quit
PC=0x4735a1 m=0 sigcode=0

goroutine 0 gp=0x5d1c40 m=0 mp=0x5d2580 [idle]:
runtime.futex(0x5d26c0, 0x80, 0x0, 0x0, 0x0, 0x0)
\t/usr/local/go/src/runtime/sys_linux_amd64.s:557 +0x21 fp=0x7ffd8c1b0d40 sp=0x7ffd8c1b0d38 pc=0x4735a1
runtime.mcall()
\t/usr/local/go/src/runtime/asm_amd64.s:459 +0x4e fp=0x7ffd8c1b0e50 sp=0x7ffd8c1b0e40 pc=0x46f78e

goroutine 1 gp=0xc000002380 m=nil [sync.Mutex.Lock, 3 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/proc.go:424 +0xce fp=0xc00008bc88 sp=0xc00008bc68 pc=0x437b56
runtime.goparkunlock(...)
\t/usr/local/go/src/runtime/proc.go:430
runtime.semacquire1(0xc0000a6008, 0x0, 0x3, 0x1, 0x15)
\t/usr/local/go/src/runtime/sema.go:178 +0x225
internal/sync.runtime_SemacquireMutex(0x0?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/sema.go:95 +0x25
internal/sync.(*Mutex).lockSlow(0xc0000a6008)
\t/usr/local/go/src/internal/sync/mutex.go:149 +0x15d
internal/sync.(*Mutex).Lock(...)
\t/usr/local/go/src/internal/sync/mutex.go:70
sync.(*Mutex).Lock(...)
\t/usr/local/go/src/sync/mutex.go:46
main.(*cgroupManager).acquireRoot(0xc0000a6000, {0x5c4e20, 0x6})
\t/src/envd/main.go:252 +0x33
main.createCgroupManager(0xc0000a6000, {{0x6c3198?, 0xc000108090?}, {0x6c68b6?, 0xc0001080a0?}})
\t/src/envd/main.go:244 +0x105
main.main()
\t/src/envd/main.go:190 +0x185

goroutine 18 gp=0xc000102000 m=nil [chan receive, 5 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/proc.go:424 +0xce
runtime.chanrecv(0xc00005c300, 0x0, 0x1)
\t/usr/local/go/src/runtime/chan.go:639 +0x41c
runtime.chanrecv1(0x0?, 0x0?)
\t/usr/local/go/src/runtime/chan.go:489 +0x12
main.main.func1()
\t/src/envd/main.go:177 +0x2c
created by main.main in goroutine 1
\t/src/envd/main.go:176 +0x15f

goroutine 7 gp=0xc000103500 m=4 mp=0xc000100008 [running]:
\tgoroutine running on other thread; stack unavailable
created by net/http.(*Server).Serve in goroutine 1
\t/usr/local/go/src/net/http/server.go:3285 +0x4b4

goroutine 22 [select, 2 minutes, locked to thread]:
runtime.gopark(0xc00003c7a8?, 0x2?, 0xd7?, 0x7e?, 0xc00003c7a4?)
\t/usr/local/go/src/runtime/proc.go:424 +0xce
runtime.selectgo(0xc00006afa8, 0xc00003c7a0, 0x0?, 0x0, 0x0?, 0x1)
\t/usr/local/go/src/runtime/select.go:335 +0x7a5
github.com/e2b-dev/infra/packages/envd/internal/host.(*cgroupWatcher).loop(0xc0001b2000, ?, ...)
\t/src/envd/internal/host/cgroup.go:88 +0x65
created by github.com/e2b-dev/infra/packages/envd/internal/host.NewWatcher in goroutine 1
\t/src/envd/internal/host/cgroup.go:40 +0x1a5

goroutine 30 [IO wait, 12 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/proc.go:424 +0xce
runtime.netpollblock(0x0?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/netpoll.go:575 +0xf7
internal/poll.runtime_pollWait(0x7f2b3c3a5e38, 0x72)
\t/usr/local/go/src/runtime/netpoll.go:351 +0x85
internal/poll.(*pollDesc).wait(0xc000128080?, 0xc000144000?, 0x0)
\t/usr/local/go/src/internal/poll/fd_poll_runtime.go:84 +0x27
internal/poll.(*pollDesc).waitRead(...)
\t/usr/local/go/src/internal/poll/fd_poll_runtime.go:89
internal/poll.(*FD).Read(0xc000128080, {0xc000144000, 0x1000, 0x1000})
\t/usr/local/go/src/internal/poll/fd_unix.go:165 +0x27a
net.(*netFD).Read(0xc000128080, {0xc000144000?, 0x1000?, 0x0?})
\t/usr/local/go/src/net/fd_posix.go:55 +0x25
net.(*conn).Read(0xc00005e060, {0xc000144000?, 0x0?, 0x0?})
\t/usr/local/go/src/net/net.go:189 +0x45
net/http.(*connReader).Read(0xc0000a4300, {0xc000144000, 0x1000, 0x1000})
\t/usr/local/go/src/net/http/server.go:798 +0x14b
bufio.(*Reader).fill(0xc00009e060)
\t/usr/local/go/src/bufio/bufio.go:110 +0x103
bufio.(*Reader).Peek(0xc00009e060, 0x4)
\t/usr/local/go/src/bufio/bufio.go:148 +0x53
net/http.(*conn).serve(0xc0001a6000, {0x6c4f38, 0xc000098150})
\t/usr/local/go/src/net/http/server.go:2127 +0x785
created by net/http.(*Server).Serve in goroutine 1
\t/usr/local/go/src/net/http/server.go:3360 +0x485

goroutine 40 [sync.WaitGroup.Wait, 7 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/proc.go:424 +0xce
runtime.goparkunlock(...)
\t/usr/local/go/src/runtime/proc.go:430
runtime.semacquire1(0xc0000b0018, 0x0, 0x1, 0x0, 0x19)
\t/usr/local/go/src/runtime/sema.go:178 +0x225
sync.runtime_SemacquireWaitGroup(0x0?)
\t/usr/local/go/src/runtime/sema.go:110 +0x25
sync.(*WaitGroup).Wait(0xc0000b0010)
\t/usr/local/go/src/sync/waitgroup.go:118 +0x48
github.com/e2b-dev/infra/packages/envd/internal/services/process.(*Handler).Wait(0xc0000b0000, ?)
\t/src/envd/internal/services/process/handler.go:88 +0x65
...additional frames elided...
created by github.com/e2b-dev/infra/packages/envd/internal/services/process.New in goroutine 12
\t/src/envd/internal/services/process/service.go:51 +0x2b1

goroutine 50 [sleep]:
time.Sleep(0x3b9aca00)
\t/usr/local/go/src/runtime/time.go:338 +0x167
main.ticker()
\t/src/envd/main.go:300 +0x25
created by main.main in goroutine 1
\t/src/envd/main.go:171 +0x1c5

goroutine 60 [GC worker (idle)]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/proc.go:424 +0xce
runtime.gcBgMarkWorker(0xc000044070)
\t/usr/local/go/src/runtime/mgc.go:1412 +0xe9
runtime.goexit({})
\t/usr/local/go/src/runtime/asm_amd64.s:1700 +0x1
created by runtime.gcBgStartWorkers in goroutine 1
\t/usr/local/go/src/runtime/mgc.go:1328 +0x105

goroutine 12 gp=0xc000103880 m=nil [chan receive (nil chan), 61 minutes, synctest group 3]:
main.waitForever[...](...)
\t/src/envd/generic.go:9
gopkg.in/yaml%2ev3.(*parser).parse(0xc0001a6000)
\t/go/pkg/mod/gopkg.in/yaml.v3@v3.0.1/parserc.go:123 +0x1d
main.main.gowrap1()
\t/src/envd/main.go:60 +0x1d

rax    0xca
rbx    0x0
rip    0x4735a1
rflags 0x286
cs     0x33
fs     0x0
gs     0x0
`;

// Go 1.17: "created by X" without "in goroutine N", no "?" in arguments.
const GO117 = `panic: boom [recovered]
\tpanic: boom

goroutine 1 [chan receive, 2 minutes]:
main.main()
\t/home/u/x/main.go:20 +0x85

goroutine 6 [select]:
main.worker(0xc000054060, 0xc0000540c0)
\t/home/u/x/main.go:30 +0x9a
created by main.main
\t/home/u/x/main.go:15 +0x6a

goroutine 7 [select]:
main.worker(0xc000054120, 0xc000054180)
\t/home/u/x/main.go:30 +0x9a
created by main.main
\t/home/u/x/main.go:15 +0x6a

goroutine 8 [runnable]:
panic(0x4a5e80, 0x4ed860)
\t/usr/local/go/src/runtime/panic.go:1038 +0x215
main.crash(...)
\tC:/Users/dev/x/crash.go:7
main.main.func2()
\tC:/Users/dev/x/crash.go:12 +0x45
created by main.main
\t/home/u/x/main.go:16 +0x8f
exit status 2
`;

describe('parseGoroutines: real Go 1.19 SIGQUIT dump of the fake envd (fixture)', () => {
  const text = readFixture(FAKE_ENVD_DUMP);
  const dump = parseGoroutines(text);

  it('parses every goroutine, ignores the preamble and registers, counts the log lines as skipped', () => {
    expect(dump.goroutines.map((g) => g.id)).toEqual([0, 1, 2, 3, 4, 5, 6, 17, 18]);
    expect(dump.reason).toBe('SIGQUIT: quit');
    expect(dump.truncated).toBeUndefined();
    // The six "envd startup: …" lines fake-envd printed before the dump.
    expect(dump.skippedLines).toBe(6);
    expect(detectDumpKind(text)).toBe('goroutines');
  });

  it('reads the hung goroutine: state, frames with args, file and line (fp/sp/pc ignored)', () => {
    const g1 = byId(dump.goroutines, 1);
    expect(g1.state).toBe('semacquire');
    expect(g1.waitMinutes).toBeUndefined();
    expect(g1.lockedToThread).toBe(false);
    expect(g1.frames.map((f) => f.func)).toEqual([
      'runtime.gopark',
      'runtime.goparkunlock',
      'runtime.semacquire1',
      'sync.runtime_SemacquireMutex',
      'sync.(*Mutex).lockSlow',
      'sync.(*Mutex).Lock',
      'main.(*cgroupManager).acquireRoot',
      'main.createCgroupManager',
      'main.(*startup).runPhase',
      'main.(*startup).run',
      'main.main',
      'runtime.main',
      'runtime.goexit',
    ]);
    expect(g1.frames[6]).toEqual({
      func: 'main.(*cgroupManager).acquireRoot',
      pkg: 'main',
      file: '/work/main/test/fake-envd/phases.go',
      line: 252,
      args: '0xc000104000?',
    });
    expect(g1.frames[7]?.args).toBe('0xc000104000, {{0x6c3198?, 0xc000108090?}, {0x6c68b6?, 0xc0001080a0?}}');
    expect(g1.frames[1]).toMatchObject({ func: 'runtime.goparkunlock', args: '...', line: 369 });
    expect(g1.createdBy).toBeUndefined();
  });

  it('reads created by (old form with its file line) and locked to thread', () => {
    const g18 = byId(dump.goroutines, 18);
    expect(g18.createdBy).toEqual({ func: 'main.main', pkg: 'main', file: '/work/main/test/fake-envd/main.go', line: 176 });
    const g6 = byId(dump.goroutines, 6);
    expect(g6).toMatchObject({ state: 'select', lockedToThread: true });
    expect(byId(dump.goroutines, 17).frames[1]).toMatchObject({ func: 'os/signal.signal_recv', pkg: 'os/signal' });
  });

  it('groups: the top group is blocked in acquireRoot', () => {
    const groups = groupGoroutines(dump);
    expect(groups[0]?.blockedIn?.func).toBe('main.(*cgroupManager).acquireRoot');
    expect(groups[0]?.state).toBe('semacquire');
    expect(groups[0]?.ids).toEqual([1]);
    const text = summarize(groups);
    console.log(`fake envd dump (Go 1.19) grouped:\n${text}`);
    expect(text.split('\n')[0]).toMatch(/^1 {2}semacquire +- {2}blocked in main\.\(\*cgroupManager\)\.acquireRoot \(phases\.go:252\)$/);
  });
});

describe('parseGoroutines: real Go 1.19 fatal error with a runtime stack (fixture)', () => {
  // A stack overflow (debug.SetMaxStack(64 KiB), GOTRACEBACK=all): the runtime prints its own
  // stack, "runtime stack:" and frames that belong to no goroutine, before the goroutines.
  const text = readFixture('go1.19-stack-overflow.txt');
  const dump = parseGoroutines(text);

  it('passes over the runtime stack: its frames go to no goroutine and are not skipped lines', () => {
    expect(dump.goroutines.map((g) => g.id)).toEqual([1, 2, 3, 4, 17]);
    expect(dump.reason).toBe('fatal error: stack overflow');
    const funcs = dump.goroutines.flatMap((g) => g.frames.map((f) => f.func));
    expect(funcs).not.toContain('runtime.newstack');
    expect(funcs).not.toContain('runtime.morestack');
    const g1 = byId(dump.goroutines, 1);
    expect(g1).toMatchObject({ state: 'running', elided: true });
    expect(g1.frames[0]).toMatchObject({ func: 'main.down', file: '/tmp/so/main.go', line: 5 });
    // The "runtime: …" lines above the fatal error are the runtime's preamble, known too.
    expect(dump.skippedLines).toBe(0);
  });
});

describe('parseGoroutines: newer formats (hand-written)', () => {
  const dump = parseGoroutines(NEWER);

  it('reads gp=/m=/mp= headers, wait reasons, minutes, locked to thread, extra header items', () => {
    expect(dump.goroutines.map((g) => g.id)).toEqual([0, 1, 18, 7, 22, 30, 40, 50, 60, 12]);
    expect(byId(dump.goroutines, 0).state).toBe('idle');
    expect(byId(dump.goroutines, 1)).toMatchObject({ state: 'sync.Mutex.Lock', waitMinutes: 3, lockedToThread: false });
    expect(byId(dump.goroutines, 18)).toMatchObject({ state: 'chan receive', waitMinutes: 5 });
    expect(byId(dump.goroutines, 22)).toMatchObject({ state: 'select', waitMinutes: 2, lockedToThread: true });
    expect(byId(dump.goroutines, 30)).toMatchObject({ state: 'IO wait', waitMinutes: 12 });
    expect(byId(dump.goroutines, 40)).toMatchObject({ state: 'sync.WaitGroup.Wait', waitMinutes: 7 });
    expect(byId(dump.goroutines, 50).state).toBe('sleep');
    expect(byId(dump.goroutines, 60).state).toBe('GC worker (idle)');
    expect(byId(dump.goroutines, 12)).toMatchObject({
      state: 'chan receive (nil chan)',
      waitMinutes: 61,
      notes: ['synctest group 3'],
    });
    expect(dump.reason).toBe('SIGQUIT: quit');
    expect(dump.skippedLines).toBe(1); // "envd: starting"
    expect(dump.truncated).toBeUndefined();
  });

  it('reads created by X in goroutine N, running on other thread, elided frames, ? and ... args', () => {
    expect(byId(dump.goroutines, 18).createdBy).toEqual({
      func: 'main.main',
      pkg: 'main',
      file: '/src/envd/main.go',
      line: 176,
      goroutine: 1,
    });
    const g7 = byId(dump.goroutines, 7);
    expect(g7).toMatchObject({ state: 'running', stackUnavailable: true, frames: [] });
    expect(g7.createdBy).toMatchObject({ func: 'net/http.(*Server).Serve', pkg: 'net/http', goroutine: 1, line: 3285 });
    const g40 = byId(dump.goroutines, 40);
    expect(g40.elided).toBe(true);
    expect(g40.frames.at(-1)).toMatchObject({
      func: 'github.com/e2b-dev/infra/packages/envd/internal/services/process.(*Handler).Wait',
      pkg: 'github.com/e2b-dev/infra/packages/envd/internal/services/process',
      args: '0xc0000b0000, ?',
    });
    expect(g40.createdBy?.goroutine).toBe(12);
    expect(byId(dump.goroutines, 22).frames[2]?.args).toBe('0xc0001b2000, ?, ...');
    expect(byId(dump.goroutines, 60).frames[2]).toMatchObject({ func: 'runtime.goexit', args: '{}' });
  });

  it('derives packages like the runtime does (generics, escaped dots, panic)', () => {
    const g12 = byId(dump.goroutines, 12);
    expect(g12.frames.map((f) => [f.func, f.pkg])).toEqual([
      ['main.waitForever[...]', 'main'],
      ['gopkg.in/yaml%2ev3.(*parser).parse', 'gopkg.in/yaml.v3'],
      ['main.main.gowrap1', 'main'],
    ]);
    expect(g12.frames[0]).toMatchObject({ args: '...', file: '/src/envd/generic.go', line: 9 });
    expect(packageOf('panic')).toBe('runtime');
    expect(packageOf('net/http.(*conn).serve')).toBe('net/http');
    expect(packageOf('github.com/a/b.c/d.F.func1')).toBe('github.com/a/b.c/d');
    expect(packageOf('weird')).toBe('');
  });

  it('group summary: application groups first, longest wait first', () => {
    const groups = groupGoroutines(dump);
    const text = summarize(groups);
    console.log(`newer-format sample grouped:\n${text}`);
    expect(groups.map((g) => g.ids[0])).toEqual([12, 40, 18, 1, 22, 50, 30, 0, 7, 60]);
    expect(groups.map((g) => g.blockedIn?.func)).toEqual([
      'main.waitForever[...]',
      'github.com/e2b-dev/infra/packages/envd/internal/services/process.(*Handler).Wait',
      'main.main.func1',
      'main.(*cgroupManager).acquireRoot',
      'github.com/e2b-dev/infra/packages/envd/internal/host.(*cgroupWatcher).loop',
      'main.ticker',
      'net.(*netFD).Read',
      'runtime.futex',
      undefined,
      'runtime.gopark',
    ]);
    expect(text).toContain('running on another thread, created by net/http.(*Server).Serve (server.go:3285)');
    expect(text).toMatch(/select, locked +2m {2}blocked in github\.com/);
  });
});

// Go 1.26 (GODEBUG=tracebacklabels=1) and Go 1.27 (the default) headers, as
// runtime.goroutineheader prints them: state flags in the order (leaked) (scan) (durable),
// then ", N minutes", ", locked to thread", ", synctest bubble N", "]", then " {k: v, …}".
const GO127 = `SIGQUIT: quit
PC=0x47f3e1 m=0 sigcode=0

goroutine 1 gp=0xc000002380 m=nil [sync.Mutex.Lock, 2 minutes]:
sync.runtime_SemacquireMutex(0x5c9f90?, 0x0?, 0x0?)
\t/usr/local/go/src/runtime/sema.go:95 +0x25
main.(*cgroupManager).acquireRoot(0xc0000a6000)
\t/src/envd/phases.go:252 +0x33
main.main()
\t/src/envd/main.go:190 +0x185

goroutine 18 gp=0xc000102000 m=nil [IO wait] {worker: mmds, request: "PUT /latest/api/token"}:
internal/poll.runtime_pollWait(0x7f2b3c3a5e38, 0x77)
\t/usr/local/go/src/runtime/netpoll.go:351 +0x85
main.pollForMMDSOpts({0x740ad0, 0xc0000a4000}, {0xc00001a078, 0x16}, 0x0)
\t/src/envd/mmds.go:29 +0xf2
created by main.startMMDSPoller in goroutine 1
\t/src/envd/phases.go:201 +0x210

goroutine 19 gp=0xc000102380 m=nil [chan receive (leaked), 12 minutes]:
main.leaky(0xc0000b2000)
\t/src/envd/leak.go:14 +0x2c
created by main.main in goroutine 1
\t/src/envd/main.go:170 +0x99

goroutine 20 gp=0xc000102700 m=nil [chan receive (leaked) (scan)] {"a b": "x\\ty", "": "\\u00e9\\U0001f600\\x01", "q\\"uote": "[]{}:,"}:
main.leaky(0xc0000b2100)
\t/src/envd/leak.go:14 +0x2c
created by main.main in goroutine 1
\t/src/envd/main.go:170 +0x99

goroutine 21 gp=0xc000102a80 m=nil [select (durable), synctest bubble 2]:
main.inBubble()
\t/src/envd/bubble_test.go:9 +0x1a

goroutine 22 gp=0xc000102e00 m=3 mp=0xc000080008 [running] {k: }:
\tgoroutine running on other thread; stack unavailable
created by main.main in goroutine 1
\t/src/envd/main.go:171 +0x9f

goroutine 23 gp=0xc000103180 m=nil [select] {k: "never closed}:
main.ticker()
\t/src/envd/tick.go:5 +0x10

goroutine 24 gp=0xc000103500 m=nil [select] a future item:
main.ticker()
\t/src/envd/tick.go:5 +0x10
`;

describe('parseGoroutines: Go 1.26 and 1.27 headers (hand-written)', () => {
  const dump = parseGoroutines(GO127);

  it('reads every goroutine: labels, state flags, and the headers it does not understand', () => {
    expect(dump.goroutines.map((g) => g.id)).toEqual([1, 18, 19, 20, 21, 22, 23, 24]);
    expect(dump.headers).toBe(8);
    expect(byId(dump.goroutines, 1)).toMatchObject({ state: 'sync.Mutex.Lock', waitMinutes: 2 });
    expect(byId(dump.goroutines, 1).labels).toBeUndefined();
    expect({ ...byId(dump.goroutines, 18).labels }).toEqual({ worker: 'mmds', request: 'PUT /latest/api/token' });
    expect(byId(dump.goroutines, 18).state).toBe('IO wait');
    expect(byId(dump.goroutines, 19)).toMatchObject({ state: 'chan receive', leaked: true, waitMinutes: 12 });
    const g20 = byId(dump.goroutines, 20);
    expect(g20).toMatchObject({ state: 'chan receive', leaked: true });
    expect({ ...g20.labels }).toEqual({ 'a b': 'x\ty', '': 'é😀\u0001', 'q"uote': '[]{}:,' });
    expect(byId(dump.goroutines, 21)).toMatchObject({ state: 'select', durable: true, notes: ['synctest bubble 2'] });
    expect(byId(dump.goroutines, 22)).toMatchObject({ state: 'running', stackUnavailable: true });
    expect({ ...byId(dump.goroutines, 22).labels }).toEqual({ k: '' });
    // Not understood: kept, marked, frames read.
    for (const [id, line] of [
      [23, 41],
      [24, 45],
    ] as const) {
      const g = byId(dump.goroutines, id);
      expect(g).toMatchObject({ unparsed: true, state: '?', headerLine: line });
      expect(GO127.split('\n')[line - 1]).toBe(g.header);
      expect(g.frames.map((f) => f.func)).toEqual(['main.ticker']);
    }
    expect(dump.truncated).toBeUndefined();
    expect(dump.skippedLines).toBe(0);
  });

  it('a "__proto__" label is a label like any other', () => {
    const h = parseGoroutineHeader('goroutine 5 [select] {__proto__: x, constructor: y}:');
    expect(Object.keys(h!.labels!)).toEqual(['__proto__', 'constructor']);
    expect(Object.getOwnPropertyDescriptor(h!.labels!, '__proto__')?.value).toBe('x');
    expect(JSON.parse(JSON.stringify(analyzeDump(`goroutine 5 [select] {__proto__: x}:\nmain.f()\n\t/a.go:1\n`)))).toMatchObject({
      goroutineGroups: [{ labelSets: [{ labels: { ['__proto__']: 'x' }, count: 1 }] }],
    });
  });

  it('prints labels back as Go does, escaped for a terminal', () => {
    expect(formatLabels(byId(dump.goroutines, 18).labels!)).toBe('{worker: mmds, request: "PUT /latest/api/token"}');
    expect(formatLabels(byId(dump.goroutines, 20).labels!)).toBe('{"a b": "x\\ty", : "\\u00e9\\U0001f600\\x01", "q\\"uote": "[]{}:,"}');
    expect(goQuote('\u001b[31m\u009b\u2028')).toBe('"\\x1b[31m\\u009b\\u2028"');
  });

  it('groups: flags split stack groups, labels do not; the analysis says what it did not understand', () => {
    const groups = groupGoroutines(dump);
    const leaked = groups.filter((g) => g.leaked);
    expect(leaked.map((g) => [g.count, g.state, g.ids])).toEqual([[2, 'chan receive', [19, 20]]]);
    expect(leaked[0]!.labelled).toBe(1);
    expect(leaked[0]!.labelSets).toHaveLength(1);
    expect(groups.find((g) => g.durable)?.ids).toEqual([21]);
    expect(groups.filter((g) => g.unparsed).map((g) => [g.state, g.count])).toEqual([['?', 2]]);

    const a = analyzeDump(GO127);
    expect(a).toMatchObject({ kind: 'goroutines', goroutines: 8, headers: 8, unparsed: 2 });
    if (a.kind !== 'goroutines') throw new Error('not goroutines');
    expect(a.unparsedHeaders?.map((h) => [h.line, h.id])).toEqual([
      [41, 23],
      [45, 24],
    ]);
    const text = summarizeAnalysis(a);
    console.log(`Go 1.27 sample:\n${text}`);
    expect(text.split('\n')[1]).toBe('warning: 2 goroutine headers not understood (kept as state "?"; lines 41, 45)');
    expect(text).toContain('chan receive (leaked)');
    expect(text).toContain('labels {worker: mmds, request: "PUT /latest/api/token"}');
    expect(text).toMatch(
      /\n\nby creator \(4 creators\):\n4 {2}no creator .*\n2 {2}created by main\.main \(main\.go:170\) +1 stack +2 chan receive \(leaked\) {2}blocked in main\.leaky \(leak\.go:14\)\n/,
    );
  });
});

/**
 * A Go 1.27 SIGQUIT dump of `n` goroutines, all but goroutine 1 and two others labelled (as
 * with tracebacklabels on): pollers, handlers with per-request labels, leaked waiters.
 * `broken` goroutines get a labels block this parser cannot read.
 */
function labelledDump(n: number, broken: ReadonlySet<number> = new Set()): string {
  const out: string[] = ['SIGQUIT: quit', 'PC=0x47f3e1 m=0 sigcode=0', ''];
  for (let id = 1; id <= n; id++) {
    const gp = `gp=0xc000${(0x100000 + id * 0x380).toString(16)} m=nil`;
    let labels =
      id === 1 || id === 77 || id === 150
        ? ''
        : id % 3 === 0
          ? ` {worker: mmds, n: ${id % 5}}`
          : ` {route: "POST /init", request: "req-${id}"}`;
    if (broken.has(id)) labels = ` {route: "POST /init}`;
    if (id === 1) {
      out.push(
        `goroutine 1 ${gp} [sync.Mutex.Lock, 3 minutes]:`,
        'main.(*cgroupManager).acquireRoot(0xc0000a6000)',
        '\t/src/envd/phases.go:252 +0x33',
      );
      out.push('main.main()', '\t/src/envd/main.go:190 +0x185', '');
      continue;
    }
    if (id % 3 === 0) {
      const state = id % 2 ? 'IO wait' : 'select';
      out.push(`goroutine ${id} ${gp} [${state}]${labels}:`);
      if (id % 2) out.push('internal/poll.runtime_pollWait(0x7f2b3c3a5e38, 0x77)', '\t/usr/local/go/src/runtime/netpoll.go:351 +0x85');
      else
        out.push('runtime.selectgo(0xc0006cff70, 0xc0006cff40, 0x0?, 0x0, 0x0?, 0x1)', '\t/usr/local/go/src/runtime/select.go:335 +0x7a5');
      out.push(`main.pollForMMDSOpts({0x740ad0, 0xc0000a4000}, 0x${id.toString(16)})`, `\t/src/envd/mmds.go:${id % 2 ? 48 : 29} +0xf2`);
      out.push('created by main.startMMDSPoller in goroutine 1', '\t/src/envd/phases.go:201 +0x210', '');
    } else {
      out.push(`goroutine ${id} ${gp} [chan receive${id % 7 === 0 ? ' (leaked)' : ''}, ${id % 4} minutes]${labels}:`);
      out.push('main.(*handler).init(0xc0001a6000)', '\t/src/envd/init.go:61 +0x1d2');
      out.push('created by net/http.(*Server).Serve in goroutine 12', '\t/usr/local/go/src/net/http/server.go:3360 +0x485', '');
    }
  }
  return out.join('\n');
}

describe('parseGoroutines: 250 goroutines with labels (Go 1.27)', () => {
  it('reads all 250, with their labels; none unparsed; the count matches', () => {
    const text = labelledDump(250);
    expect(detectDumpKind(text)).toBe('goroutines');
    const dump = parseGoroutines(text);
    expect(dump.goroutines).toHaveLength(250);
    expect(dump.headers).toBe(250);
    expect(dump.goroutines.filter((g) => g.unparsed)).toEqual([]);
    expect(dump.goroutines.filter((g) => g.labels).length).toBe(247);
    expect({ ...byId(dump.goroutines, 4).labels }).toEqual({ route: 'POST /init', request: 'req-4' });
    expect(byId(dump.goroutines, 14)).toMatchObject({ state: 'chan receive', leaked: true, waitMinutes: 2 });
    const a = analyzeDump(text);
    if (a.kind !== 'goroutines') throw new Error('not goroutines');
    expect(a).toMatchObject({ goroutines: 250, headers: 250 });
    expect(a.unparsed).toBeUndefined();
    // Handlers: one stack group per state/flag however many request ids; their label sets listed.
    const handlers = a.goroutineGroups.filter((g) => g.blockedIn?.func === 'main.(*handler).init');
    expect(handlers.map((g) => [g.leaked ?? false, g.count])).toEqual([
      [false, 142],
      [true, 24],
    ]);
    expect(handlers[0]!.labelled).toBe(142);
    expect(handlers[0]!.labelSets).toHaveLength(5);
    expect(handlers[0]!.labelSetsTotal).toBe(142);
    expect(handlers[1]!.labelled).toBe(23); // goroutine 77 has none
    const pollers = a.goroutineGroups.filter((g) => g.createdBy?.func === 'main.startMMDSPoller');
    expect(pollers.map((g) => g.count).sort()).toEqual([41, 42]);
    expect(pollers.find((g) => g.state === 'IO wait')!.labelSets!.map((s) => s.count)).toEqual([9, 9, 8, 8, 8]);
    const summary = summarizeAnalysis(a);
    console.log(`250 labelled goroutines:\n${summary}`);
    expect(summary.split('\n')[0]).toBe(`250 goroutines in ${a.goroutineGroups.length} groups`);
    expect(summary).not.toContain('warning');
  });

  it('keeps and marks the ones whose labels it cannot read, and says so', () => {
    const broken = new Set([5, 6, 100, 101, 200]);
    const text = labelledDump(250, broken);
    const a = analyzeDump(text);
    if (a.kind !== 'goroutines') throw new Error('not goroutines');
    expect(a).toMatchObject({ goroutines: 250, headers: 250, unparsed: 5 });
    const lines = text.split('\n');
    for (const h of a.unparsedHeaders!) {
      expect(broken.has(h.id)).toBe(true);
      expect(lines[h.line - 1]).toBe(h.text);
    }
    const unparsed = a.goroutineGroups.filter((g) => g.unparsed);
    expect(unparsed.reduce((n, g) => n + g.count, 0)).toBe(5);
    // Their frames were read: the creator view still counts them with their storm.
    const byCreator = a.creatorGroups!.find((c) => c.createdBy?.func === 'main.startMMDSPoller')!;
    expect(byCreator).toMatchObject({ count: 83, unparsed: 1 });
    expect(summarizeAnalysis(a).split('\n')[1]).toMatch(
      /^warning: 5 goroutine headers not understood \(kept as state "\?"; lines \d+, \d+, \d+, \d+, \d+\)$/,
    );
  });
});

describe('parseGoroutines: Go 1.17 format (hand-written)', () => {
  const dump = parseGoroutines(GO117);

  it('reads created by X followed by its file line, panic frames and Windows paths', () => {
    expect(dump.goroutines.map((g) => g.id)).toEqual([1, 6, 7, 8]);
    expect(dump.reason).toBe('panic: boom [recovered]');
    expect(dump.skippedLines).toBe(0);
    expect(byId(dump.goroutines, 6).createdBy).toEqual({ func: 'main.main', pkg: 'main', file: '/home/u/x/main.go', line: 15 });
    const g8 = byId(dump.goroutines, 8);
    expect(g8.frames[0]).toEqual({
      func: 'panic',
      pkg: 'runtime',
      file: '/usr/local/go/src/runtime/panic.go',
      line: 1038,
      args: '0x4a5e80, 0x4ed860',
    });
    expect(g8.frames[1]).toMatchObject({ func: 'main.crash', file: 'C:/Users/dev/x/crash.go', line: 7 });
    expect(g8.frames[2]).toMatchObject({ file: 'C:/Users/dev/x/crash.go', line: 12 });
  });

  it('groups the two workers (args differ, stack identical) and drops the differing args', () => {
    const groups = groupGoroutines(dump);
    const workers = groups.find((g) => g.blockedIn?.func === 'main.worker');
    expect(workers).toMatchObject({ count: 2, ids: [6, 7], state: 'select' });
    expect(workers?.frames[0]?.args).toBeUndefined();
    expect(groups).toHaveLength(3);
    // All application; longest wait first.
    expect(groups[0]?.ids).toEqual([1]);
    // panic frame (runtime) skipped for blockedIn.
    expect(groups.find((g) => g.ids[0] === 8)?.blockedIn?.func).toBe('main.crash');
  });
});

describe('parseGoroutines: journal prefixes and CRLF', () => {
  it('strips journalctl short / short-iso prefixes', () => {
    const journal = [
      'Jan 02 15:04:05 sbx envd[123]: SIGQUIT: quit',
      'Jan 02 15:04:05 sbx envd[123]: goroutine 1 [semacquire, 4 minutes]:',
      'Jan 02 15:04:05 sbx envd[123]: main.(*cgroupManager).acquireRoot(0xc000104000?)',
      'Jan 02 15:04:05 sbx envd[123]: \t/src/phases.go:252 +0x33',
      'Jan 02 15:04:05 sbx envd[123]: ',
      '2024-01-02T15:04:05+0000 sbx envd[123]: goroutine 9 [select]:',
      '2024-01-02T15:04:05+0000 sbx envd[123]: main.poll()',
      '2024-01-02T15:04:05+0000 sbx envd[123]: \t/src/mmds.go:29 +0xf2',
    ].join('\n');
    expect(detectDumpKind(journal)).toBe('goroutines');
    const dump = parseGoroutines(journal);
    expect(dump.goroutines).toHaveLength(2);
    expect(dump.goroutines[0]).toMatchObject({ id: 1, state: 'semacquire', waitMinutes: 4 });
    expect(dump.goroutines[0]?.frames[0]).toMatchObject({ file: '/src/phases.go', line: 252 });
    expect(dump.goroutines[1]?.frames[0]).toMatchObject({ func: 'main.poll', line: 29 });
  });

  it('accepts CRLF line ends', () => {
    const dump = parseGoroutines(GO117.replace(/\n/g, '\r\n'));
    expect(dump.goroutines).toHaveLength(4);
    expect(dump.goroutines[1]?.createdBy?.line).toBe(15);
  });
});

// Deterministic PRNG for the garbage tests.
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('parseGoroutines: garbage and truncation', () => {
  it('never throws on random text, random bytes, or shuffled dump lines', () => {
    const rand = rng(42);
    const pieces = [
      ...NEWER.split('\n'),
      ...GO117.split('\n'),
      'goroutine',
      'goroutine x [',
      '\t:',
      '(',
      ')',
      ')(',
      '[[[',
      '\t',
      'created by',
      '...',
    ];
    for (let round = 0; round < 300; round++) {
      let text = '';
      const n = Math.floor(rand() * 80);
      for (let i = 0; i < n; i++) {
        const r = rand();
        if (r < 0.5) text += pieces[Math.floor(rand() * pieces.length)] ?? '';
        else if (r < 0.8)
          text += String.fromCharCode(...Array.from({ length: Math.floor(rand() * 40) }, () => Math.floor(rand() * 0x2fff)));
        else text += (pieces[Math.floor(rand() * pieces.length)] ?? '').slice(0, Math.floor(rand() * 30));
        text += rand() < 0.8 ? '\n' : '';
      }
      const dump = parseGoroutines(text);
      expect(Array.isArray(dump.goroutines)).toBe(true);
      expect(Number.isInteger(dump.skippedLines)).toBe(true);
      for (const g of dump.goroutines) {
        expect(Number.isInteger(g.id)).toBe(true);
        for (const f of g.frames) expect(typeof f.func).toBe('string');
      }
      expect(() => summarize(groupGoroutines(dump))).not.toThrow();
    }
  });

  it('plain prose and empty input give no goroutines', () => {
    const prose = 'The quick brown fox (jumps) over\n\tthe lazy dog:12\ngoroutines are great [really]:\n';
    expect(parseGoroutines(prose)).toEqual({ goroutines: [], skippedLines: 3, headers: 0 });
    expect(parseGoroutines('')).toEqual({ goroutines: [], skippedLines: 0, headers: 0 });
    expect(parseGoroutines(undefined as unknown as string)).toEqual({ goroutines: [], skippedLines: 0, headers: 0 });
    expect(detectDumpKind(prose)).toBe('unknown');
  });

  it('a dump cut at any point parses as far as it goes', () => {
    const text = readFixture(FAKE_ENVD_DUMP);
    const full = parseGoroutines(text);
    for (let cut = 0; cut < text.length; cut += 37) {
      const dump = parseGoroutines(text.slice(0, cut));
      expect(dump.goroutines.length).toBeLessThanOrEqual(full.goroutines.length);
      // Every goroutine before the last one is complete and equal to the full parse.
      for (const g of dump.goroutines.slice(0, -1)) expect(g).toEqual(full.goroutines.find((x) => x.id === g.id));
    }
  });

  it('marks a dump cut mid-frame as truncated and keeps the frame without its file line', () => {
    const text = readFixture(FAKE_ENVD_DUMP);
    const at = text.indexOf('main.(*cgroupManager).acquireRoot(');
    const cut = text.slice(0, text.indexOf('\n', at) + 1) + '\t/work/main/test/fake-en';
    const dump = parseGoroutines(cut);
    expect(dump.truncated).toBe(true);
    const g1 = byId(dump.goroutines, 1);
    expect(g1.frames.at(-1)).toMatchObject({ func: 'main.(*cgroupManager).acquireRoot', file: '', line: 0 });
    expect(groupGoroutines(dump)[0]?.blockedIn?.func).toBe('main.(*cgroupManager).acquireRoot');
    // Cut right after a header.
    const cut2 = text.slice(0, text.indexOf('goroutine 18 [chan receive]:') + 'goroutine 18 [chan receive]:'.length);
    const d2 = parseGoroutines(cut2);
    expect(d2.truncated).toBe(true);
    expect(d2.goroutines.at(-1)).toMatchObject({ id: 18, frames: [] });
    // Cut in the middle of a function line: the frames before it are kept.
    const d3 = parseGoroutines(text.slice(0, at + 'main.(*cgroupManager).acquireRoot(0xc0'.length));
    expect(d3.truncated).toBe(true);
    expect(byId(d3.goroutines, 1).frames.at(-1)?.func).toBe('sync.(*Mutex).Lock');
    // A complete dump is not truncated, with or without the register trailer.
    expect(parseGoroutines(text.slice(0, text.indexOf('\nrax'))).truncated).toBeUndefined();
  });
});

/** A synthetic dump of `n` goroutines spread over a few stacks, like a leaking server. */
function syntheticDump(n: number): string {
  const out: string[] = ['SIGQUIT: quit', 'PC=0x466601 m=0 sigcode=0', ''];
  for (let id = 1; id <= n; id++) {
    const kind = id === 1 ? 0 : (id % 4) + 1;
    const wait = id % 7 === 0 ? `, ${id % 30} minutes` : '';
    switch (kind) {
      case 0:
        out.push(`goroutine ${id} [sync.Mutex.Lock, 45 minutes]:`);
        out.push('sync.(*Mutex).Lock(...)', '\t/usr/local/go/src/sync/mutex.go:46');
        out.push('main.(*cgroupManager).acquireRoot(0xc000104000?)', '\t/src/envd/phases.go:252 +0x33');
        out.push('main.main()', '\t/src/envd/main.go:190 +0x185');
        break;
      case 1:
      case 2:
        out.push(`goroutine ${id} gp=0xc0000${id.toString(16)} m=nil [select${wait}]:`);
        out.push(
          `runtime.gopark(0xc0006cff70?, 0x2?, 0x5b?, 0xfc?, 0x${id.toString(16)}?)`,
          '\t/usr/local/go/src/runtime/proc.go:424 +0xce',
        );
        out.push(
          'runtime.selectgo(0xc0006cff70, 0xc0006cff40, 0xc00001a078?, 0x0, 0x0?, 0x1)',
          '\t/usr/local/go/src/runtime/select.go:335 +0x7a5',
        );
        out.push(
          `main.pollForMMDSOpts({0x740ad0, 0xc0000a4000}, {0xc00001a078, 0x16}, 0x${id.toString(16)})`,
          '\t/src/envd/mmds.go:29 +0xf2',
        );
        out.push('main.startMMDSPoller.gowrap1()', '\t/src/envd/phases.go:201 +0x34');
        out.push('runtime.goexit({})', '\t/usr/local/go/src/runtime/asm_amd64.s:1700 +0x1');
        out.push('created by main.startMMDSPoller in goroutine 1', '\t/src/envd/phases.go:201 +0x210');
        break;
      case 3:
        out.push(`goroutine ${id} [IO wait${wait}]:`);
        out.push('runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)', '\t/usr/local/go/src/runtime/proc.go:424 +0xce');
        out.push('internal/poll.runtime_pollWait(0x7f2b3c3a5e38, 0x72)', '\t/usr/local/go/src/runtime/netpoll.go:351 +0x85');
        out.push(
          'internal/poll.(*FD).Read(0xc000128080, {0xc000144000, 0x1000, 0x1000})',
          '\t/usr/local/go/src/internal/poll/fd_unix.go:165 +0x27a',
        );
        out.push('net.(*netFD).Read(0xc000128080, {0xc000144000?, 0x1000?, 0x0?})', '\t/usr/local/go/src/net/fd_posix.go:55 +0x25');
        out.push('net/http.(*conn).serve(0xc0001a6000, {0x6c4f38, 0xc000098150})', '\t/usr/local/go/src/net/http/server.go:2127 +0x785');
        out.push('created by net/http.(*Server).Serve in goroutine 1', '\t/usr/local/go/src/net/http/server.go:3360 +0x485');
        break;
      default:
        out.push(`goroutine ${id} [chan receive${wait}]:`);
        out.push('runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)', '\t/usr/local/go/src/runtime/proc.go:424 +0xce');
        out.push('runtime.chanrecv1(0x0?, 0x0?)', '\t/usr/local/go/src/runtime/chan.go:489 +0x12');
        out.push(
          'github.com/e2b-dev/infra/packages/envd/internal/port.(*Forwarder).run(0xc0000b0000)',
          '\t/src/envd/internal/port/forward.go:77 +0x65',
        );
        out.push(
          'created by github.com/e2b-dev/infra/packages/envd/internal/port.New in goroutine 1',
          '\t/src/envd/internal/port/forward.go:30 +0x2b1',
        );
    }
    out.push('');
  }
  return out.join('\n');
}

describe('parseGoroutines: 10,000 goroutines', () => {
  it('parses and groups a 10,000-goroutine dump quickly (time printed, not asserted)', () => {
    const text = syntheticDump(10_000);
    const t0 = performance.now();
    const dump = parseGoroutines(text);
    const t1 = performance.now();
    const groups = groupGoroutines(dump);
    const t2 = performance.now();
    console.log(
      `10,000 goroutines (${(text.length / 1e6).toFixed(1)} MB): parse ${(t1 - t0).toFixed(1)} ms, group ${(t2 - t1).toFixed(1)} ms, total ${(t2 - t0).toFixed(1)} ms`,
    );
    expect(dump.goroutines).toHaveLength(10_000);
    expect(dump.skippedLines).toBe(0);
    // Stacks: mutex (1, longest wait), pollers (one stack, waits vary), chan receive, and
    // IO wait last (no application frame).
    expect(groups.map((g) => [g.state, g.count])).toEqual([
      ['sync.Mutex.Lock', 1],
      ['select', 4999],
      ['chan receive', 2500],
      ['IO wait', 2500],
    ]);
    expect(groups[0]?.blockedIn?.func).toBe('main.(*cgroupManager).acquireRoot');
    expect(groups[0]?.waitMinutes).toBe(45);
    const pollers = groups[1];
    expect(pollers?.ids).toHaveLength(20);
    expect(pollers?.ids.slice(0, 4)).toEqual([4, 5, 8, 9]);
    expect(pollers?.waitMinutes).toBe(29);
    expect(pollers?.frames[0]?.args).toBeUndefined(); // differs per goroutine
    expect(pollers?.frames[1]?.args).toBe('0xc0006cff70, 0xc0006cff40, 0xc00001a078?, 0x0, 0x0?, 0x1');
    expect(pollers?.createdBy).toMatchObject({ func: 'main.startMMDSPoller', goroutine: 1 });
  });
});
