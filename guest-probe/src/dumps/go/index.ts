// The non-destructive goroutine dump of a live Go process: reads its memory from outside
// (process_vm_readv through the addon, /proc/<pid>/mem for single reads), finds runtime.allgs
// without symbols, walks every goroutine's stack with the pclntab and prints Go's own
// traceback text. The target keeps running and is told nothing; it need not have been built
// with anything but a stock `go build` (stripped is fine).
//
// Consistency without stopping the target: a parked goroutine's stack does not change while
// it stays parked. Goroutines are read in batches (snapshot.ts: the batch's g's, then the top
// of each one's stack, two process_vm_readv calls), walked and printed, then the batch's g's
// are read again; a g whose status, sched or stack bounds moved meanwhile is read and walked
// again alone (a few times), and a goroutine that never held still is left as read with a
// note, and the dump is not complete.
// `pause: true` instead stops the whole process for the read (SIGSTOP, wait until every
// thread is stopped, copy every g and its whole stack window, SIGCONT) and walks the copy
// once the target runs again; it returns how long the target was stopped. The copy is one
// native call (the addon's memSnapshot: two rounds of batched process_vm_readv, no JavaScript
// per goroutine), so the stop lasts about what the kernel takes to copy the bytes; and the same
// copy is made once before the stop and thrown away, which warms what the kernel touches (see
// Reading.rehearse): the stop's copy then takes about half as long. Who can see the stop:
// a parent waiting with WUNTRACED/WSTOPPED (systemd and Go's os/exec wait for exits only),
// and the target itself only if it asked for SIGCONT with signal.Notify (envd does not).
// A PTRACE_SEIZE+INTERRUPT stop would hide even that, but needs a native helper; not done.
//
// Cost (10,000 parked goroutines, 7 MiB of text): what depends on the pc alone is worked out
// once per pc (format.ts), the text is written as bytes into chunks the probe sends as they
// fill (text.ts: never one string), and the read gives the event loop a turn every YIELD_MS,
// so the probe's heartbeats and other sessions go on during a read of any size.
//
// Entry point for the probe: readGoroutines(pid, options). It is heavy (pclntab parsing), so
// the probe imports this module dynamically, only when a dump is asked for.

import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { DUMP_CHUNK_BYTES } from '@vsockdiag/proto';
import { GoBinary } from './binary.js';
import { type AllgsLocation, decodeAllgs, describeAllgs, scanAllgs } from './allgs.js';
import { ElfFile } from './elf.js';
import { type GoroutineRecord, Printer } from './format.js';
import { G_STATUS, type GLayout, layoutFor } from './layout.js';
import { ProcessMemory, TargetExitedError, UnreadableAddressError, exePath, loadBias } from './memory.js';
import { DEAD, NO_G, NO_STACK, Snapshot, sameSchedule, startSp } from './snapshot.js';
import { hex, u64, u64v, viewOf } from './space.js';
import { StackReader } from './stack.js';
import { ByteWriter, ChunkedText } from './text.js';
import { Walk, type WalkStart, walkStack } from './unwind.js';
import { monotonicMs } from '../../clock.js';

export { NotGoBinaryError } from './version.js';
export { UnsupportedGoVersionError } from './layout.js';
export { PtraceDeniedError, TargetExitedError, UnreadableAddressError } from './memory.js';

export interface ReadGoroutinesOptions {
  procRoot?: string;
  /** The Go executable to symbolise with; default /proc/<pid>/exe. For a target run under
   *  an emulator (qemu-user: exe is qemu) or whose file was replaced since it started. */
  exe?: string;
  /** How the target's memory is opened (default: a ProcessMemory of pid). Tests wrap it to make an address fail. */
  openMemory?: (pid: number, procRoot: string) => ProcessMemory;
  /** Stop the target (SIGSTOP/SIGCONT) while reading. Default false: read it running. */
  pause?: boolean;
  /** At most this many goroutines are printed (default 100,000); more: complete=false. */
  maxGoroutines?: number;
  /** At most this many bytes of text, whole goroutines only (default: no bound); more: complete=false. */
  maxBytes?: number;
  /** Go's nanotime() now (CLOCK_MONOTONIC, ns); default process.hrtime.bigint() (the same clock). */
  nowNs?: bigint;
  /**
   * Streams the text: called with each chunk once it is full, and with the last one at the
   * end; the result's `chunks` is then empty. The buffer is reused once the promise resolves,
   * so the handler must copy it (the probe's channel.send frames it at once).
   */
  onChunk?: (chunk: Buffer) => Promise<void>;
}

export interface GoroutinesRead {
  /** The text (UTF-8), in chunks of at most DUMP_CHUNK_BYTES ([] when streamed through onChunk). */
  chunks: Buffer[];
  /** Bytes of text in all. */
  bytes: number;
  /** Goroutines printed. */
  goroutines: number;
  goVersion: string;
  arch: 'amd64' | 'arm64';
  /** How long the target was stopped (0 without pause). */
  pausedMs: number;
  /** Pause mode: of pausedMs, the wait until every thread had stopped, and the copy. */
  pause?: { stopWaitMs: number; copyMs: number };
  /** Every goroutine was read and walked to its end. */
  complete: boolean;
  /** How the read went: where allgs was found, goroutines re-read or left incomplete, … */
  notes: string[];
  /** Wall time of the whole read. */
  elapsedMs: number;
}

/** The text of a read as one string (for tests and small dumps; the probe sends the chunks). */
export function goroutinesText(r: GoroutinesRead): string {
  return Buffer.concat(r.chunks).toString('utf8');
}

const MAX_GOROUTINES = 100_000;
const CONFIRM_TRIES = 3;
/** Bound on physical frames walked per goroutine (Go 1.21+ prints the outer 50 of any depth). */
const MAX_PHYSICAL_121 = 100_000;
const MAX_PHYSICAL_OLD = 100;
/** Goroutines read per batch of a running target: two process_vm_readv calls and a confirm. */
const BATCH = 256;
/** Stack bytes read with a batch per goroutine; a deeper walk reads on by itself. */
const WINDOW_CAP = 16 * 1024;
/** Pause mode copies every stack while the target is stopped, up to this much in all; a
 *  larger target is walked while stopped instead (consistent, but a longer pause). */
const PAUSE_SNAPSHOT_BYTES = 64 * 1024 * 1024;
/** The read gives the probe's event loop a turn at least this often (heartbeats, other sessions). */
const YIELD_MS = 20;

/**
 * The big buffers of a read (a few MiB: the pclntab, the batch snapshots, the text's staging
 * and chunks), kept for the next read. Allocated afresh by every dump, they outlived the
 * scavenges of the read, so each dump left its own on the old heap until a full collection:
 * 3 MiB more RSS per dump. Held by a WeakRef, so a collection between dumps still frees them;
 * a read takes them for itself, so two reads at once never share them.
 */
class ReadBuffers {
  pclntab: Buffer | undefined;
  readonly snap = new Snapshot();
  readonly again = new Snapshot();
  readonly staging = new ByteWriter();
  readonly one = new ByteWriter(4096);
  stackScratch: Buffer | undefined;
  /** Spare chunks for a streamed text. */
  readonly chunks: Buffer[] = [];
}

let spareBuffers: WeakRef<ReadBuffers> | undefined;

function takeBuffers(): ReadBuffers {
  const b = spareBuffers?.deref();
  spareBuffers = undefined;
  return b ?? new ReadBuffers();
}

/**
 * Reads every goroutine of Go process `pid`. Throws the errors exported here, each saying what
 * to change. Asynchronous: the read yields to the event loop every YIELD_MS of work, except
 * while the target is stopped (pause mode), which stays one short synchronous stretch.
 */
export async function readGoroutines(pid: number, opts: ReadGoroutinesOptions = {}): Promise<GoroutinesRead> {
  const t0 = monotonicMs();
  const procRoot = opts.procRoot ?? '/proc';
  const exe = opts.exe ?? exePath(pid, procRoot);
  const probeElf = new ElfFile(exe);
  let bias: number;
  try {
    bias = loadBias(pid, probeElf, procRoot);
  } finally {
    probeElf.close();
  }
  const mem = opts.openMemory ? opts.openMemory(pid, procRoot) : new ProcessMemory(pid, procRoot);
  const buffers = takeBuffers();
  let bin: GoBinary | undefined;
  let stopped = false;
  try {
    bin = new GoBinary(exe, { bias, space: mem, ...(buffers.pclntab ? { pclntabInto: buffers.pclntab } : {}) });
    if (!buffers.pclntab || bin.pclntab.data.buffer !== buffers.pclntab.buffer) buffers.pclntab = bin.pclntab.data;
    const layout = layoutFor(bin.version.minor, bin.version.text);
    const loc: AllgsLocation | null = decodeAllgs(bin) ?? scanAllgs(bin, mem, layout);
    if (!loc)
      throw new Error(
        `${bin.version.text}: runtime.allgs not found (forEachGRace did not decode and no slice of g's was found in the data)`,
      );
    const r = new Reading(bin, mem, layout, opts, buffers);
    r.notes.push(describeAllgs(loc));
    let pausedMs = 0;
    let pause: GoroutinesRead['pause'];
    if (opts.pause) {
      // Sized and rehearsed before the stop, so neither the allocation nor a cold copy is
      // part of the pause (it grows if more goroutines appeared meanwhile).
      const snap = new Snapshot();
      snap.reserve(r.peekCount(loc) + 64, layout.size);
      r.rehearse(loc, snap);
      const pauseStart = monotonicMs();
      process.kill(pid, 'SIGSTOP');
      stopped = true;
      waitStopped(pid, procRoot);
      const allStopped = monotonicMs();
      const copied = r.readStopped(loc, snap);
      const copyMs = monotonicMs() - allStopped;
      process.kill(pid, 'SIGCONT');
      stopped = false;
      pausedMs = monotonicMs() - pauseStart;
      pause = { stopWaitMs: allStopped - pauseStart, copyMs };
      r.notes.push(
        `the target was stopped (SIGSTOP) for ${pausedMs.toFixed(1)} ms: ${pause.stopWaitMs.toFixed(1)} ms until every thread had stopped, ${copyMs.toFixed(1)} ms copying`,
      );
      if (copied) await r.printSnapshot(snap);
    } else {
      await r.readRunning(loc);
    }
    r.finish();
    notesOfMemory(r.notes, mem);
    const chunks = await r.out.end();
    return {
      chunks,
      bytes: r.out.bytes,
      goroutines: r.count,
      goVersion: bin.version.text,
      arch: bin.arch,
      pausedMs,
      ...(pause ? { pause } : {}),
      complete: r.complete,
      notes: r.notes,
      elapsedMs: monotonicMs() - t0,
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
    spareBuffers = new WeakRef(buffers);
  }
}

function notesOfMemory(notes: string[], mem: ProcessMemory): void {
  const parts = [];
  if (mem.batches > 0) parts.push(`${mem.ranges} ranges in ${mem.batches} process_vm_readv batches`);
  if (mem.reads > 0) parts.push(`${mem.reads} reads of /proc/${mem.pid}/mem`);
  if (parts.length > 0) notes.push(parts.join(', '));
}

const STOP_WAIT_MS = 2_000;

/** SIGSTOP is delivered asynchronously: wait (synchronously, briefly) until every thread is stopped. */
function waitStopped(pid: number, procRoot: string): void {
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const end = monotonicMs() + STOP_WAIT_MS;
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
    if (monotonicMs() > end) throw new Error(`process ${pid} did not stop within ${STOP_WAIT_MS} ms of SIGSTOP`);
    Atomics.wait(sleeper, 0, 0, 0.2);
  }
}

/** What a goroutine's text was made from, for the notes once it is kept. */
interface Outcome {
  running: boolean;
  walkError: string | undefined;
}

// The common outcomes, shared: nothing is allocated per goroutine for them.
const WALKED: Outcome = { running: false, walkError: undefined };
const ON_THREAD: Outcome = { running: true, walkError: undefined };

/** One read of one process: the goroutines in allgs order, printed into `out`. */
class Reading {
  readonly out: ChunkedText;
  readonly notes: string[] = [];
  count = 0;
  complete = true;
  private readonly printer: Printer;
  private readonly stack: StackReader;
  private readonly walk = new Walk();
  private readonly rec: GoroutineRecord = {
    addr: 0,
    goid: 0,
    status: 0,
    waitreason: 0,
    waitsince: 0,
    m: 0,
    mId: null,
    lockedm: 0,
    gopc: 0,
    parentGoid: 0,
  };
  private readonly start: WalkStart = { pc: 0, sp: 0, lr: 0 };
  private readonly mIds = new Map<number, number | null>();
  private readonly maxGoroutines: number;
  private readonly maxBytes: number;
  private readonly maxPhysical: number;
  private readonly noWindow = viewOf(Buffer.alloc(0));
  /** The last goroutine printed, before it is kept (redo: one g read alone). */
  private readonly one: ByteWriter;
  private n = 0;
  private stop = false;
  private onThread = 0;
  private unsettled = 0;
  private walkErrors = 0;
  private lastYield = monotonicMs();

  constructor(
    private readonly bin: GoBinary,
    private readonly mem: ProcessMemory,
    private readonly layout: GLayout,
    opts: ReadGoroutinesOptions,
    private readonly buffers: ReadBuffers,
  ) {
    this.out = new ChunkedText(DUMP_CHUNK_BYTES, opts.onChunk, buffers.chunks);
    this.printer = new Printer(bin, layout, Number(opts.nowNs ?? process.hrtime.bigint()));
    this.stack = new StackReader(mem, buffers.stackScratch);
    this.one = buffers.one;
    this.maxGoroutines = opts.maxGoroutines ?? MAX_GOROUTINES;
    this.maxBytes = opts.maxBytes ?? Infinity;
    this.maxPhysical = layout.minor >= 21 ? MAX_PHYSICAL_121 : MAX_PHYSICAL_OLD;
  }

  /** allglen, then the array: the runtime stores the pointer first, so every index below this length is valid in the array read next. */
  private allgs(loc: AllgsLocation): Buffer {
    const n = u64(this.mem.read(loc.lenAddr, 8), 0);
    const ptr = u64(this.mem.read(loc.ptrAddr, 8), 0);
    if (n > 50_000_000 || (n > 0 && ptr === 0))
      throw new Error(`allgs looks wrong: length ${n}, array ${hex(ptr)} (${describeAllgs(loc)})`);
    this.n = n;
    return n > 0 ? this.mem.read(ptr, 8 * n) : Buffer.alloc(0);
  }

  /** A running target: batch by batch, each goroutine confirmed unmoved after it was printed. */
  async readRunning(loc: AllgsLocation): Promise<void> {
    const arr = this.allgs(loc);
    const { snap, again, staging } = this.buffers;
    const ends: number[] = [];
    const outcomes: Outcome[] = [];
    for (let from = 0; from < this.n && !this.stop; from += BATCH) {
      const count = Math.min(BATCH, this.n - from);
      snap.read(this.mem, this.layout, arr, from, count, WINDOW_CAP);
      staging.reset();
      for (let k = 0; k < count; k++) {
        outcomes[k] = this.print(staging, snap, k);
        ends[k] = staging.pos;
      }
      // Confirm: each g must not have moved while its stack was read (the g's alone: windowCap 0).
      again.read(this.mem, this.layout, arr, from, count, 0);
      for (let k = 0, start = 0; k < count && !this.stop; start = ends[k]!, k++) {
        const w = snap.window[k]!;
        if (w === DEAD) continue;
        if (w === NO_G) {
          this.unreadable(from + k, snap.addrs[k]!);
          continue;
        }
        // A walk that stopped early is done again, even when the g has not moved: see redo.
        if (again.window[k] !== NO_G && snap.same(k, again, k, this.layout) && outcomes[k]!.walkError === undefined) {
          this.keep(staging.buf.subarray(start, ends[k]), outcomes[k]!);
          continue;
        }
        if (again.window[k] === DEAD) continue;
        this.redo(from + k, snap.addrs[k]!);
      }
      await this.breathe();
    }
  }

  /** allglen as it is now, before the target is stopped (to size the snapshot). */
  peekCount(loc: AllgsLocation): number {
    const n = u64(this.mem.read(loc.lenAddr, 8), 0);
    return n <= 50_000_000 ? n : 0;
  }

  /**
   * Pause mode, just before the stop: the copy readStopped makes, made while the target runs
   * and thrown away. The stop's copy is mostly the kernel writing into pages that user space
   * pre-faulted, and on the bench host (a VM) that write was what cost: the 10,010-goroutine
   * copy took 10 ms at the median and up to 20 ms into buffers only written from JavaScript,
   * and 6 ms, at most 8, right after this rehearsal wrote them from the kernel. It costs the
   * probe one more copy's CPU (about the stop's length) and the target nothing.
   */
  rehearse(loc: AllgsLocation, snap: Snapshot): void {
    snap.readAll(this.mem, this.layout, this.allgs(loc), this.n, PAUSE_SNAPSHOT_BYTES);
  }

  /**
   * Pause mode, while the target is stopped: every g and its whole stack window into `snap`
   * (its own: one of every g, MiBs for a large target, is not kept for the next read), to be
   * printed once the target runs again. When the stacks are too large to copy, the goroutines
   * are printed right here instead (the target stays stopped until done) and false is
   * returned.
   */
  readStopped(loc: AllgsLocation, snap: Snapshot): boolean {
    const arr = this.allgs(loc);
    if (snap.readAll(this.mem, this.layout, arr, this.n, PAUSE_SNAPSHOT_BYTES)) {
      // m.id too, for the goroutines on a thread (few): an m can be freed once the target runs on.
      const { size, m } = this.layout;
      const hv = snap.hdrView;
      for (let k = 0; k < this.n; k++) {
        const o = k * size + m;
        if (snap.window[k] !== NO_G && (hv.getUint32(o, true) | hv.getUint32(o + 4, true)) !== 0) this.mId(u64v(hv, o));
      }
      return true;
    }
    this.notes.push(`the stacks take more than ${PAUSE_SNAPSHOT_BYTES} bytes: walked while the target was stopped`);
    for (let from = 0; from < this.n && !this.stop; from += BATCH) {
      const count = Math.min(BATCH, this.n - from);
      snap.read(this.mem, this.layout, arr, from, count, WINDOW_CAP);
      this.keepAll(snap, from);
    }
    return false;
  }

  /** Pause mode, after the target resumed: the snapshot printed (it needs no confirming). */
  async printSnapshot(snap: Snapshot): Promise<void> {
    const w = this.one;
    for (let k = 0; k < snap.count && !this.stop; k++) {
      const v = snap.window[k]!;
      if (v === DEAD) continue;
      if (v === NO_G) {
        this.unreadable(k, snap.addrs[k]!);
        continue;
      }
      w.reset();
      const o = this.print(w, snap, k);
      this.keep(w.buf.subarray(0, w.pos), o);
      if ((k & 63) === 0) await this.breathe();
    }
  }

  private keepAll(snap: Snapshot, from: number): void {
    const w = this.one;
    for (let k = 0; k < snap.count && !this.stop; k++) {
      const v = snap.window[k]!;
      if (v === DEAD) continue;
      if (v === NO_G) {
        this.unreadable(from + k, snap.addrs[k]!);
        continue;
      }
      w.reset();
      const o = this.print(w, snap, k);
      this.keep(w.buf.subarray(0, w.pos), o);
    }
  }

  /** Between goroutines (never while the target is stopped): streams what is done, and yields to the event loop now and then. */
  private async breathe(): Promise<void> {
    await this.out.flush();
    if (monotonicMs() - this.lastYield < YIELD_MS) return;
    await yieldToLoop();
    this.lastYield = monotonicMs();
  }

  /** Prints g k of the snapshot (a dead or unreadable one prints nothing). */
  private print(w: ByteWriter, snap: Snapshot, k: number): Outcome {
    const v = snap.window[k]!;
    if (v === DEAD || v === NO_G) return WALKED;
    return this.printG(w, snap.addrs[k]!, snap.hdrView, k * this.layout.size, v === NO_STACK ? null : snap.stackView, v, snap.got[k]!);
  }

  /**
   * Prints the g whose bytes are at `o` in `b`, walking its stack from the window of `winLen`
   * bytes at `winStart` in `win` (the stack from the walk's start sp on); win null: a running
   * g, no walk.
   */
  private printG(w: ByteWriter, addr: number, b: DataView, o: number, win: DataView | null, winStart: number, winLen: number): Outcome {
    const l = this.layout;
    const rec = this.rec;
    rec.addr = addr;
    rec.goid = u64v(b, o + l.goid);
    rec.status = b.getUint32(o + l.atomicstatus, true);
    rec.waitreason = b.getUint8(o + l.waitreason);
    rec.waitsince = u64v(b, o + l.waitsince);
    rec.m = u64v(b, o + l.m);
    rec.mId = rec.m === 0 ? null : this.mId(rec.m);
    rec.lockedm = u64v(b, o + l.lockedm);
    rec.gopc = u64v(b, o + l.gopc);
    rec.parentGoid = l.parentGoid >= 0 ? u64v(b, o + l.parentGoid) : 0;
    if (!win) {
      this.printer.goroutine(w, rec, null, this.stack);
      return ON_THREAD;
    }
    const stack = this.stack;
    stack.reset(u64v(b, o + l.stackLo), u64v(b, o + l.stackHi), win, winStart, startSp(b, o, l), winLen);
    const start = this.start;
    const syscallsp = u64v(b, o + l.syscallsp);
    if (syscallsp !== 0) {
      start.pc = u64v(b, o + l.syscallpc);
      start.sp = syscallsp;
      start.lr = 0;
    } else {
      start.pc = u64v(b, o + l.schedPc);
      start.sp = u64v(b, o + l.schedSp);
      start.lr = u64v(b, o + l.schedLr);
    }
    walkStack(this.bin, stack, start, this.maxPhysical, this.walk);
    this.printer.goroutine(w, rec, this.walk, stack);
    return this.walk.error === undefined ? WALKED : { running: false, walkError: this.walk.error };
  }

  private mId(m: number): number | null {
    let id = this.mIds.get(m);
    if (id === undefined) {
      try {
        id = u64(this.mem.read(m + this.layout.mId, 8), 0);
      } catch {
        id = null;
      }
      this.mIds.set(m, id);
    }
    return id;
  }

  /** A g that moved while its batch was read: read and printed alone until it holds still. */
  private redo(i: number, addr: number): void {
    const l = this.layout;
    const w = this.one;
    let g: DataView;
    try {
      g = viewOf(this.mem.read(addr, l.size));
    } catch (err) {
      if (!(err instanceof UnreadableAddressError)) throw err;
      this.unreadable(i, addr);
      return;
    }
    for (let tries = 1; ; tries++) {
      const st = g.getUint32(l.atomicstatus, true) & ~G_STATUS.scan;
      if (st === G_STATUS.dead) return;
      w.reset();
      // No window: the walk reads the stack itself.
      const o = this.printG(w, addr, g, 0, st === G_STATUS.running ? null : this.noWindow, 0, 0);
      const again = viewOf(this.mem.read(addr, l.size));
      // The same schedule before and after is not proof that the goroutine did not run: a
      // poller wakes, loops and parks again at the very same sp and pc, rewriting its frames
      // meanwhile, and a walk over them half-rewritten stops early ("unexpected return pc").
      // So a walk that stopped early is tried again; one that stops every time is kept.
      if (sameSchedule(l, g, 0, again, 0) && (o.walkError === undefined || tries >= CONFIRM_TRIES)) {
        this.keep(w.buf.subarray(0, w.pos), o);
        return;
      }
      if ((again.getUint32(l.atomicstatus, true) & ~G_STATUS.scan) === G_STATUS.dead) return;
      if (tries >= CONFIRM_TRIES) {
        this.unsettled++;
        this.complete = false;
        this.keep(w.buf.subarray(0, w.pos), o);
        return;
      }
      g = again;
    }
  }

  private unreadable(i: number, addr: number): void {
    this.notes.push(`allgs[${i}] = ${hex(addr)}: ${new UnreadableAddressError(addr, this.layout.size).message}`);
    this.complete = false;
  }

  /** Adds a printed goroutine to the text, unless a bound is reached (then the read stops). */
  private keep(text: Buffer, o: Outcome): void {
    if (this.count >= this.maxGoroutines) {
      this.notes.push(`cut at ${this.maxGoroutines} goroutines (of ${this.n} in allgs, dead ones included)`);
      return this.cut();
    }
    const sep = this.count > 0 ? 1 : 0;
    if (this.out.bytes + sep + text.length > this.maxBytes) {
      this.notes.push(`cut at ${this.maxBytes} bytes, after ${this.count} goroutines (of ${this.n} in allgs, dead ones included)`);
      return this.cut();
    }
    // Goroutines are separated by a blank line, as Go separates them.
    if (sep) this.out.append(NEWLINE);
    this.out.append(text);
    this.count++;
    if (o.running) this.onThread++;
    if (o.walkError !== undefined) {
      this.walkErrors++;
      this.complete = false;
      if (this.walkErrors <= 5) this.notes.push(`goroutine ${goidOf(text)}: stack walk stopped: ${o.walkError}`);
    }
  }

  private cut(): void {
    this.complete = false;
    this.stop = true;
  }

  /** The notes that sum the read up; the buffers that grew are kept. */
  finish(): void {
    this.buffers.stackScratch = this.stack.scratch;
    if (this.unsettled > 0) this.notes.push(`${this.unsettled} goroutine(s) kept running while read; their stacks may be inconsistent`);
    if (this.walkErrors > 5) this.notes.push(`${this.walkErrors - 5} more goroutine(s) whose walk stopped early`);
    if (this.onThread > 0) {
      this.notes.push(
        `${this.onThread} goroutine(s) running on a thread: their registers are not readable from outside, so no stack (as Go prints for other threads)`,
      );
    }
  }
}

const NEWLINE = Buffer.from('\n');

/** The N of "goroutine N …" at the start of a goroutine's text. */
function goidOf(text: Buffer): string {
  return /^goroutine (\d+)/.exec(text.toString('latin1', 0, 40))?.[1] ?? '?';
}
