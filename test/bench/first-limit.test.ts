import { describe, expect, it } from 'vitest';
import { firstLimit, type LimitFigures } from './first-limit.js';

// A 10,000-session run on a collector allowed 20,000 descriptors, 2 per session.
const base: LimitFigures = {
  requested: 20_000,
  sessions: 10_000,
  fds: { limit: 20_000, atStart: 100, atEnd: 19_900 },
  rssMiB: { atStart: 60, atEnd: 460 },
  memAvailableMiB: 20_000,
  runs: [{ sessions: 10_000, busyPct: 40, loopP99Ms: 12 }],
  sqlitePct: 10,
};

describe('firstLimit', () => {
  it('names the descriptors when the fleet is cut at the fd limit and the loop has room', () => {
    const v = firstLimit(base);
    expect(v.name).toBe('file descriptors');
    expect(v.atSessions).toBe(10_050);
    expect(v.reached).toBe(true);
    expect(v.candidates.map((c) => c.name)).toEqual(['file descriptors', 'event loop', 'memory']);
    expect(v.candidates[1]!.atSessions).toBe(25_000);
  });

  it('names the event loop from the smaller, unsaturated run when it saturates before the fds', () => {
    const v = firstLimit({
      ...base,
      runs: [
        { sessions: 5000, busyPct: 80, loopP99Ms: 30 },
        { sessions: 10_000, busyPct: 100, loopP99Ms: 900 },
      ],
    });
    expect(v.name).toBe('event loop');
    expect(v.atSessions).toBe(6250);
  });

  it('counts a loop already behind as saturated at its own fleet size', () => {
    const v = firstLimit({ ...base, runs: [{ sessions: 10_000, busyPct: 50, loopP99Ms: 400 }] });
    expect(v.name).toBe('event loop');
    expect(v.atSessions).toBe(10_000);
  });

  it('says SQLite when the writer fills most of the saturated loop', () => {
    const v = firstLimit({ ...base, runs: [{ sessions: 10_000, busyPct: 100, loopP99Ms: 500 }], sqlitePct: 60 });
    expect(v.name).toBe('SQLite');
  });

  it('names memory when RSS per session runs out first, and says whether the fleet asked reaches it', () => {
    const v = firstLimit({
      ...base,
      fds: { limit: 1e6, atStart: 40, atEnd: 20_040 },
      memAvailableMiB: 1000,
      runs: [{ sessions: 10_000, busyPct: 10 }],
    });
    expect(v.name).toBe('memory');
    expect(v.atSessions).toBe(35_000);
    expect(v.reached).toBe(false);
  });
});
