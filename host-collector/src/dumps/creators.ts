// Goroutines grouped by creator: the `go` statement that started them ("created by F" and its
// file:line), whatever their stacks and states now. Pure.
//
// Grouped by stack (group.ts), a storm of 200 identical pollers reads as one group only if
// every poller is caught at the same instruction; a dump taken while some are dialling, some
// reading and some waiting for the next tick splits them into as many groups, and the storm
// reads as a handful of unrelated rows. They all come from the same `go` statement, so by
// creator they stay one row, with the states and the blocked-in frames they were caught in.
//
// Identity: created-by func+file+line (the creating goroutine's id is ignored, kept only
// when all members agree). Goroutines with no "created by" (the main goroutine, or a dump
// without it) form one group without a creator.
//
// Interest order: creators in application code first (the creator's package, else any
// member's stack, see isApplicationPackage), then the larger count, then the longest wait,
// then the smallest goroutine id.

import type { CreatedBy, Frame, Goroutine } from './goroutines.js';
import { blockedInFrame, flaggedState, type GoroutinesIn, isApplicationPackage, keyedOf, MAX_GROUP_IDS, where } from './group.js';

/** How many of a creator's blocked-in frames are listed. */
export const MAX_CREATOR_FRAMES = 3;

export interface StateCount {
  /** The state as printed, with its flags: "IO wait", "chan receive (leaked)". */
  state: string;
  count: number;
}

export interface FrameCount extends Frame {
  count: number;
}

export interface CreatorGroup {
  /** The creator; absent for the goroutines that had none (the main goroutine). */
  createdBy?: CreatedBy;
  count: number;
  /** The first (lowest) MAX_GROUP_IDS goroutine ids, ascending. */
  ids: number[];
  /** How the members are spread over states, the most common first. */
  states: StateCount[];
  /** The frames the members are blocked in (group.ts's rule), the most common first, at most MAX_CREATOR_FRAMES. */
  blockedIn: FrameCount[];
  /** How many distinct stack groups (group.ts) the members fall into. */
  stackGroups: number;
  /** Longest wait among the members, in minutes; absent when none printed one. */
  waitMinutes?: number;
  /** The creator, or some member's stack, is application code. */
  application: boolean;
  /** Members whose header was not understood. */
  unparsed?: number;
}

interface Acc {
  first: Goroutine;
  ids: number[];
  states: Map<string, number>;
  /** By the blocked-in frame's site number. */
  frames: Map<number, FrameCount>;
  stacks: Set<string>;
  waitMinutes?: number;
  application: boolean;
  creatorAgrees: boolean;
  unparsed: number;
}

function bump<K>(m: Map<K, number>, k: K): void {
  m.set(k, (m.get(k) ?? 0) + 1);
}

/** Groups the goroutines of a dump by creator, ordered by interest. */
export function groupByCreator(dump: GoroutinesIn): CreatorGroup[] {
  const { goroutines, sites, keys } = keyedOf(dump);
  // By the creator's site number; 0: no creator.
  const byKey = new Map<number, Acc>();
  for (let i = 0; i < goroutines.length; i++) {
    const g = goroutines[i]!;
    const key = g.createdBy ? sites.of(g.createdBy) : 0;
    let acc = byKey.get(key);
    if (!acc) {
      acc = {
        first: g,
        ids: [],
        states: new Map(),
        frames: new Map(),
        stacks: new Set(),
        application: g.createdBy !== undefined && isApplicationPackage(g.createdBy.pkg),
        creatorAgrees: true,
        unparsed: 0,
      };
      byKey.set(key, acc);
    } else if (acc.first.createdBy?.goroutine !== g.createdBy?.goroutine) {
      acc.creatorAgrees = false;
    }
    acc.ids.push(g.id);
    bump(acc.states, flaggedState(g));
    acc.stacks.add(keys[i]!);
    if (g.waitMinutes !== undefined && (acc.waitMinutes === undefined || g.waitMinutes > acc.waitMinutes)) acc.waitMinutes = g.waitMinutes;
    if (!acc.application && g.frames.some((f) => isApplicationPackage(f.pkg))) acc.application = true;
    if (g.unparsed) acc.unparsed++;
    const b = blockedInFrame(g.frames);
    if (b) {
      const fk = sites.of(b);
      const seen = acc.frames.get(fk);
      if (seen) seen.count++;
      else acc.frames.set(fk, { func: b.func, pkg: b.pkg, file: b.file, line: b.line, count: 1 });
    }
  }

  const groups: CreatorGroup[] = [];
  for (const acc of byKey.values()) {
    const ids = acc.ids.slice().sort((a, b) => a - b);
    const group: CreatorGroup = {
      count: ids.length,
      ids: ids.slice(0, MAX_GROUP_IDS),
      states: [...acc.states].map(([state, count]) => ({ state, count })).sort((a, b) => b.count - a.count),
      blockedIn: [...acc.frames.values()].sort((a, b) => b.count - a.count).slice(0, MAX_CREATOR_FRAMES),
      stackGroups: acc.stacks.size,
      application: acc.application,
    };
    const c = acc.first.createdBy;
    if (c) {
      const createdBy: CreatedBy = { ...c };
      if (!acc.creatorAgrees) delete createdBy.goroutine;
      group.createdBy = createdBy;
    }
    if (acc.waitMinutes !== undefined) group.waitMinutes = acc.waitMinutes;
    if (acc.unparsed) group.unparsed = acc.unparsed;
    groups.push(group);
  }
  return groups.sort(
    (a, b) =>
      Number(b.application) - Number(a.application) ||
      b.count - a.count ||
      (b.waitMinutes ?? 0) - (a.waitMinutes ?? 0) ||
      (a.ids[0] ?? 0) - (b.ids[0] ?? 0),
  );
}

export interface SummarizeCreatorsOptions {
  /** Print at most this many creators, then one "… N more creators" line. Default: all. */
  limit?: number;
}

/** One line per creator: "COUNT  created by FUNC (file:line)  N stacks  STATES  blocked in F ×n, …". */
export function summarizeCreators(groups: readonly CreatorGroup[], options: SummarizeCreatorsOptions = {}): string {
  const limit = options.limit ?? groups.length;
  const shown = groups.slice(0, Math.max(0, limit));
  const rows = shown.map((g) => {
    const who = g.createdBy ? `created by ${where(g.createdBy)}` : 'no creator';
    const stacks = `${g.stackGroups} stack${g.stackGroups === 1 ? '' : 's'}`;
    const states = g.states.map((s) => `${s.count} ${s.state}`).join(', ');
    const times = (n: number) => (n === g.count ? '' : ` ×${n}`);
    const blocked = g.blockedIn.length ? `  blocked in ${g.blockedIn.map((f) => `${where(f)}${times(f.count)}`).join(', ')}` : '';
    return [String(g.count), who, stacks, states + blocked] as const;
  });
  const w0 = Math.max(0, ...rows.map((r) => r[0].length));
  const w1 = Math.max(0, ...rows.map((r) => r[1].length));
  const w2 = Math.max(0, ...rows.map((r) => r[2].length));
  const lines = rows.map((r) => `${r[0].padStart(w0)}  ${r[1].padEnd(w1)}  ${r[2].padEnd(w2)}  ${r[3]}`);
  const rest = groups.slice(shown.length);
  if (rest.length > 0) {
    const n = rest.reduce((s, g) => s + g.count, 0);
    lines.push(`… ${rest.length} more creator${rest.length === 1 ? '' : 's'} (${n} goroutine${n === 1 ? '' : 's'})`);
  }
  return lines.join('\n');
}
