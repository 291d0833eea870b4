// Go's traceback text for goroutines read from outside, in the style the target's own
// runtime prints on SIGQUIT with GOTRACEBACK=all (a crash raises the level to "system":
// every goroutine, runtime frames, fp/sp/pc; runtime/traceback.go goroutineheader,
// traceback1, printcreatedby):
//
//   goroutine 7 gp=0xc000007a40 m=nil [chan receive, 3 minutes]:     1.22+ (gp=, m=/mp=)
//   goroutine 7 [chan receive, 3 minutes]:                           before 1.22
//   main.worker(0xc000104000, {0x6c3198?, 0x6})
//   	/src/main.go:42 +0x1d fp=0xc00004ff80 sp=0xc00004ff50 pc=0x4a1b3d
//   main.helper(...)                                                  inlined: no offset/registers
//   	/src/main.go:30
//   created by main.main in goroutine 1                                1.21+ names the creator
//   	/src/main.go:12 +0x66
//
// Deep stacks: 1.21+ prints the innermost 50 and outermost 50 logical frames with
// "...N frames elided..." between; older versions 100 physical frames, then
// "...additional frames elided...".
//
// Goroutines share a few stacks (10,000 idle workers: one), so everything that depends on the
// pc alone is encoded once per pc (the function name, file:line, offset and pc of each of its
// source frames, the argument layout) and once per creator and per header state; per
// goroutine only its numbers are written (goid, addresses, argument words, fp and sp).

import { type ArgProgram, compileArgs, writeArgs } from './args.js';
import type { GoBinary, PcInfo } from './binary.js';
import type { GLayout } from './layout.js';
import { G_STATUS, G_STATUS_STRINGS } from './layout.js';
import { printedFuncName } from './pclntab.js';
import { hex } from './space.js';
import type { StackReader } from './stack.js';
import { type ByteWriter, utf8 } from './text.js';
import type { Walk } from './unwind.js';
import { waitReasonString } from './waitreasons.js';

/** One goroutine's header fields, as read from its g. */
export interface GoroutineRecord {
  addr: number;
  goid: number;
  /** atomicstatus as read (with the _Gscan bit). */
  status: number;
  waitreason: number;
  waitsince: number;
  m: number;
  /** m.id, when m is not nil and it read. */
  mId: number | null;
  lockedm: number;
  /** The pc of the `go` statement that created it. */
  gopc: number;
  /** The creator's goid (1.21+), 0 when not known. */
  parentGoid: number;
}

const STACK_UNAVAILABLE = utf8('\tgoroutine running on other thread; stack unavailable\n');

/** Header state text (status or wait reason), as goroutineheader builds it. */
export function stateText(minor: number, r: GoroutineRecord, minutes: number): string {
  const st = r.status & ~G_STATUS.scan;
  let s = G_STATUS_STRINGS[st] ?? '???';
  if (st === G_STATUS.waiting && r.waitreason !== 0) s = waitReasonString(minor, r.waitreason);
  if (r.status & G_STATUS.scan) s += ' (scan)';
  if (minutes >= 1) s += `, ${minutes} minutes`;
  if (r.lockedm !== 0) s += ', locked to thread';
  return s;
}

/** A source frame's text around what varies per goroutine. */
type PrintedFrame =
  /** An inlined call: "name(...)\n\tfile:line\n", all of it. */
  | { inlined: true; text: Buffer }
  /** The physical frame: head, arguments, mid, fp, " sp=", sp, tail. */
  | { inlined: false; head: Buffer; mid: Buffer; tail: Buffer };

interface PrintedPc {
  frames: PrintedFrame[];
  args: ArgProgram;
}

interface PrintedCreator {
  /** "created by name" */
  head: Buffer;
  /** "\n\tfile:line +0x…\n" */
  tail: Buffer;
}

const INNER = 50;
const OUTER = 50;
const OLD_MAX_PHYSICAL = 100;

/** Prints goroutines of one dump; holds the per-pc, per-creator and per-state texts. */
export class Printer {
  private readonly minor: number;
  private readonly usesLR: boolean;
  private readonly pcs = new Map<PcInfo, PrintedPc>();
  private readonly creators = new Map<number, PrintedCreator | null>();
  private readonly states = new Map<number, Buffer>();

  /** @param nowNs Go's nanotime() now (CLOCK_MONOTONIC ns), for the wait minutes. */
  constructor(
    private readonly bin: GoBinary,
    layout: GLayout,
    private readonly nowNs: number,
  ) {
    this.minor = layout.minor;
    this.usesLR = bin.arch === 'arm64';
  }

  /** One goroutine, ending in "\n"; `walk` null for a running one (no stack from outside). */
  goroutine(w: ByteWriter, r: GoroutineRecord, walk: Walk | null, stack: StackReader): void {
    w.ascii('goroutine ');
    w.dec(r.goid);
    if (this.minor >= 22) {
      w.ascii(' gp=');
      w.hex(r.addr);
      if (r.m === 0) w.ascii(' m=nil');
      else {
        w.ascii(' m=');
        if (r.mId === null) w.ascii('?');
        else w.dec(r.mId);
        w.ascii(' mp=');
        w.hex(r.m);
      }
    }
    w.ascii(' [');
    w.bytes(this.state(r));
    w.ascii(']:\n');
    if (!walk) w.bytes(STACK_UNAVAILABLE);
    else this.frames(w, walk, stack);
    if (r.goid !== 1) {
      const c = this.creator(r.gopc);
      if (c) {
        w.bytes(c.head);
        if (this.minor >= 21 && r.parentGoid !== 0) {
          w.ascii(' in goroutine ');
          w.dec(r.parentGoid);
        }
        w.bytes(c.tail);
      }
    }
  }

  private state(r: GoroutineRecord): Buffer {
    const st = r.status & ~G_STATUS.scan;
    let minutes = 0;
    if ((st === G_STATUS.waiting || st === G_STATUS.syscall) && r.waitsince !== 0) {
      minutes = Math.max(0, Math.floor((this.nowNs - r.waitsince) / 60e9));
    }
    const key = ((Math.min(minutes, 2 ** 27) * 2 + (r.lockedm !== 0 ? 1 : 0)) * 256 + (r.waitreason & 255)) * 65536 + (r.status & 0xffff);
    let b = this.states.get(key);
    if (!b) {
      b = utf8(stateText(this.minor, r, minutes));
      this.states.set(key, b);
    }
    return b;
  }

  private frames(w: ByteWriter, walk: Walk, stack: StackReader): void {
    if (this.minor >= 21) {
      if (walk.logical <= INNER + OUTER && !walk.cut) this.range(w, walk, stack, 0, walk.logical);
      else {
        this.range(w, walk, stack, 0, INNER);
        if (walk.cut) w.ascii('...additional frames elided...\n');
        else {
          w.ascii('...');
          w.dec(walk.logical - INNER - OUTER);
          w.ascii(' frames elided...\n');
          this.range(w, walk, stack, walk.logical - OUTER, walk.logical);
        }
      }
    } else {
      this.range(w, walk, stack, 0, walk.logical);
      if (walk.physical >= OLD_MAX_PHYSICAL) w.ascii('...additional frames elided...\n');
    }
  }

  /** Logical frames [from, to) of the walk. */
  private range(w: ByteWriter, walk: Walk, stack: StackReader, from: number, to: number): void {
    let l = 0;
    for (let j = 0; j < walk.physical && l < to; j++) {
      const info = walk.infos[j]!;
      const n = info.frames.length;
      if (l + n <= from) {
        l += n;
        continue;
      }
      const p = this.printed(info);
      for (let k = 0; k < n; k++, l++) {
        if (l < from || l >= to) continue;
        const f = p.frames[k]!;
        if (f.inlined) {
          w.bytes(f.text);
          continue;
        }
        w.bytes(f.head);
        writeArgs(w, p.args, stack, walk.fps, j, this.usesLR ? 8 : 0);
        w.bytes(f.mid);
        w.hexAt(walk.fps, j);
        w.ascii(' sp=');
        w.hexAt(walk.sps, j);
        w.bytes(f.tail);
      }
    }
  }

  private printed(info: PcInfo): PrintedPc {
    let p = this.pcs.get(info);
    if (p) return p;
    const f = info.f;
    const frames: PrintedFrame[] = info.frames.map((s) => {
      const name = printedFuncName(s.name);
      if (s.inlined) return { inlined: true, text: utf8(`${name}(...)\n\t${s.file}:${s.line}\n`) };
      const offset = info.pc > f.entry ? ` +${hex(info.pc - f.entry)}` : '';
      return {
        inlined: false,
        head: utf8(`${name}(`),
        mid: utf8(`)\n\t${s.file}:${s.line}${offset} fp=`),
        tail: utf8(` pc=${hex(info.pc)}\n`),
      };
    });
    // Go 1.21+ looks up argument liveness at the call; 1.20 and older at the pc left after
    // walking out of the inlined calls (gentraceback reused its tracepc).
    const outer = info.frames[info.frames.length - 1]!;
    p = { frames, args: compileArgs(this.bin, f, this.minor >= 21 ? info.symPC : outer.pc) };
    this.pcs.set(info, p);
    return p;
  }

  /** printcreatedby: the function holding gopc, its line at the CALL (gopc - quantum). */
  private creator(gopc: number): PrintedCreator | null {
    let c = this.creators.get(gopc);
    if (c !== undefined) return c;
    const bin = this.bin;
    const f = bin.findFunc(gopc);
    c = null;
    if (f) {
      const tracepc = gopc > f.entry ? gopc - bin.pclntab.quantum : gopc;
      const { file, line } = bin.pclntab.fileLine(f, tracepc);
      const offset = gopc > f.entry ? ` +${hex(gopc - f.entry)}` : '';
      c = { head: utf8(`created by ${printedFuncName(bin.funcName(f))}`), tail: utf8(`\n\t${file}:${line}${offset}\n`) };
    }
    this.creators.set(gopc, c);
    return c;
  }
}
