// Dump modes of the probe, behind one call the command handler makes:
//
//   threads     /proc only (harmless)                                  source 'proc'
//   goroutines  pprof URL when configured (harmless)                   source 'pprof'
//               else read from the target's memory (harmless, go/)     source 'memory'
//               or SIGQUIT, only when destructive: ends the target     source 'sigquit'
//   native      gdb, else eu-stack (both stop the target briefly)      source 'gdb' | 'eu-stack'
//
// takeDump never throws: every failure is a result with `error` set (source 'none' when no
// dump was taken at all).

import { DUMP_CHUNK_BYTES, type DumpMode, type DumpSource } from '@vsockdiag/proto';
import { readPidStat } from '../proc/stat.js';
import { MAX_PPROF_BYTES, type SigquitCapture, pprofDump } from './goroutines.js';
import { nativeDump } from './native.js';
import { NoSuchProcessError, TARGET_EXITED_LINE, processExited, threadsDump } from './threads.js';

export {
  SigquitCapture,
  pprofDump,
  tracebackEnded,
  MAX_PPROF_BYTES,
  SIGQUIT_DRAIN_MS,
  type DumpText,
  type SigquitOptions,
} from './goroutines.js';
export { nativeDump, which, NATIVE_NOT_AVAILABLE, type NativeDump } from './native.js';
export {
  threadsDump,
  archName,
  formatSyscall,
  processExited,
  NoSuchProcessError,
  TARGET_EXITED_LINE,
  type ThreadsDump,
} from './threads.js';

export interface DumpRequest {
  mode: DumpMode;
  destructive: boolean;
}

export interface DumpContext {
  /** The target's pid, or null when it is not known (not found yet, or exited). */
  targetPid: number | null;
  procRoot: string;
  pprofUrl: string | null;
  sigquit: SigquitCapture;
  /** Resolves once `pid` has exited. The probe passes (pid, signal) => waitForExit(pid, {
   *  procRoot, signal }); `signal` aborts when the capture is over, to stop the waiting. */
  exited: (pid: number, signal: AbortSignal) => Promise<void>;
  /** Bounds; defaults in DUMP_DEFAULTS. */
  pprofTimeoutMs?: number;
  sigquitTimeoutMs?: number;
  nativeTimeoutMs?: number;
  maxBytes?: number;
  /** While a SIGQUIT capture runs, called every 50 ms (the probe reads its followed file). */
  pump?: () => void;
  /** Where the target's stderr reaches the probe. null: nowhere, so a SIGQUIT would end the
   *  target and lose its dump; it is refused. (undefined: not checked.) */
  stderrSource?: 'wrap' | 'file' | 'journal' | null;
  /** Streams a memory read's text as it is made, in chunks of at most DUMP_CHUNK_BYTES, before
   *  takeDump returns (the rest, if any, is in the result). A chunk is valid only during the
   *  call: copy it before the promise resolves. Without it the result holds the whole text. */
  sendChunk?: (chunk: Buffer) => Promise<void>;
}

export const DUMP_DEFAULTS = {
  pprofTimeoutMs: 15_000,
  /** The Go runtime prints 10,000 goroutines in well under a second; exiting and a slow
   *  journal take the rest. */
  sigquitTimeoutMs: 15_000,
  nativeTimeoutMs: 30_000,
  maxBytes: MAX_PPROF_BYTES,
} as const;

export interface DumpResult {
  mode: DumpMode;
  source: DumpSource;
  /** The text; '' when it comes as `chunks` instead. */
  text: string;
  /** A memory read's text: UTF-8 in chunks of at most DUMP_CHUNK_BYTES, never made one string
   *  (8 MiB for 10,000 goroutines, and its UTF-8 copy as much again); with ctx.sendChunk, what
   *  was not streamed yet. Read it with dumpChunks. */
  chunks?: Buffer[];
  /** True only when `text` holds the whole dump. */
  complete: boolean;
  error?: string;
  /** The pid the dump is of (absent when there was none). */
  pid?: number;
  /** What the dump did or how it was taken (e.g. "gdb stopped the target…"). */
  note?: string;
  /** How long the target was stopped for it (memory reads: 0 when read running). */
  pausedMs?: number;
}

export const NO_TARGET = 'no target process is known (not found yet, or it exited): nothing to dump';
export const NO_STDERR =
  "not sending SIGQUIT: the probe does not see the target's stderr (use wrap mode, --log-file or --journal-unit), so the dump would be lost with the target";

/** Takes one dump. Never throws. */
export async function takeDump(request: DumpRequest, ctx: DumpContext): Promise<DumpResult> {
  const mode = request.mode;
  try {
    switch (mode) {
      case 'threads':
        return threads(ctx);
      case 'goroutines':
        return await goroutines(request, ctx);
      case 'native':
        return await native(ctx);
      default:
        return fail(mode, `unknown dump mode ${String(mode)}`);
    }
  } catch (err) {
    return fail(mode, `the ${mode} dump failed: ${(err as Error).message}`, ctx.targetPid);
  }
}

function fail(mode: DumpMode, error: string, pid?: number | null, source: DumpSource = 'none'): DumpResult {
  return { mode, source, text: '', complete: false, error, ...(pid ? { pid } : {}) };
}

function threads(ctx: DumpContext): DumpResult {
  const pid = ctx.targetPid;
  if (pid === null) return fail('threads', NO_TARGET);
  try {
    const d = threadsDump(pid, { procRoot: ctx.procRoot });
    return {
      mode: 'threads',
      source: 'proc',
      text: d.text,
      complete: d.complete,
      pid,
      ...(d.complete
        ? {}
        : { error: d.text.includes(TARGET_EXITED_LINE) ? 'the target exited during the dump' : 'the dump was cut at its size bound' }),
    };
  } catch (err) {
    if (err instanceof NoSuchProcessError) return fail('threads', err.message, pid);
    throw err;
  }
}

async function goroutines(request: DumpRequest, ctx: DumpContext): Promise<DumpResult> {
  const pid = ctx.targetPid;
  const maxBytes = ctx.maxBytes ?? DUMP_DEFAULTS.maxBytes;
  let pprofError: string | null = null;
  if (ctx.pprofUrl) {
    // Harmless, and needs no pid: the URL names the process.
    const d = await pprofDump(ctx.pprofUrl, ctx.pprofTimeoutMs ?? DUMP_DEFAULTS.pprofTimeoutMs, { maxBytes });
    const ok = d.complete || d.text.length > 0;
    if (ok || !request.destructive || pid === null) {
      return {
        mode: 'goroutines',
        source: 'pprof',
        text: d.text,
        complete: d.complete,
        ...(pid ? { pid } : {}),
        ...(d.error ? { error: d.error } : {}),
      };
    }
    // Nothing from pprof, and the operator allowed the destructive way: fall back to it.
    pprofError = d.error ?? 'pprof gave nothing';
  }
  if (pid === null) return fail('goroutines', NO_TARGET);
  if (!request.destructive) return fromMemory(pid, ctx, maxBytes);
  if (ctx.stderrSource === null) return fail('goroutines', NO_STDERR, pid);

  const abort = new AbortController();
  let exited: Promise<void>;
  try {
    exited = ctx.exited(pid, abort.signal);
  } catch (err) {
    exited = Promise.reject(err as Error);
  }
  exited.catch(() => undefined);
  try {
    const d = await ctx.sigquit.capture(pid, {
      timeoutMs: ctx.sigquitTimeoutMs ?? DUMP_DEFAULTS.sigquitTimeoutMs,
      maxBytes,
      exited,
      ...(ctx.pump ? { pump: ctx.pump } : {}),
    });
    const notes = ['SIGQUIT ended the target (its supervisor restarts it)'];
    if (pprofError) notes.push(`pprof failed first: ${pprofError}`);
    return {
      mode: 'goroutines',
      source: 'sigquit',
      text: d.text,
      complete: d.complete,
      pid,
      note: notes.join('; '),
      ...(d.error ? { error: d.error } : {}),
    };
  } catch (err) {
    // Only "a capture is already running" rejects.
    return fail('goroutines', (err as Error).message, pid);
  } finally {
    abort.abort();
  }
}

/** Go's own traceback text, read from the running target's memory (go/index.ts). */
async function fromMemory(pid: number, ctx: DumpContext, maxBytes: number): Promise<DumpResult> {
  // Loaded on the first such dump: the pclntab reader is not on the probe's start-up path.
  const go = await import('./go/index.js');
  let r: Awaited<ReturnType<typeof go.readGoroutines>>;
  try {
    r = await go.readGoroutines(pid, { procRoot: ctx.procRoot, maxBytes, ...(ctx.sendChunk ? { onChunk: ctx.sendChunk } : {}) });
  } catch (err) {
    // Each of the reader's errors says what to change (not Go, version, ptrace, exited, address).
    return fail('goroutines', (err as Error).message, pid);
  }
  const how = r.pausedMs > 0 ? `the target was stopped ${r.pausedMs.toFixed(1)} ms` : 'the target was not stopped';
  const note = [
    `read from memory: ${r.goVersion} ${r.arch}, ${r.goroutines} goroutines in ${Math.round(r.elapsedMs)} ms; ${how}`,
    ...r.notes,
  ];
  return {
    mode: 'goroutines',
    source: 'memory',
    text: '',
    chunks: r.chunks,
    complete: r.complete,
    pid,
    note: note.join('; '),
    pausedMs: r.pausedMs,
  };
}

/**
 * The dump's text as the probe sends it: UTF-8 in chunks of at most DUMP_CHUNK_BYTES (a
 * memory read's own chunks, else the text cut up).
 */
export function dumpChunks(r: DumpResult): Buffer[] {
  if (r.chunks) return r.chunks;
  const data = Buffer.from(r.text, 'utf8');
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; at += DUMP_CHUNK_BYTES) out.push(data.subarray(at, at + DUMP_CHUNK_BYTES));
  return out;
}

async function native(ctx: DumpContext): Promise<DumpResult> {
  const pid = ctx.targetPid;
  if (pid === null) return fail('native', NO_TARGET);
  const d = await nativeDump(pid, ctx.nativeTimeoutMs ?? DUMP_DEFAULTS.nativeTimeoutMs);
  return {
    mode: 'native',
    source: d.available ? d.tool : 'none',
    text: d.text,
    complete: d.complete,
    pid,
    ...(d.note ? { note: d.note } : {}),
    ...(d.error ? { error: d.error } : {}),
  };
}

export interface WaitForExitOptions {
  procRoot?: string;
  /** How often to look (default 50 ms). */
  pollMs?: number;
  /** Stops the waiting (the promise then never resolves). */
  signal?: AbortSignal;
}

/**
 * Resolves once `pid` has exited: gone from procRoot, a zombie without threads, or replaced
 * by another process (start time changed). Polls its stat file; works for the wrap child
 * (a zombie until Node reaps it) and for a target found by name or pid file alike.
 */
export function waitForExit(pid: number, opts: WaitForExitOptions = {}): Promise<void> {
  const procRoot = opts.procRoot ?? '/proc';
  const start = startTimeOf(pid, procRoot);
  return new Promise((resolve) => {
    if (start === null) {
      resolve();
      return;
    }
    const timer = setInterval(() => {
      if (opts.signal?.aborted) {
        clearInterval(timer);
        return;
      }
      if (processExited(pid, procRoot, start)) {
        clearInterval(timer);
        resolve();
      }
    }, opts.pollMs ?? 50);
    opts.signal?.addEventListener('abort', () => clearInterval(timer), { once: true });
  });
}

function startTimeOf(pid: number, procRoot: string): number | null {
  try {
    return readPidStat(pid, procRoot)?.startTimeTicks ?? null;
  } catch {
    return null;
  }
}
