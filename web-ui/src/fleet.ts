// The fleet as the dashboard knows it: the stream's snapshot and summary updates while it
// is live, GET /v1/sandboxes every 2 s while it is not. Updates are folded into one render
// at most every 100 ms, so a burst of 1,000 changes costs one re-render.

import { useEffect, useSyncExternalStore } from 'react';
import { Unauthorized, auth, getJson, type SandboxSummary } from './api';
import { POLL_MS, useAuthEpoch } from './hooks';
import { stream } from './stream';

const FLUSH_MS = 100;

class FleetStore {
  readonly map = new Map<string, SandboxSummary>();
  loaded = false;
  error: string | null = null;
  private version = 0;
  private listeners = new Set<() => void>();
  private flushTimer: ReturnType<typeof setTimeout> | null = null;
  /** A stream snapshot arrived since the stream went live: REST answers would be older. */
  private haveSnapshot = false;
  private users = 0;
  private stopFns: Array<() => void> = [];

  subscribe = (l: () => void) => {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  };

  getVersion = () => this.version;

  private changed(now = false): void {
    if (now) {
      if (this.flushTimer) clearTimeout(this.flushTimer);
      this.flushTimer = null;
      this.flush();
      return;
    }
    if (this.flushTimer) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = null;
      this.flush();
    }, FLUSH_MS);
  }

  private flush(): void {
    this.version++;
    for (const l of this.listeners) l();
  }

  replaceAll(list: SandboxSummary[]): void {
    this.map.clear();
    for (const s of list) this.map.set(s.id, s);
    this.loaded = true;
    this.error = null;
    this.changed(true);
  }

  async poll(): Promise<void> {
    try {
      const r = await getJson<{ sandboxes: SandboxSummary[] }>('/v1/sandboxes');
      if (stream.getStatus() === 'live' && this.haveSnapshot) return;
      this.replaceAll(r.sandboxes);
    } catch (e) {
      if (e instanceof Unauthorized) return;
      this.error = (e as Error).message;
      this.changed(true);
    }
  }

  /** Counted: the first user starts listening and polling, the last one stops. */
  retain(): () => void {
    if (this.users++ === 0) this.start();
    return () => {
      if (--this.users === 0) this.stop();
    };
  }

  private start(): void {
    this.stopFns.push(
      stream.onMessage((m) => {
        if (m.type === 'snapshot') {
          this.haveSnapshot = true;
          this.replaceAll(m.sandboxes);
        } else if (m.type === 'sandbox') {
          this.map.set(m.sandbox.id, m.sandbox);
          this.changed();
        } else if (m.type === 'removed') {
          if (this.map.delete(m.id)) this.changed();
        }
      }),
    );
    this.stopFns.push(
      stream.onStatus(() => {
        if (stream.getStatus() !== 'live') this.haveSnapshot = false;
      }),
    );
    void this.poll();
    const t = setInterval(() => {
      // Not while the token prompt is up: entering a token polls at once (useFleet).
      if (auth.needToken()) return;
      if (stream.getStatus() !== 'live' || !this.haveSnapshot) void this.poll();
    }, POLL_MS);
    this.stopFns.push(() => clearInterval(t));
  }

  private stop(): void {
    for (const f of this.stopFns.splice(0)) f();
  }
}

export const fleet = new FleetStore();

/** Re-renders on fleet changes; returns the store's version (use it as a memo key). */
export function useFleet(): number {
  const epoch = useAuthEpoch();
  useEffect(() => fleet.retain(), []);
  useEffect(() => {
    if (epoch > 0) void fleet.poll();
  }, [epoch]);
  return useSyncExternalStore(fleet.subscribe, fleet.getVersion);
}
