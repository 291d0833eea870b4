// Wrap mode: `vsockdiag-probe [flags] -- CMD ARGS…` starts the target itself, with
// NOTIFY_SOCKET pointing at the probe, its stdout and stderr passed through unchanged, and
// the supervisor's signals forwarded. The probe never kills the target on its own account.
//
// Output: the target writes into pipes of ours, and every chunk goes on, byte for byte, to
// the probe's own stdout/stderr (whatever the supervisor gave us: a terminal, svlogd's pipe,
// the journal) and to onOutput (the LogWatcher's writers). Backpressure is kept: while our
// stdout cannot take more, we stop reading the target's pipe, its pipe buffer fills, and
// the target blocks in write() just as it would writing to our stdout itself. (Node writes
// to a pipe without blocking the probe's event loop; to a file it writes synchronously.)
//
// If our own stdout or stderr breaks (the reader went away: EPIPE, or any other write
// error), the error is caught here and never reaches the target: from then on we keep
// reading and discarding that stream (still feeding onOutput), so the target goes on
// writing into a pipe that is drained. Without the probe the target would have got
// SIGPIPE/EPIPE itself; with it, it keeps running. The one way left for the target to be
// hurt is the probe process dying: its pipes then have no reader, and the target's next
// write gets SIGPIPE (fatal to a Go program writing to fd 1 or 2), as with any log pipe
// whose reader dies. That is why nothing here may throw.

import type { ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import * as lazy from './lazy-builtins.js';

export const FORWARDED_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;
/** After the target exits, how long to wait for its pipes to reach their end before the
 *  exit is reported anyway (a grandchild may hold them open). */
export const EXIT_DRAIN_MS = 500;

export type OutputStream = 'stdout' | 'stderr';

export interface WrapOptions {
  command: string[];
  notifySocket: string | null;
  /** Called once the target has exited and its output was read (or EXIT_DRAIN_MS later). */
  onExit: (code: number | null, signal: NodeJS.Signals | null) => void;
  onError: (err: Error) => void;
  /** Every chunk the target writes, after it was passed on. Must not keep `chunk` beyond
   *  the call unless it copies it; must not throw (errors are caught and dropped). */
  onOutput?: (stream: OutputStream, chunk: Buffer) => void;
  /** The target's stream reached its end (report a final partial line). */
  onOutputEnd?: (stream: OutputStream) => void;
  /** Where to pass the output on (default: process.stdout / process.stderr). */
  stdout?: Writable;
  stderr?: Writable;
}

export interface PassThroughState {
  /** Bytes read from the target's pipe. */
  bytes: number;
  /** Bytes that could not be passed on because our side had broken. */
  discarded: number;
  /** Our side's write error, once it broke. */
  broken: Error | null;
  /** Times the target's pipe was paused for backpressure. */
  pauses: number;
}

export interface WrappedTarget {
  child: ChildProcess;
  output: Record<OutputStream, PassThroughState>;
}

/** Passes `from` on to `to` byte for byte with backpressure; survives `to` breaking. */
function passThrough(
  name: OutputStream,
  from: Readable,
  to: Writable,
  state: PassThroughState,
  onOutput: WrapOptions['onOutput'],
  onEnd: () => void,
): void {
  let waiting = false;
  const resume = () => {
    if (!waiting) return;
    waiting = false;
    to.removeListener('drain', resume);
    from.resume();
  };
  const broke = (err: Error) => {
    if (!state.broken) state.broken = err;
    // Nothing more will be written there; read on so the target never blocks on us.
    resume();
  };
  to.on('error', broke);
  // Closed without an error (destroyed): a 'drain' will never come either.
  to.once('close', () => broke(new Error('output closed')));
  from.on('data', (chunk: Buffer) => {
    state.bytes += chunk.length;
    if (state.broken || to.destroyed || !to.writable) {
      state.discarded += chunk.length;
    } else {
      let ok = true;
      try {
        ok = to.write(chunk);
      } catch (err) {
        broke(err as Error);
      }
      if (!ok && !state.broken && !waiting) {
        waiting = true;
        state.pauses++;
        from.pause();
        to.once('drain', resume);
      }
    }
    if (onOutput) {
      try {
        onOutput(name, chunk);
      } catch {
        // The diagnostics must not disturb the pass-through.
      }
    }
  });
  // A read error on our end of the pipe ends the stream like EOF.
  from.on('error', () => undefined);
  from.once('close', () => {
    resume();
    onEnd();
  });
}

/** Starts the target; returns its ChildProcess (see spawnWrapped for the output state). */
export function spawnTarget(opts: WrapOptions): ChildProcess {
  return spawnWrapped(opts).child;
}

export function spawnWrapped(opts: WrapOptions): WrappedTarget {
  const [file, ...args] = opts.command;
  const env = { ...process.env };
  if (opts.notifySocket) env.NOTIFY_SOCKET = opts.notifySocket;
  const child = lazy.childProcess().spawn(file!, args, { stdio: ['inherit', 'pipe', 'pipe'], env });
  const output: Record<OutputStream, PassThroughState> = {
    stdout: { bytes: 0, discarded: 0, broken: null, pauses: 0 },
    stderr: { bytes: 0, discarded: 0, broken: null, pauses: 0 },
  };

  let exited: [number | null, NodeJS.Signals | null] | null = null;
  let open = 2;
  let drainTimer: NodeJS.Timeout | null = null;
  let done = false;
  const forward = (signal: NodeJS.Signals) => () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  const handlers = FORWARDED_SIGNALS.map((s) => [s, forward(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  const finish = (code: number | null, signal: NodeJS.Signals | null) => {
    if (done) return;
    done = true;
    if (drainTimer) clearTimeout(drainTimer);
    for (const [s, h] of handlers) process.removeListener(s, h);
    opts.onExit(code, signal);
  };
  const streamEnded = (name: OutputStream) => {
    try {
      opts.onOutputEnd?.(name);
    } catch {
      // as for onOutput
    }
    open--;
    if (open === 0 && exited) finish(...exited);
  };

  const out = { stdout: opts.stdout ?? process.stdout, stderr: opts.stderr ?? process.stderr };
  for (const name of ['stdout', 'stderr'] as const) {
    const from = child[name];
    if (from) passThrough(name, from, out[name], output[name], opts.onOutput, () => streamEnded(name));
    else open--;
  }

  child.once('exit', (code, signal) => {
    exited = [code, signal];
    if (open === 0) finish(code, signal);
    else drainTimer = setTimeout(() => finish(code, signal), EXIT_DRAIN_MS);
  });
  child.once('error', (err) => {
    // spawn failed (e.g. ENOENT): there is no process; report it like a failed exec.
    if (child.pid !== undefined) return; // an error talking to a running child: not fatal
    opts.onError(err);
    finish(127, null);
  });
  return { child, output };
}

/** Waits until what we passed on has left for our stdout and stderr (or `timeoutMs`
 *  passes), so that exiting right after does not lose the target's last output. */
export function flushOutput(timeoutMs: number, streams: Writable[] = [process.stdout, process.stderr]): Promise<void> {
  return new Promise((resolve) => {
    let left = streams.length;
    const timer = setTimeout(resolve, timeoutMs);
    const one = () => {
      if (--left === 0) {
        clearTimeout(timer);
        resolve();
      }
    };
    if (left === 0) one();
    for (const s of streams) {
      if (s.destroyed || !s.writable || s.writableLength === 0) {
        one();
        continue;
      }
      // Callbacks run in order, so this one runs after every earlier write is done.
      try {
        s.write('', () => one());
      } catch {
        one();
      }
    }
  });
}

/** The exit status a wrapper should pass on to its own supervisor. */
export function exitStatusOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const signo = signal ? lazy.os().constants.signals[signal] : undefined;
  return 128 + (signo ?? 0);
}
