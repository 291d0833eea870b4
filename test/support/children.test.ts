import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { childReaper, waitForOutput, waitUntilAsleep } from './children.js';

const sleeper = () => spawn('sleep', ['60'], { stdio: 'ignore' });

describe('childReaper', () => {
  const reaper = childReaper();
  let left: ChildProcess | null = null;
  let failed: ChildProcess | null = null;

  it('leaves a tracked child running during the test', () => {
    left = reaper.track(sleeper());
    expect(left.pid).toBeGreaterThan(0);
    expect(left.exitCode).toBeNull();
  });

  it.fails('reaps after a failing test too', () => {
    failed = reaper.track(sleeper());
    throw new Error('this test fails on purpose');
  });

  it('has SIGKILLed and awaited both by the next test', () => {
    expect(left!.signalCode).toBe('SIGKILL');
    expect(failed!.signalCode).toBe('SIGKILL');
    expect(() => process.kill(left!.pid!, 0)).toThrow(/ESRCH/);
  });

  it('passes over children that exited or never started', async () => {
    const done = reaper.track(spawn('true'));
    await once(done, 'exit');
    const never = reaper.track(spawn('/nonexistent/vd-no-such-binary'));
    await new Promise((resolve) => never.once('error', resolve)); // ENOENT: it has no pid
    await reaper.reap();
    expect(done.exitCode).toBe(0);
    expect(never.pid).toBeUndefined();
  });
});

describe('waitForOutput', () => {
  const reaper = childReaper();

  it('resolves once the stream carries the text', async () => {
    const c = reaper.track(spawn('sh', ['-c', 'echo one; echo ready >&2; sleep 60']));
    await waitForOutput(c, 'stderr', 'ready');
    expect(c.exitCode).toBeNull();
  });

  it('fails when the child exits first, with what it printed', async () => {
    const c = reaper.track(spawn('sh', ['-c', 'echo nope; exit 3']));
    await expect(waitForOutput(c, 'stdout', 'ready')).rejects.toThrow(/^exited \(3\) before "ready" on stdout: nope/);
  });

  it('fails after the timeout, and at once on a stream that is not a pipe', async () => {
    const c = reaper.track(sleeper());
    await expect(waitForOutput(c, 'stdout', 'ready', 50)).rejects.toThrow(/not a pipe/);
    const piped = reaper.track(spawn('sleep', ['60'], { stdio: ['ignore', 'pipe', 'ignore'] }));
    await expect(waitForOutput(piped, 'stdout', 'ready', 50)).rejects.toThrow(/^no "ready" on stdout within 50 ms/);
  });
});

describe('waitUntilAsleep', () => {
  const reaper = childReaper();

  it('resolves for a process whose threads all sleep, and fails for one that keeps a CPU busy', async () => {
    const idle = reaper.track(spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' }));
    await waitUntilAsleep(idle.pid!);
    const busy = reaper.track(spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
    await expect(waitUntilAsleep(busy.pid!, 500)).rejects.toThrow(/threads not all asleep within 500 ms \(.*R/);
  });
});
