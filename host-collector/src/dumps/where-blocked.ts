// The one line a stuck verdict adds from a goroutine dump: where the target is blocked, so
// the orchestrator's own logs carry the answer without anyone opening the dump. Pure.
//
// The most telling goroutine, by this rule (first that applies):
//   1. main: goroutine 1, when its stack is known. A Go daemon does its start-up on main
//      (envd's initialisers run there before it binds :49983), so a hang before the
//      listener is a wait on main's stack.
//   2. the longest wait: the application group (one with a non-stdlib frame) with the
//      largest waitMinutes, when Go printed one (only waits of a minute or more).
//   3. the largest application group: many goroutines parked at one place (a poll storm).
// Nothing applies (no application frames at all): null, and the verdict stays as it was.
// Go's runtime records wait times only to the minute (waitsince is set at a GC), so a shorter
// wait is not invented: the verdict's "last phase … ago" already says how long it has been.

import { isApplicationPackage, type GoroutineGroup } from './group.js';

export interface WhereBlocked {
  /** Which rule picked it. */
  rule: 'main' | 'longest-wait' | 'largest-group';
  /** The frame named (the group's blockedIn). */
  func: string;
  state: string;
  count: number;
  waitMinutes?: number;
  /** e.g. 'main goroutine blocked in main.(*cgroupManager).acquireRoot (sync.Mutex.Lock)'. */
  text: string;
}

export function whereBlocked(groups: readonly GoroutineGroup[]): WhereBlocked | null {
  const known = groups.filter((g) => g.blockedIn && !g.stackUnavailable);
  const main = known.find((g) => g.ids[0] === 1);
  if (main) return describe('main', main);
  const app = known.filter((g) => g.application);
  const waiting = app.filter((g) => (g.waitMinutes ?? 0) > 0);
  if (waiting.length > 0)
    return describe(
      'longest-wait',
      waiting.reduce((a, b) => ((b.waitMinutes ?? 0) > (a.waitMinutes ?? 0) ? b : a)),
    );
  if (app.length > 0)
    return describe(
      'largest-group',
      app.reduce((a, b) => (b.count > a.count ? b : a)),
    );
  return null;
}

function describe(rule: WhereBlocked['rule'], g: GoroutineGroup): WhereBlocked {
  const f = g.blockedIn!;
  const wait = g.waitMinutes ? `, ${g.waitMinutes} minute${g.waitMinutes === 1 ? '' : 's'}` : '';
  const who = rule === 'main' ? 'main goroutine' : `${g.count} goroutine${g.count === 1 ? '' : 's'}`;
  const why = rule === 'longest-wait' ? ', the longest wait' : rule === 'largest-group' ? ', the largest group' : '';
  const creator = rule !== 'main' && g.createdBy && isApplicationPackage(g.createdBy.pkg) ? `, created by ${g.createdBy.func}` : '';
  return {
    rule,
    func: f.func,
    state: g.state,
    count: g.count,
    ...(g.waitMinutes ? { waitMinutes: g.waitMinutes } : {}),
    text: `${who} blocked in ${f.func} (${g.state}${wait})${why}${creator}`,
  };
}
