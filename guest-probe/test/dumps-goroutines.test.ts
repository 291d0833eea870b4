import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { buildFakeEnvd } from '../../test/harness/fake-envd.js';
import { childReaper, waitForOutput, waitUntilAsleep } from '../../test/support/children.js';
import { SigquitCapture, dumpChunks, pprofDump, takeDump } from '../src/dumps/index.js';
import { dumpContext } from './support/dump-context.js';

const CANNED = [
  'goroutine 1 [semacquire, 3 minutes]:',
  'sync.runtime_SemacquireMutex(0xc000012345?, 0x0?, 0x1?)',
  '\t/usr/lib/go/src/runtime/sema.go:71 +0x25',
  'main.(*cgroupManager).acquireRoot(...)',
  '\t/src/fake-envd/phases.go:252 +0x2a',
  '',
  'goroutine 7 [IO wait]:',
  'internal/poll.runtime_pollWait(0x7f, 0x72)',
  '\t/usr/lib/go/src/runtime/netpoll.go:305 +0x89',
  '',
].join('\n');

const REGS_AMD64 = 'rax    0xca\nrbx    0x0\nrip    0x468061\nrflags 0x286\ncs     0x33\nfs     0x0\ngs     0x0\n';
const REGS_ARM64 = 'r0      0x4e3a28\nr29     0xffffd0a8\nlr      0x43c1a0\nsp      0xffffd0a0\npc      0x46a3c4\nfault   0x0\n';

const servers: http.Server[] = [];
const children = childReaper();

afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function serve(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('pprofDump', () => {
  it('fetches a goroutine dump over a fresh connection', async () => {
    const seen: Array<string | undefined> = [];
    const base = await serve((req, res) => {
      seen.push(req.headers.connection);
      expect(req.url).toBe('/debug/pprof/goroutine?debug=2');
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(CANNED);
    });
    const d = await pprofDump(`${base}/debug/pprof/goroutine?debug=2`, 5000);
    expect(d).toEqual({ text: CANNED, complete: true });
    expect(seen).toEqual(['close']);
  });

  it('times out on an endpoint that never finishes, keeping what came', async () => {
    const base = await serve((_req, res) => {
      res.writeHead(200);
      res.write('goroutine 1 [running]:\n');
      // …and never ends
    });
    const t0 = Date.now();
    const d = await pprofDump(`${base}/debug/pprof/goroutine?debug=2`, 300);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/within 300 ms/);
    expect(d.text).toBe('goroutine 1 [running]:\n');
  });

  it('cuts an oversize dump and says it is incomplete', async () => {
    const big = 'x'.repeat(5000);
    const base = await serve((_req, res) => {
      res.writeHead(200);
      res.end(big);
    });
    const d = await pprofDump(base, 5000, { maxBytes: 1000 });
    expect(d.complete).toBe(false);
    expect(d.text).toHaveLength(1000);
    expect(d.error).toMatch(/cut at 1000 bytes/);
  });

  it('reports HTTP errors, refused connections and bad URLs without throwing', async () => {
    const base = await serve((_req, res) => {
      res.writeHead(404);
      res.end('404 page not found');
    });
    expect(await pprofDump(base, 2000)).toMatchObject({ complete: false, error: expect.stringMatching(/HTTP 404/) });
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    expect(await pprofDump(`http://127.0.0.1:${port}/`, 2000)).toMatchObject({
      complete: false,
      error: expect.stringMatching(/ECONNREFUSED/),
    });
    expect(await pprofDump('https://127.0.0.1/', 2000)).toMatchObject({ complete: false, error: expect.stringMatching(/http:\/\//) });
    expect(await pprofDump('not a url', 2000)).toMatchObject({ complete: false, error: expect.stringMatching(/bad pprof URL/) });
  });
});

/** A capture that signals nobody (signal 0 on our own pid) and ends when we say. */
function dryCapture(cap: SigquitCapture, maxBytes = 1 << 20) {
  let exit!: () => void;
  const exited = new Promise<void>((r) => (exit = r));
  const result = cap.capture(process.pid, { timeoutMs: 5000, maxBytes, exited, drainMs: 10, signal: 0 });
  return { result, exit };
}

describe('SigquitCapture (fed by hand)', () => {
  it('does nothing while no capture is armed', () => {
    const cap = new SigquitCapture();
    cap.feed(Buffer.from('SIGQUIT: quit\n'));
    expect(cap.fedBytes).toBe(0);
    expect(cap.busy).toBe(false);
  });

  it('trims what came before the traceback, across chunk boundaries', async () => {
    const cap = new SigquitCapture();
    const { result, exit } = dryCapture(cap);
    const dump = `SIGQUIT: quit\nPC=0x46a8a1 m=0 sigcode=0\n\ngoroutine 0 [idle]:\nruntime.futex()\n\n${REGS_AMD64}`;
    const all = Buffer.from(`envd startup: creating cgroup manager\nsome other line\n${dump}`);
    for (let i = 0; i < all.length; i++) cap.feed(all.subarray(i, i + 1)); // byte by byte
    exit();
    expect(await result).toEqual({ text: dump, complete: true });
  });

  it('recognises a goroutine header and a timestamp-prefixed SIGQUIT line', async () => {
    const cap = new SigquitCapture();
    let r = dryCapture(cap);
    cap.feed(Buffer.from('noise\ngoroutine leaks are bad\ngoroutine 12 [select]:\nmain.main()\n'));
    r.exit();
    expect((await r.result).text).toBe('goroutine 12 [select]:\nmain.main()\n');
    r = dryCapture(cap);
    cap.feed(Buffer.from('2024-01-01_12:00:00.1 hello\n2024-01-01_12:00:00.2 SIGQUIT: quit\nrest\n'));
    r.exit();
    expect((await r.result).text).toBe('2024-01-01_12:00:00.2 SIGQUIT: quit\nrest\n');
  });

  it('keeps everything when no traceback start is found, and says so', async () => {
    const cap = new SigquitCapture();
    const { result, exit } = dryCapture(cap);
    cap.feed(Buffer.from('panic: something else\nline two\n'));
    exit();
    const d = await result;
    expect(d.text).toBe('panic: something else\nline two\n');
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/no Go traceback start/);
  });

  it('cuts at maxBytes and marks the dump incomplete', async () => {
    const cap = new SigquitCapture();
    const { result, exit } = dryCapture(cap, 100);
    cap.feed(Buffer.from('junk before\n'));
    cap.feed(Buffer.from(`goroutine 1 [running]:\n${'f()\n'.repeat(100)}`));
    exit();
    const d = await result;
    expect(d.text).toHaveLength(100);
    expect(d.text.startsWith('goroutine 1 [running]:\n')).toBe(true);
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/cut at 100 bytes/);
  });

  it('bounds what it keeps before a traceback start without losing the traceback', async () => {
    const cap = new SigquitCapture();
    const { result, exit } = dryCapture(cap, 1000);
    for (let i = 0; i < 100; i++) cap.feed(Buffer.from(`log line ${i} ${'y'.repeat(80)}\n`));
    cap.feed(Buffer.from(`SIGQUIT: quit\ngoroutine 1 [running]:\n\n${REGS_AMD64}`));
    exit();
    expect(await result).toEqual({ text: `SIGQUIT: quit\ngoroutine 1 [running]:\n\n${REGS_AMD64}`, complete: true });
  });

  it('is complete only when the traceback reaches the register dump the runtime prints last', async () => {
    const cap = new SigquitCapture();
    const cases: Array<[string, boolean, RegExp?]> = [
      [`SIGQUIT: quit\ngoroutine 1 [running]:\nmain.main()\n\n${REGS_AMD64}`, true],
      [`SIGQUIT: quit\ngoroutine 1 [running]:\nmain.main()\n\n${REGS_ARM64}`, true],
      // log-file prefixes on every line
      [`t1 SIGQUIT: quit\nt2 goroutine 1 [running]:\nt3 main.main()\nt4 rip    0x468061\nt5 rflags 0x286\n`, true],
      // lines lost at the end (journald's rate limit drops the rest)
      ['SIGQUIT: quit\ngoroutine 1 [running]:\nmain.main()\n\ngoroutine 2 [select]:\n', false, /register dump/],
      // GOTRACEBACK=none
      ['SIGQUIT: quit\nPC=0x468061 m=0 sigcode=0\n', false, /no goroutine/],
    ];
    for (const [text, complete, error] of cases) {
      const r = dryCapture(cap);
      cap.feed(Buffer.from(text));
      r.exit();
      const d = await r.result;
      expect(d.text).toBe(text);
      expect(d.complete).toBe(complete);
      if (error) expect(d.error).toMatch(error);
      else expect(d.error).toBeUndefined();
    }
  });

  it('says when nothing arrived from stderr', async () => {
    const cap = new SigquitCapture();
    const { result, exit } = dryCapture(cap);
    exit();
    const d = await result;
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/nothing arrived/);
  });

  it('tee() feeds both the log writer and the capture', async () => {
    const cap = new SigquitCapture();
    const got: string[] = [];
    let ended = 0;
    const w = cap.tee({ feed: (c) => got.push(c.toString()), end: () => ended++ });
    const { result, exit } = dryCapture(cap);
    w.feed(Buffer.from('goroutine 1 [running]:\n'));
    w.end();
    exit();
    expect((await result).text).toBe('goroutine 1 [running]:\n');
    expect(got).toEqual(['goroutine 1 [running]:\n']);
    expect(ended).toBe(1);
  });

  it('resolves with an error when the pid cannot be signalled', async () => {
    const cap = new SigquitCapture();
    const d = await cap.capture(2 ** 22 + 12345, { timeoutMs: 1000, maxBytes: 1000, exited: new Promise(() => undefined) });
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/cannot send SIGQUIT/);
    expect(cap.busy).toBe(false);
  });
});

function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => resolve({ code, signal }));
  });
}

async function hungFakeEnvd(): Promise<ChildProcess> {
  const bin = await buildFakeEnvd();
  const child = spawn(bin, ['-addr', '127.0.0.1', '-port', '0', '-hang-in', 'cgroup-manager', '-no-notify'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, GOTRACEBACK: 'all' },
  });
  children.track(child);
  await waitForOutput(child, 'stderr', 'creating cgroup manager');
  await waitUntilAsleep(child.pid!);
  return child;
}

/** A Node child that ignores SIGQUIT and keeps running. */
async function quitIgnorer(): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    ['-e', "process.on('SIGQUIT', () => console.error('ignored SIGQUIT')); console.log('ready'); setInterval(() => {}, 1000);"],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  children.track(child);
  await waitForOutput(child, 'stdout', 'ready');
  return child;
}

// The first test builds the fake envd with go (many seconds on a busy 2-core machine).
describe('SigquitCapture on real processes', { timeout: 60_000 }, () => {
  it('captures the fake envd goroutine dump from its stderr; it exits with status 2', async () => {
    const child = await hungFakeEnvd();
    const cap = new SigquitCapture();
    child.stderr!.on('data', (c: Buffer) => cap.feed(c));
    const exit = exitOf(child);
    const d = await cap.capture(child.pid!, { timeoutMs: 10_000, maxBytes: 64 << 20, exited: exit.then(() => undefined) });
    expect(d.error).toBeUndefined();
    expect(d.complete).toBe(true);
    expect(d.text.startsWith('SIGQUIT: quit\n')).toBe(true);
    expect(d.text).not.toContain('envd startup:');
    expect(d.text).toMatch(/^goroutine 1 \[/m);
    expect(d.text).toMatch(/main\.\(\*cgroupManager\)\.acquireRoot|main\.createCgroupManager/);
    expect(await exit).toEqual({ code: 2, signal: null });
    expect(cap.busy).toBe(false);
  });

  it('times out on a target that ignores SIGQUIT; a second capture meanwhile is rejected', async () => {
    const child = await quitIgnorer();
    const cap = new SigquitCapture();
    child.stderr!.on('data', (c: Buffer) => cap.feed(c));
    const exited = exitOf(child).then(() => undefined);
    const t0 = Date.now();
    const first = cap.capture(child.pid!, { timeoutMs: 600, maxBytes: 1 << 20, exited });
    await expect(cap.capture(child.pid!, { timeoutMs: 600, maxBytes: 1 << 20, exited })).rejects.toThrow(/already being captured/);
    const d = await first;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(550);
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/did not exit within 600 ms/);
    expect(d.text).toBe('ignored SIGQUIT\n'); // nothing like a traceback: all of it kept
    expect(child.exitCode).toBeNull(); // still running
    expect(cap.busy).toBe(false);
  });
});

// The first test builds the fake envd with go (many seconds on a busy 2-core machine).
describe('takeDump goroutines', { timeout: 60_000 }, () => {
  it('without a pprof URL reads the target from memory; a target that is not Go gets a clear error', async () => {
    const r = await takeDump({ mode: 'goroutines', destructive: false }, dumpContext({ targetPid: process.pid }));
    expect(r).toMatchObject({ mode: 'goroutines', source: 'none', complete: false, pid: process.pid });
    expect(r.error).toMatch(/is not a Go executable/);
  });

  it('non-destructive: reads the hung fake envd from its memory, and it runs on', async () => {
    const child = await hungFakeEnvd();
    const r = await takeDump({ mode: 'goroutines', destructive: false }, dumpContext({ targetPid: child.pid! }));
    expect(r.error).toBeUndefined();
    expect(r).toMatchObject({ mode: 'goroutines', source: 'memory', complete: true, pid: child.pid, pausedMs: 0 });
    expect(r.note).toMatch(/read from memory: go1\.\d+/);
    expect(r.text).toBe('');
    const text = Buffer.concat(dumpChunks(r)).toString();
    expect(text).toMatch(/^goroutine 1 \[semacquire\]:\nruntime\.gopark/m);
    expect(text).toContain('main.(*cgroupManager).acquireRoot');
    // Not stopped, not signalled: still alive and still hung where it was.
    expect(child.exitCode).toBeNull();
    const again = await takeDump({ mode: 'goroutines', destructive: false }, dumpContext({ targetPid: child.pid! }));
    expect(Buffer.concat(dumpChunks(again)).toString()).toContain('main.(*cgroupManager).acquireRoot');
  });

  it('uses pprof when configured (no target needed)', async () => {
    const base = await serve((_req, res) => res.end(CANNED));
    const r = await takeDump(
      { mode: 'goroutines', destructive: false },
      dumpContext({ pprofUrl: `${base}/debug/pprof/goroutine?debug=2` }),
    );
    expect(r).toEqual({ mode: 'goroutines', source: 'pprof', text: CANNED, complete: true });
  });

  it('destructive: SIGQUITs the fake envd and waits for its exit through /proc', async () => {
    const child = await hungFakeEnvd();
    const sigquit = new SigquitCapture();
    child.stderr!.on('data', (c: Buffer) => sigquit.feed(c));
    const exit = exitOf(child);
    const r = await takeDump({ mode: 'goroutines', destructive: true }, dumpContext({ targetPid: child.pid!, sigquit }));
    expect(r.source).toBe('sigquit');
    expect(r.complete).toBe(true);
    expect(r.pid).toBe(child.pid);
    expect(r.note).toMatch(/SIGQUIT ended the target/);
    expect(r.text).toMatch(/main\.\(\*cgroupManager\)\.acquireRoot|main\.createCgroupManager/);
    expect((await exit).code).toBe(2);
  });

  it('destructive with a pprof URL that fails falls back to SIGQUIT', async () => {
    const child = await hungFakeEnvd();
    const sigquit = new SigquitCapture();
    child.stderr!.on('data', (c: Buffer) => sigquit.feed(c));
    const r = await takeDump(
      { mode: 'goroutines', destructive: true },
      dumpContext({ targetPid: child.pid!, sigquit, pprofUrl: 'http://127.0.0.1:1/debug/pprof/goroutine?debug=2' }),
    );
    expect(r.source).toBe('sigquit');
    expect(r.complete).toBe(true);
    expect(r.note).toMatch(/pprof failed first/);
  });

  it("refuses SIGQUIT when the target's stderr reaches the probe nowhere", async () => {
    const child = await quitIgnorer();
    const r = await takeDump({ mode: 'goroutines', destructive: true }, dumpContext({ targetPid: child.pid!, stderrSource: null }));
    expect(r).toMatchObject({ source: 'none', complete: false, error: expect.stringMatching(/^not sending SIGQUIT/) });
    await new Promise((r) => setTimeout(r, 200));
    expect(child.stderr!.read()).toBeNull(); // it was never signalled (it would have said so)
  });

  it('no target: a clear error', async () => {
    const r = await takeDump({ mode: 'goroutines', destructive: true }, dumpContext());
    expect(r).toMatchObject({ source: 'none', complete: false, error: expect.stringMatching(/no target process/) });
  });
});
