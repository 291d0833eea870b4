import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../test/support/wait.js';
import { childReaper } from '../../test/support/children.js';
import { NATIVE_NOT_AVAILABLE, nativeDump, takeDump, waitForExit, which } from '../src/dumps/index.js';
import { dumpContext } from './support/dump-context.js';

let root: string;
const children = childReaper();

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'dumps-native-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function sleeper(): ChildProcess {
  const c = spawn('sleep', ['60'], { stdio: 'ignore' });
  children.track(c);
  return c;
}

/** Until the child has exec'd sleep and sleeps in it. */
async function sleeping(c: ChildProcess): Promise<void> {
  await waitFor('the child to sleep in sleep', () => readFileSync(`/proc/${c.pid}/comm`, 'utf8') === 'sleep\n' && stateOf(c.pid!) === 'S', {
    timeoutMs: 5000,
    intervalMs: 20,
  });
}

/** A folder holding executable scripts `name` → body, to stand in for gdb / eu-stack. */
function fakeTools(tools: Record<string, string>): string {
  const dir = mkdtempSync(join(root, 'bin-'));
  for (const [name, body] of Object.entries(tools)) {
    writeFileSync(join(dir, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(dir, name), 0o755);
  }
  return dir;
}

function stateOf(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

const realTool = which('gdb') ? 'gdb' : which('eu-stack') ? 'eu-stack' : null;

describe('nativeDump', () => {
  it.runIf(realTool !== null)(`takes native stacks with the installed ${realTool ?? 'tool'}; the target runs on`, async () => {
    const c = sleeper();
    await sleeping(c);
    const d = await nativeDump(c.pid!, 30_000);
    expect(d.available).toBe(true);
    expect(d.tool).toBe(realTool);
    expect(d.error).toBeUndefined();
    expect(d.complete).toBe(true);
    expect(d.note).toMatch(/stopped the target's threads while attached/);
    expect(d.text.startsWith(`# ${realTool} stopped the target's threads`)).toBe(true);
    if (realTool === 'gdb') expect(d.text).toMatch(/^Thread 1 .*\n#0 /m);
    else expect(d.text).toMatch(/^TID \d+:\n#0 /m);
    expect(d.text).toMatch(/nanosleep/);
    expect(['S', 'R']).toContain(stateOf(c.pid!)); // not left stopped (T/t)
  });

  it.runIf(realTool === null)('says "not available" when neither gdb nor eu-stack is installed here', async () => {
    const d = await nativeDump(process.pid, 1000);
    expect(d).toMatchObject({ available: false, tool: 'none', text: NATIVE_NOT_AVAILABLE, complete: false });
  });

  it('says "not available" when neither tool is on PATH', async () => {
    const d = await nativeDump(process.pid, 1000, { searchPath: fakeTools({}) });
    expect(d).toEqual({ available: false, tool: 'none', text: NATIVE_NOT_AVAILABLE, complete: false, error: NATIVE_NOT_AVAILABLE });
    expect(NATIVE_NOT_AVAILABLE).toBe('native stacks not available: neither gdb nor eu-stack is installed in the guest');
  });

  it('prefers gdb and runs it with the documented arguments; falls back to eu-stack', async () => {
    const both = fakeTools({ gdb: 'echo "gdb $*"', 'eu-stack': 'echo "eu-stack $*"' });
    const g = await nativeDump(4242, 5000, { searchPath: both });
    expect(g).toMatchObject({ available: true, tool: 'gdb', complete: true });
    expect(g.text).toContain('gdb -p 4242 -batch -nx -ex thread apply all bt\n');
    const only = fakeTools({ 'eu-stack': 'echo "eu-stack $*"; echo "warning: x" >&2' });
    const e = await nativeDump(4242, 5000, { searchPath: only });
    expect(e).toMatchObject({ available: true, tool: 'eu-stack', complete: true });
    expect(e.text).toContain('eu-stack -p 4242\n# eu-stack stderr:\nwarning: x\n');
  });

  it('a helper failing is an incomplete result with its status', async () => {
    const d = await nativeDump(4242, 5000, { searchPath: fakeTools({ gdb: 'echo "ptrace: Operation not permitted." >&2; exit 1' }) });
    expect(d.complete).toBe(false);
    expect(d.error).toBe('gdb exited with status 1');
    expect(d.text).toContain('ptrace: Operation not permitted.');
  });

  it('kills a helper that hangs (even one ignoring SIGTERM) at the timeout', async () => {
    const pidFile = join(root, 'helper.pid');
    const dir = fakeTools({ gdb: `echo $$ > ${pidFile}; echo partial; trap '' TERM; exec sleep 60` });
    const t0 = Date.now();
    const d = await nativeDump(process.pid, 300, { searchPath: dir });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/did not finish within 300 ms/);
    expect(d.text).toContain('partial');
    const helper = Number(readFileSync(pidFile, 'utf8'));
    expect(() => process.kill(helper, 0)).toThrow(/ESRCH/);
  });

  it('bounds the output', async () => {
    const d = await nativeDump(4242, 5000, { searchPath: fakeTools({ gdb: 'yes bt' }), maxBytes: 1000 });
    expect(d.complete).toBe(false);
    expect(d.error).toMatch(/cut at 1000 bytes/);
    expect(d.text.length).toBeLessThan(1200);
  });
});

describe('takeDump threads and native', () => {
  it('threads of a running target', async () => {
    const c = sleeper();
    await sleeping(c);
    const r = await takeDump({ mode: 'threads', destructive: false }, dumpContext({ targetPid: c.pid! }));
    expect(r).toMatchObject({ mode: 'threads', source: 'proc', complete: true, pid: c.pid });
    expect(r.error).toBeUndefined();
    expect(r.text).toMatch(new RegExp(`^threads of pid ${c.pid} \\(sleep\\) arch=`));
    expect(r.text).toMatch(new RegExp(`^task ${c.pid} \\(sleep\\) state=S `, 'm'));
  });

  it('no target, or a target gone: clear errors, never a throw', async () => {
    for (const mode of ['threads', 'native'] as const) {
      const r = await takeDump({ mode, destructive: false }, dumpContext());
      expect(r).toMatchObject({ mode, source: 'none', complete: false, error: expect.stringMatching(/no target process is known/) });
    }
    const c = sleeper();
    const pid = c.pid!;
    c.kill('SIGKILL');
    await new Promise((r) => c.once('exit', r));
    await waitForExit(pid);
    const r = await takeDump({ mode: 'threads', destructive: false }, dumpContext({ targetPid: pid }));
    expect(r).toMatchObject({ source: 'none', complete: false, error: `no process ${pid} (it is not running, or it exited)` });
  });

  it.runIf(realTool !== null)('native with the installed tool', async () => {
    const c = sleeper();
    await sleeping(c);
    const r = await takeDump({ mode: 'native', destructive: false }, dumpContext({ targetPid: c.pid! }));
    expect(r).toMatchObject({ mode: 'native', source: realTool, complete: true, pid: c.pid });
    expect(r.note).toMatch(/stopped the target's threads/);
  });
});
