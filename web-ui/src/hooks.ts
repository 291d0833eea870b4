// Small shared hooks: a ticking clock, the auth epoch, and a set of open rows.

import { useEffect, useState, useSyncExternalStore } from 'react';
import { auth } from './api';

/** How often the REST API is polled while the live stream is down. */
export const POLL_MS = 2000;

/** The current time, refreshed every `ms` (for "in state for 12s"). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

/** Changes when a token is entered, so fetches that failed with 401 run again. */
export function useAuthEpoch(): number {
  return useSyncExternalStore(auth.subscribe, auth.epoch);
}

/** Which rows (by index) are expanded, and a toggle for one. */
export function useToggleSet(): [ReadonlySet<number>, (i: number) => void] {
  const [open, setOpen] = useState<Set<number>>(() => new Set());
  const toggle = (i: number) =>
    setOpen((s) => {
      const n = new Set(s);
      if (n.has(i)) n.delete(i);
      else n.add(i);
      return n;
    });
  return [open, toggle];
}
