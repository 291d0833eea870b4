// Children a test spawns must not outlive it, even when it fails half-way: a leaked
// sleeper or fake envd would hold ports and pids for the tests after it, and a test that
// waits on a hung child would hang the run.

import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { afterAll, afterEach } from 'vitest';

export interface ChildReaper {
  /** Tracks `child` until it is reaped; returns it, so spawn(...) can be wrapped. */
  track<T extends ChildProcess>(child: T): T;
  /** SIGKILLs every tracked child still running, by pid, and waits for their exits. */
  reap(): Promise<void>;
}

/**
 * A reaper whose children are SIGKILLed after each test (vitest runs afterEach hooks on
 * failure too), or after the file's last test with `{ after: 'all' }` for children that
 * several tests share. Call it at the top of a file or of a describe block.
 */
export function childReaper({ after = 'each' }: { after?: 'each' | 'all' } = {}): ChildReaper {
  const children: ChildProcess[] = [];
  const reaper: ChildReaper = {
    track(child) {
      children.push(child);
      return child;
    },
    async reap() {
      await Promise.all(children.splice(0).map(kill));
    },
  };
  (after === 'each' ? afterEach : afterAll)(() => reaper.reap());
  return reaper;
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    process.kill(child.pid, 'SIGKILL');
  } catch {
    return; // gone already (ESRCH)
  }
  await exited;
}

/**
 * Resolves once the child's `stream` has carried `text`. Fails after `timeoutMs`, or as soon
 * as the child exits without it, with what it did print.
 */
export function waitForOutput(child: ChildProcess, stream: 'stdout' | 'stderr', text: string, timeoutMs = 10_000): Promise<void> {
  const out = child[stream];
  if (!out) return Promise.reject(new Error(`the child's ${stream} is not a pipe`));
  return new Promise((resolve, reject) => {
    let seen = '';
    const done = (err?: Error) => {
      clearTimeout(timer);
      out.removeListener('data', onData);
      child.removeListener('close', onClose);
      if (err) reject(err);
      else resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.toString();
      if (seen.includes(text)) done();
    };
    // 'close', not 'exit': it comes after the child's pipes have given all they had, so what
    // it printed last is in the message (on a busy machine 'exit' can come before that data).
    const onClose = (code: number | null, signal: NodeJS.Signals | null) =>
      done(new Error(`exited (${signal ?? code}) before "${text}" on ${stream}: ${seen}`));
    const timer = setTimeout(() => done(new Error(`no "${text}" on ${stream} within ${timeoutMs} ms; got: ${seen}`)), timeoutMs);
    out.on('data', onData);
    child.once('close', onClose);
  });
}

/**
 * Resolves once every thread of `pid` has been asleep (state S) at three looks 20 ms apart:
 * a program that prints where it is and then blocks has blocked. Seeing the line is not
 * enough: the reader has it before the writer's write(2) returns, and a SIGQUIT then catches
 * the fake envd in its announcement, short of the lock it hangs on (a failed CI run did).
 * A thread between the write and the block is running or waiting for a CPU (R), never asleep.
 */
export async function waitUntilAsleep(pid: number, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  // A thread gone between the listing and its read counts as not yet settled: look again.
  const state = (tid: string) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      return stat.charAt(stat.lastIndexOf(')') + 2);
    } catch {
      return '-';
    }
  };
  let looks = 0;
  let last = '';
  while (looks < 3) {
    if (Date.now() > deadline) throw new Error(`pid ${pid}'s threads not all asleep within ${timeoutMs} ms (${last})`);
    const states = fs.readdirSync(`/proc/${pid}/task`).map(state);
    last = states.join('');
    looks = states.every((s) => s === 'S') ? looks + 1 : 0;
    await new Promise((r) => setTimeout(r, 20));
  }
}
