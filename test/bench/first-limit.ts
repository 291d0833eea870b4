// Which limit a collector reaches first as its fleet grows, from figures measured at one or
// more fleet sizes. Every cost here grows with the sessions (two descriptors each, memory
// each, main-thread time each), so each limit's fleet size is extrapolated linearly from
// what was measured, and the smallest is the first. Pure: figures in, verdict out.

export type LimitName = 'file descriptors' | 'event loop' | 'SQLite' | 'memory';

export interface RunFigures {
  /** Sessions connected during the measured window. */
  sessions: number;
  /** The collector's main thread: % of the window busy (the profile), or its CPU % if unprofiled. */
  busyPct: number;
  /** Event-loop delay p99 over the window (ms), when measured. */
  loopP99Ms?: number;
}

export interface LimitFigures {
  /** The fleet asked for. */
  requested: number;
  /** The largest run: its sessions, descriptors and memory. */
  sessions: number;
  fds: { limit: number; atStart: number; atEnd: number };
  rssMiB: { atStart: number; atEnd: number };
  memAvailableMiB: number;
  /** Every run measured (the largest too): the event loop's estimate is the lowest of them. */
  runs: RunFigures[];
  /** Share (% of busy time) of the SQLite writer in the largest run's profile. */
  sqlitePct: number;
}

export interface LimitVerdict {
  name: LimitName;
  /** The fleet size at which it is reached (estimated), and whether `requested` reaches it. */
  atSessions: number;
  reached: boolean;
  /** Every limit with its estimate, first first. */
  candidates: Array<{ name: Exclude<LimitName, 'SQLite'>; atSessions: number }>;
}

/** A loop this late (p99) is behind already: the run's fleet is at or past its limit. */
export const LOOP_BEHIND_MS = 100;
/** The event loop is named SQLite when the writer takes at least this share of it. */
export const SQLITE_DOMINANT_PCT = 50;

export function firstLimit(f: LimitFigures): LimitVerdict {
  const perFd = (f.fds.atEnd - f.fds.atStart) / Math.max(1, f.sessions);
  const perMiB = (f.rssMiB.atEnd - f.rssMiB.atStart) / Math.max(1, f.sessions);
  const fdAt = perFd > 0 ? f.sessions + Math.max(0, f.fds.limit - f.fds.atEnd) / perFd : Number.POSITIVE_INFINITY;
  const memAt = perMiB > 0 ? f.sessions + Math.max(0, f.memAvailableMiB) / perMiB : Number.POSITIVE_INFINITY;
  const loopAt = Math.min(
    ...f.runs.map((r) => {
      const at = (r.sessions * 100) / Math.max(1, r.busyPct);
      return r.loopP99Ms !== undefined && r.loopP99Ms >= LOOP_BEHIND_MS ? Math.min(at, r.sessions) : at;
    }),
  );
  const candidates = (
    [
      { name: 'file descriptors', atSessions: Math.floor(fdAt) },
      { name: 'event loop', atSessions: Math.floor(loopAt) },
      { name: 'memory', atSessions: Math.floor(memAt) },
    ] as LimitVerdict['candidates']
  ).sort((a, b) => a.atSessions - b.atSessions);
  const first = candidates[0]!;
  const name: LimitName = first.name === 'event loop' && f.sqlitePct >= SQLITE_DOMINANT_PCT ? 'SQLite' : first.name;
  return { name, atSessions: first.atSessions, reached: first.atSessions <= f.requested, candidates };
}
