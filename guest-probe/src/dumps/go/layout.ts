// Offsets of the runtime's g (and of m.id) per Go minor version, 64-bit (amd64 and arm64
// share them: every field before these is pointer-sized or packed the same way). Stripped
// binaries have no DWARF to read them from, so each row is a measured fact about real
// binaries of that version, named in `proof`:
//
//   - goid, gp (the g's address), state: matched against the same process's SIGQUIT dump
//     (goroutine header "goroutine N gp=0x… [state]") for every goroutine;
//   - gopc / startpc / parentGoid: the word equal to the "created by" function's entry plus
//     its printed +0x offset, to the entry of the frame under runtime.goexit, and to the
//     "in goroutine N" number, the same offset for every goroutine of the dump;
//   - lockedm: the store `gp.lockedm = gp.m` (MOV reg, disp(R14)) that lockOSThread,
//     inlined into runtime.main, does (guest-probe/test/go-static.test.ts decodes it again);
//   - m.id: the word equal to N in the m of a goroutine printed "m=N mp=0x…".
//
// arm64: the same rows, proven live on the arm64 esbuild builds of 1.20, 1.22, 1.23, 1.25 and
// 1.26 under qemu-user (test/integration/go-live.test.ts) and, for lockedm, statically on
// every arm64 build (the store through R28).
//
// What moved: 1.21 dropped trace fields before lockedm and added parentGoid; 1.23 added
// syscallbp (everything after syscallpc +8); 1.25 removed gobuf.ret (-8 from sched.lr on);
// 1.26 added a word between goid and parentGoid, and one between lockedm and gopc.

export interface GLayout {
  minor: number;
  /** Bytes of the g read per goroutine (covers every field below). */
  size: number;
  stackLo: number;
  stackHi: number;
  m: number;
  schedSp: number;
  schedPc: number;
  schedLr: number;
  schedBp: number;
  syscallsp: number;
  syscallpc: number;
  /** -1: no such field (before 1.23). */
  syscallbp: number;
  atomicstatus: number;
  goid: number;
  waitsince: number;
  waitreason: number;
  lockedm: number;
  /** -1 before 1.21 (the creator's goid is not kept). */
  parentGoid: number;
  gopc: number;
  startpc: number;
  /** Offset of id in the runtime's m. */
  mId: number;
  proof: string;
}

/** Go 1.19 and 1.20: the g of runtime2.go in 1.19 (gobuf sp pc g ctxt ret lr bp). */
const BASE_119 = {
  size: 320,
  stackLo: 0,
  stackHi: 8,
  m: 48,
  schedSp: 56,
  schedPc: 64,
  schedLr: 96,
  schedBp: 104,
  syscallsp: 112,
  syscallpc: 120,
  syscallbp: -1,
  atomicstatus: 144,
  goid: 152,
  waitsince: 168,
  waitreason: 176,
  lockedm: 232,
  parentGoid: -1,
  gopc: 296,
  startpc: 312,
  mId: 232,
};

const BASE_121 = { ...BASE_119, size: 304, lockedm: 208, parentGoid: 272, gopc: 280, startpc: 296 };
const BASE_123 = {
  ...BASE_121,
  size: 312,
  syscallsp: 112,
  syscallpc: 120,
  syscallbp: 128,
  atomicstatus: 152,
  goid: 160,
  waitsince: 176,
  waitreason: 184,
  lockedm: 216,
  parentGoid: 280,
  gopc: 288,
  startpc: 304,
};
const BASE_125 = {
  ...BASE_123,
  size: 304,
  schedLr: 88,
  schedBp: 96,
  syscallsp: 104,
  syscallpc: 112,
  syscallbp: 120,
  atomicstatus: 144,
  goid: 152,
  waitsince: 168,
  waitreason: 176,
  lockedm: 208,
  parentGoid: 272,
  gopc: 280,
  startpc: 296,
  mId: 224,
};

export const LAYOUTS: Readonly<Record<number, GLayout>> = {
  19: { minor: 19, ...BASE_119, proof: 'fake envd built here with Debian go1.19.8: DWARF of the unstripped build, and its SIGQUIT dump' },
  20: { minor: 20, ...BASE_119, proof: 'esbuild 0.17.19 (go1.20.4) and 0.21.5 (go1.20.12), amd64, live against SIGQUIT' },
  21: { minor: 21, ...BASE_121, proof: 'buf 1.28.1 protoc-gen-buf-lint (go1.21.4), amd64, live against SIGQUIT' },
  22: { minor: 22, ...BASE_121, proof: 'esbuild 0.23.1 (go1.22.5), amd64, live against SIGQUIT' },
  23: { minor: 23, ...BASE_123, proof: 'esbuild 0.24.2 (go1.23.1) and 0.25.12 (go1.23.12), amd64, live against SIGQUIT' },
  24: { minor: 24, ...BASE_123, proof: 'buf 1.55.1 protoc-gen-buf-lint (go1.24.4), amd64, live against SIGQUIT' },
  25: { minor: 25, ...BASE_125, proof: 'esbuild 0.27.7 (go1.25.7), amd64, live against SIGQUIT' },
  26: {
    minor: 26,
    ...BASE_125,
    size: 312,
    parentGoid: 280,
    gopc: 288,
    startpc: 304,
    mId: 232,
    proof: 'esbuild 0.28.2 (go1.26.5), amd64, live against SIGQUIT',
  },
};

export class UnsupportedGoVersionError extends Error {}

export function layoutFor(minor: number, versionText: string): GLayout {
  const l = LAYOUTS[minor];
  if (!l) {
    const known = Object.keys(LAYOUTS).map((k) => `1.${k}`);
    throw new UnsupportedGoVersionError(
      `${versionText}: no proven g layout for Go 1.${minor} (proven: ${known.join(', ')}); ` +
        'add a row to guest-probe/src/dumps/go/layout.ts, measured on a real binary of that version',
    );
  }
  return l;
}

/** Goroutine states (runtime2.go); _Gscan is a bit over them. */
export const G_STATUS = {
  idle: 0,
  runnable: 1,
  running: 2,
  syscall: 3,
  waiting: 4,
  dead: 6,
  copystack: 8,
  preempted: 9,
  scan: 0x1000,
} as const;

/** gStatusStrings. */
export const G_STATUS_STRINGS: readonly string[] = [
  'idle',
  'runnable',
  'running',
  'syscall',
  'waiting',
  '???',
  'dead',
  '???',
  'copystack',
  'preempted',
];
