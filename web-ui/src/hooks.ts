// Small shared hooks: a ticking clock and the auth epoch.

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
