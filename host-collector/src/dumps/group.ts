// Groups goroutines with identical stacks, as panicparse does by default, and orders
// the groups by interest. Pure.
//
// Identity ("same stack"): same state and state flags (leaked, durable), same
// lockedToThread, same elided flag, the same sequence of func+file+line, and the same
// created-by func+file+line; goroutines whose header was not understood (unparsed) group
// only among themselves. Arguments, the wait time, the goroutine id, the creating
// goroutine's id and the pprof labels are ignored (a group's frame keeps its args only where
// every member printed the same; waitMinutes is the maximum over the members;
// createdBy.goroutine only when all members agree).
//
// Labels do not split a group: they mostly carry per-request values (a request or trace id),
// and a group per value would scatter a thousand identical waiters into a thousand rows, the
// opposite of what grouping is for. A group lists its members' label sets instead, the most
// common first (labelSets). For the goroutines of one `go` statement whatever their stacks
// and states, see creators.ts.
//
// blockedIn — the frame a group is "stuck in" — is the innermost frame that is not Go
// runtime/stdlib plumbing. Plumbing is, in two tiers:
//   1. the runtime itself: packages runtime, runtime/…, internal/…, and "panic";
//   2. the blocking primitives built on it: sync, sync/atomic, syscall, time (time.Sleep).
// The first frame outside both tiers wins (main.(*cgroupManager).acquireRoot under
// sync.(*Mutex).Lock; net.(*netFD).Read under internal/poll; main.worker under
// time.Sleep). When the stack has nothing else, the first frame outside tier 1 (e.g.
// sync.(*WaitGroup).Wait), else the top frame. No frames (stack unavailable): undefined.
//
// Interest order: groups whose stack contains an application frame first (see
// isApplicationPackage), then the longest wait first (waitMinutes, absent = 0), then
// the larger count, then the smallest goroutine id.

import type { CreatedBy, Frame, Goroutine, GoroutineDump } from './goroutines.js';
import { copyLabels, formatLabels, labelSetKey, type Labels } from './labels.js';

export interface GoroutineGroup {
  /** How many goroutines share this stack. */
  count: number;
  /** The first (lowest) 20 goroutine ids, ascending. */
  ids: number[];
  /** All ids, ascending: only with groupGoroutines(dump, { allIds: true }) (diffDumps uses them). */
  allIds?: number[];
  state: string;
  /** Longest wait among the members, in minutes; absent when no member printed one. */
  waitMinutes?: number;
  lockedToThread: boolean;
  elided: boolean;
  /** The members' stacks were not printed ("running on other thread"). */
  stackUnavailable: boolean;
  /** Innermost first. */
  frames: Frame[];
  createdBy?: CreatedBy;
  /** The frame the group is blocked in (see the rule at the top of this file). */
  blockedIn?: Frame;
  /** The stack contains an application (non-stdlib) frame. */
  application: boolean;
  /** The members' state carried "(leaked)" (goroutine leak profile, Go 1.26+). */
  leaked?: true;
  /** The members' state carried "(durable)" (synctest). */
  durable?: true;
  /** The members' headers were not understood (state "?"); see the dump's unparsedHeaders. */
  unparsed?: true;
  /** Members that carried pprof labels; absent when none did. */
  labelled?: number;
  /** Their distinct label sets, the most common first, at most MAX_GROUP_LABEL_SETS. */
  labelSets?: LabelSetCount[];
  /** How many distinct label sets there were, when more than are listed. */
  labelSetsTotal?: number;
}

export interface LabelSetCount {
  labels: Labels;
  count: number;
}

export interface GroupOptions {
  /** Keep every member id in `allIds` (for diffDumps on groups). */
  allIds?: boolean;
}

export const MAX_GROUP_IDS = 20;
export const MAX_GROUP_LABEL_SETS = 5;

// Top-level directories of the Go standard library (plus "cmd" and "vendor", whose
// packages appear as "vendor/golang.org/x/net/…" in tracebacks).
// biome-ignore format: a word list, kept in alphabetical lines
const STDLIB_ROOTS = new Set([
  'archive', 'arena', 'bufio', 'builtin', 'bytes', 'cmd', 'cmp', 'compress', 'container', 'context',
  'crypto', 'database', 'debug', 'embed', 'encoding', 'errors', 'expvar', 'flag', 'fmt', 'go', 'hash',
  'html', 'image', 'index', 'internal', 'io', 'iter', 'log', 'maps', 'math', 'mime', 'net', 'os',
  'path', 'plugin', 'reflect', 'regexp', 'runtime', 'slices', 'sort', 'strconv', 'strings', 'structs',
  'sync', 'syscall', 'testing', 'text', 'time', 'unicode', 'unique', 'unsafe', 'vendor', 'weak',
]);

/**
 * True for application code: a package path whose first element contains a dot
 * ("github.com/…", "gopkg.in/…"), "main", or any first element that is not a standard
 * library root (module paths without a dot, such as "envd/internal/host"). Standard
 * library: "runtime", "net/http", "sync", "internal/poll", "vendor/golang.org/x/…".
 * An empty package (unparseable name) is not application code.
 */
export function isApplicationPackage(pkg: string): boolean {
  if (!pkg) return false;
  const first = pkg.split('/', 1)[0] ?? '';
  if (first.includes('.')) return true;
  return !STDLIB_ROOTS.has(first);
}

function isRuntimePlumbing(pkg: string): boolean {
  return pkg === 'runtime' || pkg.startsWith('runtime/') || pkg === 'internal' || pkg.startsWith('internal/');
}

function isBlockingPrimitive(pkg: string): boolean {
  return pkg === 'sync' || pkg === 'sync/atomic' || pkg === 'syscall' || pkg === 'time';
}

/** The frame a stack is blocked in; see the rule at the top of this file. */
export function blockedInFrame(frames: readonly Frame[]): Frame | undefined {
  for (const f of frames) if (!isRuntimePlumbing(f.pkg) && !isBlockingPrimitive(f.pkg)) return f;
  for (const f of frames) if (!isRuntimePlumbing(f.pkg)) return f;
  return frames[0];
}

/**
 * Numbers for the frames of a dump: each distinct site (func, file, line) and state gets one
 * the first time it is met, from 1. What the groupings key on: a key of a goroutine's stack
 * made of its sites' numbers is a few characters, where one spelling out every frame was
 * hundreds (10,000 goroutines: megabytes of strings built and hashed, twice, for the stack
 * and the creator groupings). The names of one parse are shared strings (goroutines.ts), whose
 * hashes V8 keeps, so a frame costs three map look-ups.
 */
export class Sites {
  private readonly byFunc = new Map<string, Map<string, Map<number, number>>>();
  private readonly states = new Map<string, number>();
  private next = 1;

  /** The number of a frame's site. */
  of(f: Pick<Frame, 'func' | 'file' | 'line'>): number {
    let byFile = this.byFunc.get(f.func);
    if (!byFile) this.byFunc.set(f.func, (byFile = new Map()));
    let byLine = byFile.get(f.file);
    if (!byLine) byFile.set(f.file, (byLine = new Map()));
    let n = byLine.get(f.line);
    if (n === undefined) byLine.set(f.line, (n = this.next++));
    return n;
  }

  /**
   * The identity of a goroutine's stack group (see the top of this file), as codes of fixed
   * meaning: the flags, the state's number, the creator's (0: none), then one per frame.
   */
  stackKey(g: Goroutine): string {
    const flags =
      (g.lockedToThread ? 1 : 0) |
      (g.elided ? 2 : 0) |
      (g.stackUnavailable ? 4 : 0) |
      (g.leaked ? 8 : 0) |
      (g.durable ? 16 : 0) |
      (g.unparsed ? 32 : 0);
    let state = this.states.get(g.state);
    if (state === undefined) this.states.set(g.state, (state = this.states.size + 1));
    let key = String.fromCharCode(flags) + code(state) + code(g.createdBy ? this.of(g.createdBy) : 0);
    for (const f of g.frames) key += code(this.of(f));
    return key;
  }
}

/** A number below 2^30 in one character (below 2^15) or two (the first with its top bit set): no code is the start of another. */
function code(n: number): string {
  return n < 0x8000 ? String.fromCharCode(n) : String.fromCharCode(0x8000 | (n >>> 15), n & 0x7fff);
}

/** The goroutines of a dump with their stack keys (Sites.stackKey), for groupings that share them. */
export interface KeyedGoroutines {
  goroutines: readonly Goroutine[];
  sites: Sites;
  /** keys[i]: the stack key of goroutines[i]. */
  keys: string[];
}

export function keyGoroutines(dump: GoroutineDump | readonly Goroutine[]): KeyedGoroutines {
  const goroutines = Array.isArray(dump) ? (dump as readonly Goroutine[]) : (dump as GoroutineDump).goroutines;
  const sites = new Sites();
  return { goroutines, sites, keys: goroutines.map((g) => sites.stackKey(g)) };
}

/** The goroutines of a dump, a list of them, or both with their keys. */
export type GoroutinesIn = GoroutineDump | readonly Goroutine[] | KeyedGoroutines;

export function keyedOf(dump: GoroutinesIn): KeyedGoroutines {
  return !Array.isArray(dump) && 'keys' in dump ? (dump as KeyedGoroutines) : keyGoroutines(dump as GoroutineDump | readonly Goroutine[]);
}

/** The identity of a goroutine's stack without its state (what diffDumps compares). */
export function framesKey(frames: readonly Frame[]): string {
  let key = '';
  for (const f of frames) key += `${f.func}\u0001${f.file}\u0001${f.line}\u0000`;
  return key;
}

interface Acc {
  first: Goroutine;
  ids: number[];
  frames: Frame[];
  waitMinutes?: number;
  creatorAgrees: boolean;
  labelled: number;
  /** Label set key → the set and how many members carried it. */
  labelSets?: Map<string, LabelSetCount>;
}

function countLabels(acc: Acc, labels: Labels | undefined): void {
  if (!labels) return;
  acc.labelled++;
  const key = labelSetKey(labels);
  const sets = (acc.labelSets ??= new Map());
  const seen = sets.get(key);
  if (seen) seen.count++;
  else sets.set(key, { labels: copyLabels(labels), count: 1 });
}

/** The most common label sets first (then in the order first seen), at most `max`. */
export function topLabelSets(sets: Map<string, LabelSetCount>, max = MAX_GROUP_LABEL_SETS): LabelSetCount[] {
  return [...sets.values()].sort((a, b) => b.count - a.count).slice(0, max);
}

/** Groups the goroutines of a dump by identical stack, ordered by interest. */
export function groupGoroutines(dump: GoroutinesIn, options: GroupOptions = {}): GoroutineGroup[] {
  const { goroutines, keys } = keyedOf(dump);
  const byKey = new Map<string, Acc>();
  for (let i = 0; i < goroutines.length; i++) {
    const g = goroutines[i]!;
    const key = keys[i]!;
    let acc = byKey.get(key);
    if (!acc) {
      acc = {
        first: g,
        ids: [],
        frames: g.frames.map((f) => ({ ...f })),
        creatorAgrees: true,
        labelled: 0,
      };
      if (g.waitMinutes !== undefined) acc.waitMinutes = g.waitMinutes;
      byKey.set(key, acc);
    } else {
      if (g.waitMinutes !== undefined && (acc.waitMinutes === undefined || g.waitMinutes > acc.waitMinutes)) {
        acc.waitMinutes = g.waitMinutes;
      }
      // Same key, so the same number of frames: keep args only where all members agree.
      for (let i = 0; i < acc.frames.length; i++) {
        const mine = acc.frames[i];
        const theirs = g.frames[i];
        if (mine && mine.args !== undefined && mine.args !== theirs?.args) delete mine.args;
      }
      if (acc.first.createdBy?.goroutine !== g.createdBy?.goroutine) acc.creatorAgrees = false;
    }
    acc.ids.push(g.id);
    countLabels(acc, g.labels);
  }

  const groups: GoroutineGroup[] = [];
  for (const acc of byKey.values()) {
    const g = acc.first;
    const ids = acc.ids.slice().sort((a, b) => a - b);
    const group: GoroutineGroup = {
      count: ids.length,
      ids: ids.slice(0, MAX_GROUP_IDS),
      state: g.state,
      lockedToThread: g.lockedToThread,
      elided: g.elided,
      stackUnavailable: g.stackUnavailable === true,
      frames: acc.frames,
      application: acc.frames.some((f) => isApplicationPackage(f.pkg)),
    };
    if (options.allIds) group.allIds = ids;
    if (acc.waitMinutes !== undefined) group.waitMinutes = acc.waitMinutes;
    if (g.createdBy) {
      const createdBy: CreatedBy = { ...g.createdBy };
      if (!acc.creatorAgrees) delete createdBy.goroutine;
      group.createdBy = createdBy;
    }
    const blockedIn = blockedInFrame(acc.frames);
    if (blockedIn) group.blockedIn = blockedIn;
    if (g.leaked) group.leaked = true;
    if (g.durable) group.durable = true;
    if (g.unparsed) group.unparsed = true;
    if (acc.labelSets) {
      group.labelled = acc.labelled;
      group.labelSets = topLabelSets(acc.labelSets);
      if (acc.labelSets.size > group.labelSets.length) group.labelSetsTotal = acc.labelSets.size;
    }
    groups.push(group);
  }
  return sortGroups(groups);
}

/** Sorts in place by interest (application first, longest wait, largest count, lowest id) and returns the array. */
export function sortGroups<T extends Pick<GoroutineGroup, 'application' | 'waitMinutes' | 'count' | 'ids'>>(groups: T[]): T[] {
  return groups.sort(
    (a, b) =>
      Number(b.application) - Number(a.application) ||
      (b.waitMinutes ?? 0) - (a.waitMinutes ?? 0) ||
      b.count - a.count ||
      (a.ids[0] ?? 0) - (b.ids[0] ?? 0),
  );
}

export interface SummarizeOptions {
  /** Print at most this many groups, then one "… N more groups" line. Default: all. */
  limit?: number;
}

function baseName(file: string): string {
  const i = Math.max(file.lastIndexOf('/'), file.lastIndexOf('\\'));
  return i >= 0 ? file.slice(i + 1) : file;
}

/** "FUNC (file.go:LINE)", or FUNC alone when the file is unknown. */
export function where(f: Pick<Frame, 'func' | 'file' | 'line'>): string {
  return f.file ? `${f.func} (${baseName(f.file)}:${f.line})` : f.func;
}

/** The state with its flags, as the header printed them: "chan receive (leaked)". */
export function flaggedState(g: Pick<GoroutineGroup, 'state' | 'leaked' | 'durable'>): string {
  return `${g.state}${g.leaked ? ' (leaked)' : ''}${g.durable ? ' (durable)' : ''}`;
}

/** The state as a terminal shows it: "chan receive (leaked), locked". */
function stateText(g: Pick<GoroutineGroup, 'state' | 'leaked' | 'durable' | 'lockedToThread'>): string {
  return `${flaggedState(g)}${g.lockedToThread ? ', locked' : ''}`;
}

/** "labels {k: v} ×3, +2 more sets": the most common label set of a group, for a terminal. */
function labelsText(g: GoroutineGroup): string {
  const top = g.labelSets?.[0];
  if (!top) return '';
  const sets = g.labelSetsTotal ?? g.labelSets!.length;
  const times = top.count === g.count ? '' : ` ×${top.count}`;
  const more = sets > 1 ? `, +${sets - 1} more set${sets === 2 ? '' : 's'}` : '';
  const bare = g.labelled! < g.count ? `, ${g.count - g.labelled!} without` : '';
  return `  labels ${formatLabels(top.labels)}${times}${more}${bare}`;
}

/** One line per group: "COUNT  STATE  WAIT  blocked in FUNC (file:line)", columns aligned. */
export function summarize(groups: readonly GoroutineGroup[], options: SummarizeOptions = {}): string {
  const limit = options.limit ?? groups.length;
  const shown = groups.slice(0, Math.max(0, limit));
  const rows = shown.map((g) => {
    const state = stateText(g);
    const wait = g.waitMinutes !== undefined ? `${g.waitMinutes}m` : '-';
    let what: string;
    if (g.blockedIn) what = `blocked in ${where(g.blockedIn)}`;
    else if (g.stackUnavailable) what = `running on another thread${g.createdBy ? `, created by ${where(g.createdBy)}` : ''}`;
    else what = 'no stack';
    if (g.unparsed) what += '  (header not understood)';
    return [String(g.count), state, wait, what + labelsText(g)] as const;
  });
  const w0 = Math.max(0, ...rows.map((r) => r[0].length));
  const w1 = Math.max(0, ...rows.map((r) => r[1].length));
  const w2 = Math.max(0, ...rows.map((r) => r[2].length));
  const lines = rows.map((r) => `${r[0].padStart(w0)}  ${r[1].padEnd(w1)}  ${r[2].padStart(w2)}  ${r[3]}`);
  const rest = groups.slice(shown.length);
  if (rest.length > 0) {
    const n = rest.reduce((s, g) => s + g.count, 0);
    lines.push(`… ${rest.length} more group${rest.length === 1 ? '' : 's'} (${n} goroutine${n === 1 ? '' : 's'})`);
  }
  return lines.join('\n');
}
