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

import type { GLayout } from './layout.js';
import { G_STATUS, G_STATUS_STRINGS } from './layout.js';
import { hex } from './space.js';
import type { LogicalFrame, Walk } from './unwind.js';
import { waitReasonString } from './waitreasons.js';

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
  /** null: a running goroutine (registers in its thread, stack not walkable from outside). */
  walk: Walk | null;
  createdBy: CreatedBy | null;
}

export interface CreatedBy {
  name: string;
  file: string;
  line: number;
  offset: number | null;
  /** The creator's goid (1.21+), 0 when not known. */
  goid: number;
}

export const STACK_UNAVAILABLE = '\tgoroutine running on other thread; stack unavailable';

/** Header state text (status or wait reason), as goroutineheader builds it. */
export function stateText(minor: number, r: GoroutineRecord, nowNs: bigint): string {
  const st = r.status & ~G_STATUS.scan;
  let s = G_STATUS_STRINGS[st] ?? '???';
  if (st === G_STATUS.waiting && r.waitreason !== 0) s = waitReasonString(minor, r.waitreason);
  if (r.status & G_STATUS.scan) s += ' (scan)';
  if ((st === G_STATUS.waiting || st === G_STATUS.syscall) && r.waitsince !== 0) {
    const minutes = (nowNs - BigInt(r.waitsince)) / 60_000_000_000n;
    if (minutes >= 1n) s += `, ${minutes} minutes`;
  }
  if (r.lockedm !== 0) s += ', locked to thread';
  return s;
}

export function formatGoroutine(layout: GLayout, r: GoroutineRecord, nowNs: bigint): string {
  const minor = layout.minor;
  let out = `goroutine ${r.goid}`;
  if (minor >= 22) {
    out += ` gp=${hex(r.addr)}`;
    out += r.m === 0 ? ' m=nil' : ` m=${r.mId ?? '?'} mp=${hex(r.m)}`;
  }
  out += ` [${stateText(minor, r, nowNs)}]:\n`;
  if (!r.walk) out += `${STACK_UNAVAILABLE}\n`;
  else out += frames(minor, r.walk);
  if (r.createdBy && r.goid !== 1) {
    const c = r.createdBy;
    out += `created by ${c.name}${minor >= 21 && c.goid !== 0 ? ` in goroutine ${c.goid}` : ''}\n`;
    out += `\t${c.file}:${c.line}${c.offset !== null ? ` +${hex(c.offset)}` : ''}\n`;
  }
  return out;
}

/** Goroutines are joined with a blank line between them, as Go separates them. */
function frameText(f: LogicalFrame): string {
  let s = `${f.name}(${f.args})\n\t${f.file}:${f.line}`;
  if (!f.inlined) {
    if (f.offset !== null) s += ` +${hex(f.offset)}`;
    s += ` fp=${hex(f.fp)} sp=${hex(f.sp)} pc=${hex(f.pc)}`;
  }
  return `${s}\n`;
}

const INNER = 50;
const OUTER = 50;
const OLD_MAX_PHYSICAL = 100;

function frames(minor: number, walk: Walk): string {
  let out = '';
  const fs = walk.frames;
  if (minor >= 21) {
    if (fs.length <= INNER + OUTER && !walk.cut) {
      for (const f of fs) out += frameText(f);
    } else {
      for (const f of fs.slice(0, INNER)) out += frameText(f);
      out += `...${walk.cut ? 'additional' : fs.length - INNER - OUTER} frames elided...\n`;
      if (!walk.cut) for (const f of fs.slice(-OUTER)) out += frameText(f);
    }
  } else {
    for (const f of fs) out += frameText(f);
    if (walk.physical >= OLD_MAX_PHYSICAL) out += '...additional frames elided...\n';
  }
  return out;
}
