// Native (C-level) stacks of every thread, by a debugger when the guest has one:
//
//   gdb -p <pid> -batch -nx -ex "thread apply all bt"     (preferred)
//   eu-stack -p <pid>                                      (elfutils)
//
// Both attach with ptrace: the target's threads are STOPPED while the helper reads them
// (well under a second for a few dozen threads, longer with gdb loading symbols) and resume
// when it detaches. The result says so. Output and time are bounded; on timeout the helper
// gets SIGTERM (gdb then detaches), SIGKILL 2 s later if still there, and the target a
// SIGCONT afterwards in case a killed helper left it stopped.

import type { ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import path from 'node:path';
import * as lazy from '../lazy-builtins.js';

export const MAX_NATIVE_BYTES = 16 * 1024 * 1024;
const KILL_GRACE_MS = 2000;
/** After the helper exited, how long its pipes may take to reach their end. */
const PIPE_GRACE_MS = 500;
export const NATIVE_NOT_AVAILABLE = 'native stacks not available: neither gdb nor eu-stack is installed in the guest';

export type NativeTool = 'gdb' | 'eu-stack';

export interface NativeDump {
  available: boolean;
  tool: NativeTool | 'none';
  text: string;
  complete: boolean;
  error?: string;
  /** What the dump did to the target (gdb and eu-stack stop it while attached). */
  note?: string;
}

export interface NativeOptions {
  /** Default MAX_NATIVE_BYTES (stdout and stderr together). */
  maxBytes?: number;
  /** The PATH to look in (default process.env.PATH). */
  searchPath?: string;
}

/** The absolute path of an executable `name` on `searchPath`, or null. */
export function which(name: string, searchPath: string = process.env.PATH ?? '/usr/bin:/bin'): string | null {
  for (const dir of searchPath.split(':')) {
    if (!dir) continue;
    const file = path.join(dir, name);
    try {
      accessSync(file, fsConstants.X_OK);
      if (statSync(file).isFile()) return file;
    } catch {
      // not here
    }
  }
  return null;
}

/** Native stacks of `pid`. Never rejects. */
export function nativeDump(pid: number, timeoutMs: number, opts: NativeOptions = {}): Promise<NativeDump> {
  const gdb = which('gdb', opts.searchPath);
  if (gdb) {
    return runHelper('gdb', gdb, ['-p', String(pid), '-batch', '-nx', '-ex', 'thread apply all bt'], pid, timeoutMs, opts);
  }
  const euStack = which('eu-stack', opts.searchPath);
  if (euStack) return runHelper('eu-stack', euStack, ['-p', String(pid)], pid, timeoutMs, opts);
  return Promise.resolve({ available: false, tool: 'none', text: NATIVE_NOT_AVAILABLE, complete: false, error: NATIVE_NOT_AVAILABLE });
}

function runHelper(
  tool: NativeTool,
  file: string,
  args: string[],
  pid: number,
  timeoutMs: number,
  opts: NativeOptions,
): Promise<NativeDump> {
  const maxBytes = opts.maxBytes ?? MAX_NATIVE_BYTES;
  const note = `${tool} stopped the target's threads while attached (ptrace) and let them run on when it detached`;
  return new Promise((resolve) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let bytes = 0;
    let cut = false;
    let timedOut = false;
    let killedByUs = false;
    let done = false;
    let killTimer: NodeJS.Timeout | null = null;
    let child: ChildProcess;
    try {
      child = lazy.childProcess().spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LC_ALL: 'C' } });
    } catch (e) {
      resolve({ available: true, tool, text: '', complete: false, error: `cannot run ${file}: ${(e as Error).message}` });
      return;
    }
    const helperPid = child.pid;
    const stop = () => {
      if (killedByUs || helperPid === undefined) return;
      killedByUs = true;
      signal(helperPid, 'SIGTERM');
      killTimer = setTimeout(() => signal(helperPid, 'SIGKILL'), KILL_GRACE_MS);
    };
    const collect = (into: Buffer[]) => (chunk: Buffer) => {
      if (cut) return;
      const room = maxBytes - bytes;
      if (chunk.length > room) {
        if (room > 0) into.push(chunk.subarray(0, room));
        bytes = maxBytes;
        cut = true;
        stop();
        return;
      }
      into.push(chunk);
      bytes += chunk.length;
    };
    child.stdout!.on('data', collect(out));
    child.stderr!.on('data', collect(err));
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, timeoutMs);
    const finish = (code: number | null, sig: NodeJS.Signals | null, failure?: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (killTimer) clearTimeout(killTimer);
      // Close our ends: a grandchild still writing there gets EPIPE instead of blocking.
      child.stdout?.destroy();
      child.stderr?.destroy();
      // A helper killed mid-attach may leave the target stopped: let it run on.
      if (killedByUs) signal(pid, 'SIGCONT');
      let text = Buffer.concat(out).toString('utf8');
      const stderr = Buffer.concat(err).toString('utf8');
      if (stderr.trim()) text += `${text && !text.endsWith('\n') ? '\n' : ''}# ${tool} stderr:\n${stderr}`;
      text = `# ${note}\n${text}`;
      const errors: string[] = [];
      if (failure) errors.push(`cannot run ${file}: ${failure.message}`);
      if (timedOut) errors.push(`${tool} did not finish within ${timeoutMs} ms (stopped)`);
      if (cut) errors.push(`output cut at ${maxBytes} bytes`);
      if (!failure && !timedOut && !cut && code !== 0) errors.push(`${tool} exited with ${sig ?? `status ${code}`}`);
      resolve({
        available: true,
        tool,
        text,
        complete: errors.length === 0,
        note,
        ...(errors.length ? { error: errors.join('; ') } : {}),
      });
    };
    child.once('error', (e) => finish(null, null, e));
    child.once('close', (code, sig) => finish(code, sig));
    // A grandchild of the helper may keep its pipes open: do not wait for them long.
    child.once('exit', (code, sig) => {
      setTimeout(() => finish(code, sig), PIPE_GRACE_MS).unref();
    });
  });
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}
