// Wrap mode: `vsockdiag-probe [flags] -- CMD ARGS…` starts the target itself, with
// NOTIFY_SOCKET pointing at the probe, its stdio passed through untouched, and the
// supervisor's signals forwarded. The probe never kills the target on its own account.

import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';

export const FORWARDED_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

export interface WrapOptions {
  command: string[];
  notifySocket: string | null;
  onExit: (code: number | null, signal: NodeJS.Signals | null) => void;
  onError: (err: Error) => void;
}

export function spawnTarget(opts: WrapOptions): ChildProcess {
  const [file, ...args] = opts.command;
  const env = { ...process.env };
  if (opts.notifySocket) env.NOTIFY_SOCKET = opts.notifySocket;
  const child = spawn(file!, args, { stdio: 'inherit', env });
  const forward = (signal: NodeJS.Signals) => () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  const handlers = FORWARDED_SIGNALS.map((s) => [s, forward(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  let done = false;
  const finish = (code: number | null, signal: NodeJS.Signals | null) => {
    if (done) return;
    done = true;
    for (const [s, h] of handlers) process.removeListener(s, h);
    opts.onExit(code, signal);
  };
  child.once('exit', finish);
  child.once('error', (err) => {
    // spawn failed (e.g. ENOENT): there is no process; report it like a failed exec.
    opts.onError(err);
    finish(127, null);
  });
  return child;
}

/** The exit status a wrapper should pass on to its own supervisor. */
export function exitStatusOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const signo = signal ? os.constants.signals[signal] : undefined;
  return 128 + (signo ?? 0);
}
