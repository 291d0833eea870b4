// Dump diff: given two dumps of the same sandbox, which goroutines (or threads) did not
// move between them. Pure.
//
// Goroutines: an id present in both dumps whose stack (func+file+line sequence, innermost
// first; args, state and wait time ignored) is identical is "stuck"; the stuck goroutines
// are grouped as groupGoroutines does (taking their state and wait from the newer dump).
// An id present in both with a different stack "moved"; an id only in the older dump is
// "gone", only in the newer one "appeared". Goroutines without a stack in either dump
// (running on another thread) and goroutine 0 (the g0 of each M in crash dumps, not one
// goroutine) are neither stuck nor moved: counted as `unknown`.
//
// Ids are only meaningful within one process: two dumps from before and after a restart
// compare unrelated goroutines under the same ids. The caller knows the generations and
// pids; diffThreads checks the pids itself.

import type { Goroutine, GoroutineDump } from './goroutines.js';
import { framesKey, groupGoroutines, type GoroutineGroup } from './group.js';
import { groupThreads, taskPlaceKey, type ThreadGroup, type ThreadTask, type ThreadsDump } from './threads.js';

export interface DumpDiff {
  /** Goroutines in the same place in both dumps, grouped and ordered by interest. */
  stuck: GoroutineGroup[];
  /** Number of stuck goroutines (sum of the groups' counts). */
  stuckCount: number;
  /** In both dumps, different stack. */
  moved: number;
  /** In the older dump only. */
  gone: number;
  /** In the newer dump only. */
  appeared: number;
  /** In both dumps, but without a stack in one of them, or goroutine 0. */
  unknown: number;
  /**
   * False when an input was a list of groups whose members were not all listed (groups
   * made without { allIds: true } keep only 20 ids): the counts then cover listed ids only.
   */
  complete: boolean;
}

type GoroutineInput = GoroutineDump | readonly GoroutineGroup[];

interface Place {
  key: string;
  hasStack: boolean;
  /** The goroutine itself (dump input) or a representative built from its group. */
  goroutine: Goroutine;
}

function placesOf(input: GoroutineInput): { places: Map<number, Place>; complete: boolean } {
  const places = new Map<number, Place>();
  let complete = true;
  if (!Array.isArray(input)) {
    for (const g of (input as GoroutineDump).goroutines) {
      places.set(g.id, { key: framesKey(g.frames), hasStack: g.frames.length > 0, goroutine: g });
    }
    return { places, complete };
  }
  for (const group of input as readonly GoroutineGroup[]) {
    const ids = group.allIds ?? group.ids;
    if (ids.length < group.count) complete = false;
    const key = framesKey(group.frames);
    for (const id of ids) {
      const goroutine: Goroutine = {
        id,
        state: group.state,
        lockedToThread: group.lockedToThread,
        frames: group.frames,
        elided: group.elided,
      };
      if (group.waitMinutes !== undefined) goroutine.waitMinutes = group.waitMinutes;
      if (group.createdBy) goroutine.createdBy = group.createdBy;
      if (group.stackUnavailable) goroutine.stackUnavailable = true;
      if (group.leaked) goroutine.leaked = true;
      if (group.durable) goroutine.durable = true;
      if (group.unparsed) goroutine.unparsed = true;
      places.set(id, { key, hasStack: group.frames.length > 0, goroutine });
    }
  }
  return { places, complete };
}

/** The goroutines stuck in the same place across two dumps of one process (older first). */
export function diffDumps(older: GoroutineInput, newer: GoroutineInput): DumpDiff {
  const a = placesOf(older);
  const b = placesOf(newer);
  const stuck: Goroutine[] = [];
  let moved = 0;
  let gone = 0;
  let unknown = 0;
  for (const [id, before] of a.places) {
    const after = b.places.get(id);
    if (!after) {
      gone++;
      continue;
    }
    if (id === 0 || !before.hasStack || !after.hasStack) unknown++;
    else if (before.key === after.key) stuck.push(after.goroutine);
    else moved++;
  }
  let appeared = 0;
  for (const id of b.places.keys()) if (!a.places.has(id)) appeared++;
  const groups = groupGoroutines(stuck);
  return {
    stuck: groups,
    stuckCount: stuck.length,
    moved,
    gone,
    appeared,
    unknown,
    complete: a.complete && b.complete,
  };
}

export interface ThreadsDiff {
  /** Tasks with the same tid and identical (state, wchan, kernel stack symbols) in both dumps, grouped as groupThreads does. */
  stuck: ThreadGroup[];
  stuckCount: number;
  moved: number;
  gone: number;
  appeared: number;
  /** False when both dumps name a pid and the pids differ: the process restarted, nothing is compared (all older tasks count as gone). */
  samePid: boolean;
}

/** The threads stuck in the same place across two threads dumps of one process (older first). */
export function diffThreads(older: ThreadsDump, newer: ThreadsDump): ThreadsDiff {
  const samePid = !(Number.isFinite(older.pid) && Number.isFinite(newer.pid) && older.pid !== newer.pid);
  if (!samePid) {
    return { stuck: [], stuckCount: 0, moved: 0, gone: older.tasks.length, appeared: newer.tasks.length, samePid };
  }
  const after = new Map<number, ThreadTask>();
  for (const t of newer.tasks) after.set(t.tid, t);
  const before = new Set<number>();
  const stuck: ThreadTask[] = [];
  let moved = 0;
  let gone = 0;
  for (const t of older.tasks) {
    before.add(t.tid);
    const n = after.get(t.tid);
    if (!n) gone++;
    else if (taskPlaceKey(t) === taskPlaceKey(n)) stuck.push(n);
    else moved++;
  }
  let appeared = 0;
  for (const tid of after.keys()) if (!before.has(tid)) appeared++;
  return { stuck: groupThreads(stuck), stuckCount: stuck.length, moved, gone, appeared, samePid };
}
