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
// calls, and its arguments are printed from FUNCDATA_ArgInfo as printArgs does.

import type { GoBinary, PcInfo } from './binary.js';
import {
  FUNCDATA_ArgInfo,
  FUNCDATA_ArgLiveInfo,
  type Func,
  FuncFlagSPWrite,
  FuncFlagTopFrame,
  PCDATA_ArgLiveIndex,
  printedFuncName,
} from './pclntab.js';
import { hex } from './space.js';
import type { StackReader } from './stack.js';

export interface LogicalFrame {
  /** As Go prints it (generic shapes as [...], runtime.gopanic as panic). */
  name: string;
  /** As stored in the pclntab. */
  rawName: string;
  file: string;
  line: number;
  inlined: boolean;
  /** Text between the parentheses: "..." for inlined calls. */
  args: string;
  /** The physical frame's registers, and pc - entry when pc > entry (else null). */
  pc: number;
  sp: number;
  fp: number;
  offset: number | null;
}

export interface Walk {
  frames: LogicalFrame[];
  /** Physical frames walked. */
  physical: number;
  /** The walk stopped at the bound (more frames exist). */
  cut: boolean;
  /** Why the walk stopped early, if it did not reach the top of the stack. */
  error?: string;
}

export interface WalkStart {
  pc: number;
  sp: number;
  /** arm64: the gobuf's lr (0 when the goroutine is in a syscall). */
  lr: number;
}

const INJECTED = new Set(['runtime.sigpanic', 'runtime.asyncPreempt', 'runtime.debugCallV2']);

export function walkStack(bin: GoBinary, stack: StackReader, start: WalkStart, maxPhysical: number): Walk {
  const usesLR = bin.arch === 'arm64';
  const frames: LogicalFrame[] = [];
  let pc = start.pc;
  let sp = start.sp;
  let lr = usesLR ? start.lr : 0;
  let trap = false;
  let physical = 0;
  try {
    if (pc === 0) {
      // A nil function call: start in the caller's frame.
      pc = stack.word(sp);
      if (usesLR) lr = 0;
      else sp += 8;
    }
    for (let innermost = true; ; innermost = false) {
      if (physical >= maxPhysical) return { frames, physical, cut: true };
      const info = bin.pcInfo(pc, trap);
      if (!info) return { frames, physical, cut: false, error: `unknown pc ${hex(pc)}` };
      const f = info.f;
      if (info.spDelta < 0) return { frames, physical, cut: false, error: `no SP delta for ${info.name} at ${hex(pc)}` };
      const fp = sp + info.spDelta + (usesLR ? 0 : 8);
      if (f.flag & FuncFlagTopFrame) lr = 0;
      else if (f.flag & FuncFlagSPWrite && !innermost) lr = 0;
      else if (usesLR) {
        if ((innermost && sp < fp) || lr === 0) lr = stack.word(sp);
      } else lr = stack.word(fp - 8);

      pushLogical(bin, stack, info, pc, sp, fp, usesLR, frames);
      physical++;
      if (lr === 0) return { frames, physical, cut: false };
      if (!bin.findFunc(lr)) {
        return { frames, physical, cut: false, error: `unexpected return pc for ${info.name} called from ${hex(lr)}` };
      }
      if (pc === lr && sp === fp) return { frames, physical, cut: false, error: `traceback stuck at pc ${hex(pc)} sp ${hex(sp)}` };
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
    return { frames, physical, cut: false, error: (err as Error).message };
  }
}

function pushLogical(
  bin: GoBinary,
  stack: StackReader,
  info: PcInfo,
  pc: number,
  sp: number,
  fp: number,
  usesLR: boolean,
  out: LogicalFrame[],
): void {
  const f = info.f;
  for (const s of info.frames) {
    out.push({
      name: printedFuncName(s.name),
      rawName: s.name,
      file: s.file,
      line: s.line,
      inlined: s.inlined,
      // Go 1.21+ looks up argument liveness at the call; 1.20 and older at the pc left
      // after walking out of the inlined calls (gentraceback reused its tracepc).
      args: s.inlined ? '...' : printArgs(bin, stack, f, fp + (usesLR ? 8 : 0), bin.version.minor >= 21 ? info.symPC : s.pc),
      pc,
      sp,
      fp,
      offset: !s.inlined && pc > f.entry ? pc - f.entry : null,
    });
  }
}

// cmd/compile's argument-info encoding (internal/abi TraceArgs*).
const END_SEQ = 0xff;
const START_AGG = 0xfe;
const END_AGG = 0xfd;
const DOTDOTDOT = 0xfc;
const OFFSET_TOO_LARGE = 0xfb;
const MAX_ARGINFO = 161; // (maxDepth*3+2)*limit + 1

/** runtime.printArgs: the argument words from the frame's spill area, "?" where not known live. */
function printArgs(bin: GoBinary, stack: StackReader, f: Func, argp: number, pc: number): string {
  const off = bin.pclntab.funcdataOffset(f, FUNCDATA_ArgInfo);
  if (off === null) return '';
  const p = bin.readRodata(bin.moduledata.gofunc + off, MAX_ARGINFO);
  // Liveness of register-spilled arguments: byte 0 is the first offset that needs it, then
  // bitmaps at the offset PCDATA_ArgLiveIndex gives (one bit per spill slot).
  const liveOff = bin.pclntab.funcdataOffset(f, FUNCDATA_ArgLiveInfo);
  const liveBase = liveOff === null ? -1 : bin.moduledata.gofunc + liveOff;
  const liveIdx = liveBase >= 0 ? bin.pclntab.pcdata(f, PCDATA_ArgLiveIndex, pc) : -1;
  const startOffset = liveBase >= 0 ? (bin.readRodata(liveBase, 1)[0] ?? 0xff) : 0xff;
  const isLive = (o: number, slot: number): boolean => {
    if (liveBase < 0 || liveIdx <= 0 || o < startOffset) return true;
    const bits = bin.readRodata(liveBase + liveIdx + (slot >> 3), 1)[0] ?? 0xff;
    return (bits & (1 << (slot % 8))) !== 0;
  };
  let out = '';
  let start = true;
  let slot = 0;
  const comma = () => {
    if (!start) out += ', ';
  };
  for (let i = 0; i < p.length; ) {
    const o = p[i++] ?? END_SEQ;
    if (o === END_SEQ) break;
    if (o === START_AGG) {
      comma();
      out += '{';
      start = true;
      continue;
    }
    if (o === END_AGG) out += '}';
    else if (o === DOTDOTDOT) {
      comma();
      out += '...';
    } else if (o === OFFSET_TOO_LARGE) {
      comma();
      out += '_';
    } else {
      comma();
      const sz = p[i++] ?? 8;
      let x: bigint;
      try {
        x = stack.bigWord(argp + o);
      } catch {
        // Go reads past the frame without a check; from outside, a word off the stack is shown unknown.
        x = 0n;
      }
      if (sz < 8) x &= (1n << BigInt(sz * 8)) - 1n;
      out += `0x${x.toString(16)}`;
      if (!isLive(o, slot)) out += '?';
      if (o >= startOffset) slot++;
    }
    start = false;
  }
  return out;
}
