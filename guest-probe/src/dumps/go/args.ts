// A frame's arguments as runtime.printArgs prints them, from FUNCDATA_ArgInfo: what to print
// depends only on the function and the pc (which words, their sizes, the braces and commas,
// and which are marked "?" for not known live), so it is worked out once per pc (compileArgs)
// and only the words themselves are read per goroutine (writeArgs).

import type { GoBinary } from './binary.js';
import { FUNCDATA_ArgInfo, FUNCDATA_ArgLiveInfo, type Func, PCDATA_ArgLiveIndex } from './pclntab.js';
import type { StackReader } from './stack.js';
import { type ByteWriter, utf8 } from './text.js';

// cmd/compile's argument-info encoding (internal/abi TraceArgs*).
const END_SEQ = 0xff;
const START_AGG = 0xfe;
const END_AGG = 0xfd;
const DOTDOTDOT = 0xfc;
const OFFSET_TOO_LARGE = 0xfb;
const MAX_ARGINFO = 161; // (maxDepth*3+2)*limit + 1

/** Text before a word ("", ", ", "{", "}, {", …), or after the last one (lit with off -1). */
interface ArgStep {
  lit: Buffer;
  /** The word's offset from argp, -1 for the trailing text. */
  off: number;
  /** Bytes of the word that are printed (1–8). */
  size: number;
  /** Not known live at this pc: printed with "?". */
  unsure: boolean;
}

export type ArgProgram = readonly ArgStep[];

const EMPTY: ArgProgram = [];

/** What printArgs prints for f at pc (the pc its liveness is looked up at), as steps. */
export function compileArgs(bin: GoBinary, f: Func, pc: number): ArgProgram {
  const off = bin.pclntab.funcdataOffset(f, FUNCDATA_ArgInfo);
  if (off === null) return EMPTY;
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
  const steps: ArgStep[] = [];
  let lit = '';
  let start = true;
  let slot = 0;
  const comma = () => {
    if (!start) lit += ', ';
  };
  for (let i = 0; i < p.length; ) {
    const o = p[i++] ?? END_SEQ;
    if (o === END_SEQ) break;
    if (o === START_AGG) {
      comma();
      lit += '{';
      start = true;
      continue;
    }
    if (o === END_AGG) lit += '}';
    else if (o === DOTDOTDOT) {
      comma();
      lit += '...';
    } else if (o === OFFSET_TOO_LARGE) {
      comma();
      lit += '_';
    } else {
      comma();
      const size = Math.min(8, p[i++] ?? 8);
      steps.push({ lit: utf8(lit), off: o, size, unsure: !isLive(o, slot) });
      lit = '';
      if (o >= startOffset) slot++;
    }
    start = false;
  }
  if (lit !== '' || steps.length > 0) steps.push({ lit: utf8(lit), off: -1, size: 0, unsure: false });
  return steps;
}

/**
 * Writes the arguments of a frame whose arguments start at fps[j] + extra (fp, and on arm64
 * past the saved LR). Given as an index, not an address: a double passed to a call that is
 * not inlined is boxed, once per frame of every goroutine.
 */
export function writeArgs(w: ByteWriter, prog: ArgProgram, stack: StackReader, fps: Float64Array, j: number, extra: number): void {
  if (prog.length === 0) return;
  const argp = fps[j]! + extra;
  for (let i = 0; i < prog.length; i++) {
    const s = prog[i]!;
    if (s.lit.length > 0) w.bytes(s.lit);
    if (s.off < 0) break;
    let lo = 0;
    let hi = 0;
    // Go reads past the frame without a check; from outside, a word off the stack is shown as 0.
    const at = stack.offset(argp + s.off, 8);
    if (at >= 0) {
      lo = stack.view.getInt32(at, true);
      hi = stack.view.getInt32(at + 4, true);
    }
    if (s.size < 8) {
      if (s.size <= 4) {
        hi = 0;
        if (s.size < 4) lo &= (1 << (s.size * 8)) - 1;
      } else hi &= (1 << ((s.size - 4) * 8)) - 1;
    }
    w.hex64(lo, hi);
    if (s.unsure) w.ascii('?');
  }
}
