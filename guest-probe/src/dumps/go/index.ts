// The non-destructive goroutine dump of a live Go process: reads its memory from outside
// (/proc/<pid>/mem), finds runtime.allgs without symbols, walks every goroutine's stack with
// the pclntab and prints Go's own traceback text. The target keeps running and is told
// nothing; it need not have been built with anything but a stock `go build` (stripped is fine).
//
// Consistency without stopping the target: a parked goroutine's stack does not change while
// it stays parked, so each g's header is read again after its stack was walked; if its
// status, sched or stack bounds moved meanwhile it is walked again (a few times), and a
// goroutine that never held still is left as read with a note, and the dump is not complete.
// `pause: true` instead stops the whole process for the read (SIGSTOP, wait until every
// thread is stopped, read, SIGCONT) and returns how long it was stopped. Who can see that:
// a parent waiting with WUNTRACED/WSTOPPED (systemd and Go's os/exec wait for exits only),
// and the target itself only if it asked for SIGCONT with signal.Notify (envd does not).
// A PTRACE_SEIZE+INTERRUPT stop would hide even that, but needs a native helper; not done.
//
// Entry point for the probe: readGoroutines(pid, options). It is heavy (pclntab parsing), so
// the probe imports this module dynamically, only when a dump is asked for.

import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { GoBinary } from './binary.js';
import { type AllgsLocation, decodeAllgs, describeAllgs, scanAllgs } from './allgs.js';
import { ElfFile } from './elf.js';
import { type CreatedBy, type GoroutineRecord, formatGoroutine } from './format.js';
import { G_STATUS, type GLayout, layoutFor } from './layout.js';
import { ProcessMemory, TargetExitedError, UnreadableAddressError, exePath, loadBias } from './memory.js';
import { printedFuncName } from './pclntab.js';
import { type AddressSpace, hex, u64 } from './space.js';
import { StackReader, StackScratch } from './stack.js';
import { walkStack } from './unwind.js';

export { NotGoBinaryError } from './version.js';
export { UnsupportedGoVersionError } from './layout.js';
export { PtraceDeniedError, TargetExitedError, UnreadableAddressError } from './memory.js';

export interface ReadGoroutinesOptions {
  procRoot?: string;
  /** The Go executable to symbolise with; default /proc/<pid>/exe. For a target run under
   *  an emulator (qemu-user: exe is qemu) or whose file was replaced since it started. */
  exe?: string;
  /** Stop the target (SIGSTOP/SIGCONT) while reading. Default false: read it running. */
  pause?: boolean;
  /** At most this many goroutines are printed (default 100,000); more: complete=false. */
  maxGoroutines?: number;
  /** Go's nanotime() now (CLOCK_MONOTONIC, ns); default process.hrtime.bigint() (the same clock). */
  nowNs?: bigint;
}

export interface GoroutinesRead {
  text: string;
  /** Goroutines printed. */
  goroutines: number;
  goVersion: string;
  arch: 'amd64' | 'arm64';
  /** How long the target was stopped (0 without pause). */
  pausedMs: number;
  /** Every goroutine was read and walked to its end. */
  complete: boolean;
  /** How the read went: where allgs was found, goroutines re-read or left incomplete, … */
  notes: string[];
  /** Wall time of the whole read. */
  elapsedMs: number;
}

const MAX_GOROUTINES = 100_000;
const CONFIRM_TRIES = 3;
/** Bound on physical frames walked per goroutine (Go 1.21+ prints the outer 50 of any depth). */
const MAX_PHYSICAL_121 = 100_000;
const MAX_PHYSICAL_OLD = 100;

/** Reads every goroutine of Go process `pid`. Throws the errors exported here, each saying what to change. */
export function readGoroutines(pid: number, opts: ReadGoroutinesOptions = {}): GoroutinesRead {
  const t0 = performance.now();
  const procRoot = opts.procRoot ?? '/proc';
  const exe = opts.exe ?? exePath(pid, procRoot);
  const probeElf = new ElfFile(exe);
  let bias: number;
  try {
    bias = loadBias(pid, probeElf, procRoot);
  } finally {
    probeElf.close();
  }
  const mem = new ProcessMemory(pid, procRoot);
  let bin: GoBinary | undefined;
  let stopped = false;
  let pauseStart = 0;
  let pausedMs = 0;
  try {
    bin = new GoBinary(exe, { bias, space: mem });
    const layout = layoutFor(bin.version.minor, bin.version.text);
    const notes: string[] = [];
    const loc: AllgsLocation | null = decodeAllgs(bin) ?? scanAllgs(bin, mem, layout);
    if (!loc)
      throw new Error(
        `${bin.version.text}: runtime.allgs not found (forEachGRace did not decode and no slice of g's was found in the data)`,
      );
    notes.push(describeAllgs(loc));
    if (opts.pause) {
      pauseStart = performance.now();
      process.kill(pid, 'SIGSTOP');
      stopped = true;
      waitStopped(pid, procRoot);
    }
    const nowNs = opts.nowNs ?? process.hrtime.bigint();
    const result = readAll(bin, mem, layout, loc, opts.maxGoroutines ?? MAX_GOROUTINES, nowNs, notes);
    if (stopped) {
      process.kill(pid, 'SIGCONT');
      stopped = false;
      pausedMs = performance.now() - pauseStart;
      notes.push(`the target was stopped (SIGSTOP) for ${pausedMs.toFixed(1)} ms`);
    }
    notes.push(`${mem.reads} reads of /proc/${pid}/mem`);
    return {
      text: result.text,
      goroutines: result.count,
      goVersion: bin.version.text,
      arch: bin.arch,
      pausedMs,
      complete: result.complete,
      notes,
      elapsedMs: performance.now() - t0,
    };
  } finally {
    if (stopped) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // It exited while stopped: nothing to resume.
      }
    }
    bin?.close();
    mem.close();
  }
}

const STOP_WAIT_MS = 2_000;

/** SIGSTOP is delivered asynchronously: wait (synchronously, briefly) until every thread is stopped. */
function waitStopped(pid: number, procRoot: string): void {
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const end = performance.now() + STOP_WAIT_MS;
  const taskDir = path.join(procRoot, String(pid), 'task');
  for (;;) {
    let all = true;
    let tids: string[];
    try {
      tids = readdirSync(taskDir);
    } catch {
      throw new TargetExitedError(`process ${pid} exited while being stopped`);
    }
    for (const tid of tids) {
      try {
        const stat = readFileSync(path.join(taskDir, tid, 'stat'), 'latin1');
        const state = stat[stat.lastIndexOf(')') + 2];
        if (state !== 'T' && state !== 't') all = false;
      } catch {
        // A thread that ended meanwhile.
      }
    }
    if (all) return;
    if (performance.now() > end) throw new Error(`process ${pid} did not stop within ${STOP_WAIT_MS} ms of SIGSTOP`);
    Atomics.wait(sleeper, 0, 0, 1);
  }
}

interface GFields {
  raw: Buffer;
  status: number;
  goid: number;
}

function readAll(
  bin: GoBinary,
  mem: ProcessMemory,
  layout: GLayout,
  loc: AllgsLocation,
  max: number,
  nowNs: bigint,
  notes: string[],
): { text: string; count: number; complete: boolean } {
  let complete = true;
  // allglen before allgptr: the runtime stores the pointer first, so every index below this
  // length is valid in the array read next.
  const n = u64(mem.read(loc.lenAddr, 8), 0);
  const ptr = u64(mem.read(loc.ptrAddr, 8), 0);
  if (n > 50_000_000 || (n > 0 && ptr === 0)) throw new Error(`allgs looks wrong: length ${n}, array ${hex(ptr)} (${describeAllgs(loc)})`);
  const arr = n > 0 ? mem.read(ptr, 8 * n) : Buffer.alloc(0);
  // Each goroutine is formatted as soon as it is walked, so its frames do not pile up.
  const texts: string[] = [];
  let running = 0;
  const mIds = new Map<number, number | null>();
  const scratch = new StackScratch();
  let unsettled = 0;
  let walkErrors = 0;
  for (let i = 0; i < n; i++) {
    const addr = u64(arr, 8 * i);
    let g: GFields;
    try {
      g = readG(mem, layout, addr);
    } catch (err) {
      if (err instanceof UnreadableAddressError) {
        notes.push(`allgs[${i}] = ${hex(addr)}: ${err.message}`);
        complete = false;
        continue;
      }
      throw err;
    }
    if ((g.status & ~G_STATUS.scan) === G_STATUS.dead) continue;
    if (texts.length >= max) {
      notes.push(`cut at ${max} goroutines (of ${n} in allgs, dead ones included)`);
      complete = false;
      break;
    }
    let rec: GoroutineRecord | null = record(bin, mem, scratch, layout, addr, g, mIds);
    // Confirm: the g must not have moved while its stack was read.
    for (let tries = 1; ; tries++) {
      const again = readG(mem, layout, addr);
      if (sameSchedule(layout, g.raw, again.raw)) break;
      if ((again.status & ~G_STATUS.scan) === G_STATUS.dead) {
        rec = null;
        break;
      }
      if (tries >= CONFIRM_TRIES) {
        unsettled++;
        complete = false;
        break;
      }
      g = again;
      rec = record(bin, mem, scratch, layout, addr, g, mIds);
    }
    if (!rec) continue;
    if (rec.walk?.error) {
      walkErrors++;
      complete = false;
      if (walkErrors <= 5) notes.push(`goroutine ${rec.goid}: stack walk stopped: ${rec.walk.error}`);
    }
    if (rec.walk === null) running++;
    texts.push(formatGoroutine(layout, rec, nowNs));
  }
  if (unsettled > 0) notes.push(`${unsettled} goroutine(s) kept running while read; their stacks may be inconsistent`);
  if (walkErrors > 5) notes.push(`${walkErrors - 5} more goroutine(s) whose walk stopped early`);
  if (running > 0)
    notes.push(
      `${running} goroutine(s) running on a thread: their registers are not readable from outside, so no stack (as Go prints for other threads)`,
    );
  return { text: texts.join('\n'), count: texts.length, complete };
}

function readG(mem: AddressSpace, layout: GLayout, addr: number): GFields {
  const raw = mem.read(addr, layout.size);
  return { raw, status: raw.readUInt32LE(layout.atomicstatus), goid: u64(raw, layout.goid) };
}

/** Fields that change when a goroutine runs or its stack moves. */
function sameSchedule(l: GLayout, a: Buffer, b: Buffer): boolean {
  for (const off of [l.stackLo, l.stackHi, l.schedSp, l.schedPc, l.syscallsp, l.syscallpc]) {
    if (u64(a, off) !== u64(b, off)) return false;
  }
  return a.readUInt32LE(l.atomicstatus) === b.readUInt32LE(l.atomicstatus);
}

function record(
  bin: GoBinary,
  mem: ProcessMemory,
  scratch: StackScratch,
  l: GLayout,
  addr: number,
  g: GFields,
  mIds: Map<number, number | null>,
): GoroutineRecord {
  const b = g.raw;
  const m = u64(b, l.m);
  let mId: number | null = null;
  if (m !== 0) {
    if (!mIds.has(m)) {
      try {
        mIds.set(m, u64(mem.read(m + l.mId, 8), 0));
      } catch {
        mIds.set(m, null);
      }
    }
    mId = mIds.get(m) ?? null;
  }
  const status = g.status & ~G_STATUS.scan;
  let walk = null;
  if (status !== G_STATUS.running) {
    const syscallsp = u64(b, l.syscallsp);
    const start =
      syscallsp !== 0
        ? { pc: u64(b, l.syscallpc), sp: syscallsp, lr: 0 }
        : { pc: u64(b, l.schedPc), sp: u64(b, l.schedSp), lr: u64(b, l.schedLr) };
    const stack = new StackReader(mem, scratch, u64(b, l.stackLo), u64(b, l.stackHi));
    walk = walkStack(bin, stack, start, l.minor >= 21 ? MAX_PHYSICAL_121 : MAX_PHYSICAL_OLD);
  }
  return {
    addr,
    goid: g.goid,
    status: g.status,
    waitreason: b[l.waitreason] ?? 0,
    waitsince: u64(b, l.waitsince),
    m,
    mId,
    lockedm: u64(b, l.lockedm),
    walk,
    createdBy: createdBy(bin, l, b),
  };
}

/** printcreatedby: the function holding gopc, its line at the CALL (gopc - quantum). */
function createdBy(bin: GoBinary, l: GLayout, b: Buffer): CreatedBy | null {
  const gopc = u64(b, l.gopc);
  const f = bin.findFunc(gopc);
  if (!f) return null;
  const tracepc = gopc > f.entry ? gopc - bin.pclntab.quantum : gopc;
  const { file, line } = bin.pclntab.fileLine(f, tracepc);
  return {
    name: printedFuncName(bin.funcName(f)),
    file,
    line,
    offset: gopc > f.entry ? gopc - f.entry : null,
    goid: l.parentGoid >= 0 ? u64(b, l.parentGoid) : 0,
  };
}
