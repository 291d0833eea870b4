// Walks one goroutine's stack the way the runtime's unwinder does (runtime/traceback.go),
// with the pclntab's SP-delta table rather than frame pointers, so frames without one are
// walked too:
//
//   fp = sp + pcsp(pc) (+8 on amd64 for the return address the CALL pushed)
//   amd64: the caller's pc is at fp-8;  arm64: at 0(sp) (LR saved by the prologue) unless the
//   innermost function has not saved it yet (sp == fp: then it is the gobuf's lr)
//   the caller's sp is fp; stop at a function flagged TOPFRAME (runtime.goexit, mstart, …),
//   at an SPWRITE function (its SP cannot be unwound), or when lr is 0.
//
// Each physical frame is symbolised at its call instruction (pc-1, unless the frame was
// entered by an injected call: sigpanic, asyncPreempt, debugCallV2), expanding inlined
// calls (GoBinary.pcInfo, cached per pc); format.ts prints the frames and their arguments.

import type { GoBinary, PcInfo } from './binary.js';
import { FuncFlagSPWrite, FuncFlagTopFrame } from './pclntab.js';
import { hex } from './space.js';
import type { StackReader } from './stack.js';

/**
 * The physical frames of one walk, innermost first: each frame's pc facts (its source
 * frames, inlined calls first) and its sp and fp. One Walk is reused for every goroutine of a
 * dump (reset keeps its storage), so a walk allocates nothing per frame: sp and fp, stack
 * addresses above 2^31, sit unboxed in Float64Arrays.
 */
export class Walk {
  /** Physical frames walked. */
  physical = 0;
  /** Source frames (inlined calls included) over all physical frames. */
  logical = 0;
  /** [0, physical) are this walk's. */
  readonly infos: PcInfo[] = [];
  sps = new Float64Array(64);
  fps = new Float64Array(64);
  /** The walk stopped at the bound (more frames exist). */
  cut = false;
  /** Why the walk stopped early, if it did not reach the top of the stack. */
  error: string | undefined;

  reset(): void {
    this.physical = 0;
    this.logical = 0;
    this.cut = false;
    this.error = undefined;
  }

  add(info: PcInfo, sp: number, fp: number): void {
    const n = this.physical;
    if (n === this.sps.length) this.grow();
    this.infos[n] = info;
    this.sps[n] = sp;
    this.fps[n] = fp;
    this.physical = n + 1;
    this.logical += info.frames.length;
  }

  private grow(): void {
    const sps = new Float64Array(this.sps.length * 2);
    const fps = new Float64Array(this.fps.length * 2);
    sps.set(this.sps);
    fps.set(this.fps);
    this.sps = sps;
    this.fps = fps;
  }
}

export interface WalkStart {
  pc: number;
  sp: number;
  /** arm64: the gobuf's lr (0 when the goroutine is in a syscall). */
  lr: number;
}

const INJECTED = new Set(['runtime.sigpanic', 'runtime.asyncPreempt', 'runtime.debugCallV2']);

/** Walks from `start` into `out` (reset first). */
export function walkStack(bin: GoBinary, stack: StackReader, start: WalkStart, maxPhysical: number, out: Walk): void {
  out.reset();
  const usesLR = bin.arch === 'arm64';
  let pc = start.pc;
  let sp = start.sp;
  let lr = usesLR ? start.lr : 0;
  let trap = false;
  try {
    if (pc === 0) {
      // A nil function call: start in the caller's frame.
      pc = stack.word(sp);
      if (usesLR) lr = 0;
      else sp += 8;
    }
    for (let innermost = true; ; innermost = false) {
      if (out.physical >= maxPhysical) {
        out.cut = true;
        return;
      }
      const info = bin.pcInfo(pc, trap);
      if (!info) {
        out.error = `unknown pc ${hex(pc)}`;
        return;
      }
      const f = info.f;
      if (info.spDelta < 0) {
        out.error = `no SP delta for ${info.name} at ${hex(pc)}`;
        return;
      }
      const fp = sp + info.spDelta + (usesLR ? 0 : 8);
      if (f.flag & FuncFlagTopFrame) lr = 0;
      else if (f.flag & FuncFlagSPWrite && !innermost) lr = 0;
      else if (usesLR) {
        if ((innermost && sp < fp) || lr === 0) lr = stack.word(sp);
      } else lr = stack.word(fp - 8);

      out.add(info, sp, fp);
      if (lr === 0) return;
      // The caller's pc facts, cached: the next round looks them up again for free.
      if (!bin.pcInfo(lr, false)) {
        out.error = `unexpected return pc for ${info.name} called from ${hex(lr)}`;
        return;
      }
      if (pc === lr && sp === fp) {
        out.error = `traceback stuck at pc ${hex(pc)} sp ${hex(sp)}`;
        return;
      }
      trap = INJECTED.has(info.name);
      pc = lr;
      sp = fp;
      lr = 0;
      if (usesLR && trap) {
        // The signal handler saved LR on the stack before faking the call.
        const x = stack.word(sp);
        sp += 16;
        const f2 = bin.findFunc(pc);
        if (!f2) pc = x;
        else if (bin.pclntab.spDelta(f2, pc) === 0) lr = x;
      }
    }
  } catch (err) {
    out.error = (err as Error).message;
  }
}
