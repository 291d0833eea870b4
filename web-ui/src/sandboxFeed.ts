// Everything the sandbox page shows, kept fresh: the detail (GET /v1/sandboxes/:id), and
// the event history the charts need (sockets, state changes, sessions, listener, logs),
// first loaded from the API, then extended by the stream's events for this sandbox (or,
// while the stream is down, by polling the events after the newest one seen).

import { useEffect, useState, useSyncExternalStore } from 'react';
import {
  ApiError,
  Unauthorized,
  auth,
  getJson,
  loadEvents,
  loadRecent,
  sandboxPath,
  type HistoryKind,
  type SandboxDetail,
  type SandboxEvent,
} from './api';
import { POLL_MS, useAuthEpoch } from './hooks';
import { stream } from './stream';

/** Sockets samples kept for the chart (one a second at most: over an hour). */
const KEEP_SOCKETS = 5000;
/** Log batches kept (each up to 200 lines); the tail shows the last 200 lines. */
const KEEP_LOG_BATCHES = 200;
const DETAIL_THROTTLE_MS = 1000;

/** Which buffer an event kind goes to; kinds not listed only move the cursor. */
const BUFFERS = {
  sockets: ['sockets'],
  states: ['state'],
  sessions: ['session.open'],
  listener: ['listener.bound', 'listener.unbound'],
  logs: ['log.lines'],
} as const satisfies Record<string, readonly HistoryKind[]>;
type BufferName = keyof typeof BUFFERS;

const KIND_TO_BUFFER = new Map<string, BufferName>();
for (const [b, kinds] of Object.entries(BUFFERS) as Array<[BufferName, readonly string[]]>) for (const k of kinds) KIND_TO_BUFFER.set(k, b);

const LIMITS: Record<BufferName, number> = {
  sockets: KEEP_SOCKETS,
  states: 2000,
  sessions: 500,
  listener: 1000,
  logs: KEEP_LOG_BATCHES,
};

export type SandboxEvents = Record<BufferName, SandboxEvent[]>;

export interface SandboxView {
  detail: SandboxDetail | null;
  events: SandboxEvents;
  /** The first history load is done (charts can tell "no data" from "loading"). */
  historyLoaded: boolean;
  error: string | null;
  notFound: boolean;
  removed: boolean;
  version: number;
}

/** Before anything loaded (views are replaced, never changed in place, so one serves all). */
const EMPTY: SandboxView = {
  detail: null,
  events: { sockets: [], states: [], sessions: [], listener: [], logs: [] },
  historyLoaded: false,
  error: null,
  notFound: false,
  removed: false,
  version: 0,
};

class SandboxFeed {
  private view = EMPTY;
  private seen = new Set<number>();
  private cursor = 0;
  private listeners = new Set<() => void>();
  private stops: Array<() => void> = [];
  private alive = true;
  private detailTimer: ReturnType<typeof setTimeout> | null = null;
  private detailLast = 0;
  private detailInFlight = false;
  private catchingUp = false;
  private notifyTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(readonly id: string) {}

  subscribe = (l: () => void) => {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  };

  getView = () => this.view;

  private emit(soon = false): void {
    if (soon) {
      // Event bursts: one render per animation-ish frame.
      if (this.notifyTimer) return;
      this.notifyTimer = setTimeout(() => {
        this.notifyTimer = null;
        this.emit();
      }, 50);
      return;
    }
    // Now: a render already due soon would only repeat this one.
    if (this.notifyTimer) {
      clearTimeout(this.notifyTimer);
      this.notifyTimer = null;
    }
    this.view = { ...this.view, version: this.view.version + 1 };
    for (const l of this.listeners) l();
  }

  start(): void {
    // Subscribe before loading history: nothing falls between the two (duplicates are dropped by id).
    this.stops.push(stream.subscribe(this.id));
    this.stops.push(
      stream.onMessage((m) => {
        if (m.type === 'event' && m.id === this.id) {
          if (this.add([m.event])) this.emit(true);
          this.scheduleDetail();
        } else if (m.type === 'sandbox' && m.sandbox.id === this.id) {
          if (this.view.detail) {
            this.view = { ...this.view, detail: { ...this.view.detail, ...m.sandbox }, removed: false };
            this.emit();
          }
          this.scheduleDetail();
        } else if (m.type === 'removed' && m.id === this.id) {
          this.view = { ...this.view, removed: true };
          this.emit();
        } else if (m.type === 'snapshot') {
          const s = m.sandboxes.find((x) => x.id === this.id);
          if (s && this.view.detail) {
            this.view = { ...this.view, detail: { ...this.view.detail, ...s } };
            this.emit();
          }
        }
      }),
    );
    let wasLive = stream.getStatus() === 'live';
    this.stops.push(
      stream.onStatus(() => {
        const live = stream.getStatus() === 'live';
        if (live && !wasLive && this.view.historyLoaded) {
          // Back after an outage: fetch what happened meanwhile.
          void this.catchUp();
          this.scheduleDetail();
        }
        wasLive = live;
      }),
    );
    const poll = setInterval(() => {
      if (stream.getStatus() === 'live' || auth.needToken()) return;
      this.scheduleDetail();
      if (this.view.historyLoaded) void this.catchUp();
    }, POLL_MS);
    this.stops.push(() => clearInterval(poll));
    void this.loadDetail();
    void this.loadHistory();
  }

  stop(): void {
    this.alive = false;
    for (const f of this.stops.splice(0)) f();
    if (this.detailTimer) clearTimeout(this.detailTimer);
    if (this.notifyTimer) clearTimeout(this.notifyTimer);
  }

  /** Adds events to their buffers; false when all were already there. */
  private add(events: SandboxEvent[]): boolean {
    const fresh = new Map<BufferName, SandboxEvent[]>();
    for (const e of events) {
      if (this.seen.has(e.id)) continue;
      this.seen.add(e.id);
      if (e.id > this.cursor) this.cursor = e.id;
      const b = KIND_TO_BUFFER.get(e.kind);
      if (!b) continue;
      const list = fresh.get(b);
      if (list) list.push(e);
      else fresh.set(b, [e]);
    }
    if (!fresh.size) return false;
    const next = { ...this.view.events };
    for (const [b, added] of fresh) {
      const old = next[b];
      let arr = old.concat(added);
      // History pages and stream events can interleave: keep each buffer in id order.
      if (old.length && added[0]!.id < old[old.length - 1]!.id) arr.sort((x, y) => x.id - y.id);
      else if (added.some((e, i) => i > 0 && added[i - 1]!.id > e.id)) arr.sort((x, y) => x.id - y.id);
      if (arr.length > LIMITS[b]) arr = arr.slice(arr.length - LIMITS[b]);
      next[b] = arr;
    }
    this.view = { ...this.view, events: next };
    return true;
  }

  private scheduleDetail(): void {
    if (this.detailTimer) return;
    const wait = Math.max(0, this.detailLast + DETAIL_THROTTLE_MS - Date.now());
    this.detailTimer = setTimeout(() => {
      this.detailTimer = null;
      void this.loadDetail();
    }, wait);
  }

  async loadDetail(): Promise<void> {
    if (this.detailInFlight) {
      this.scheduleDetail();
      return;
    }
    this.detailInFlight = true;
    this.detailLast = Date.now();
    try {
      const d = await getJson<SandboxDetail>(sandboxPath(this.id));
      if (!this.alive) return;
      this.view = { ...this.view, detail: d, error: null, notFound: false, removed: false };
      this.emit();
    } catch (e) {
      if (!this.alive || e instanceof Unauthorized) return;
      if (e instanceof ApiError && e.status === 404) this.view = { ...this.view, notFound: true, error: null };
      else this.view = { ...this.view, error: (e as Error).message };
      this.emit();
    } finally {
      this.detailInFlight = false;
    }
  }

  async loadHistory(): Promise<void> {
    // The newest of each kind the page shows, read backwards: a long-lived sandbox opens as
    // fast as a new one, and what it shows is what happened last.
    const recent = (kind: HistoryKind, count: number) => loadRecent(this.id, { kind, count });
    const loads: Array<Promise<SandboxEvent[]>> = [
      recent('sockets', KEEP_SOCKETS),
      recent('state', 5000),
      recent('session.open', 2000),
      recent('listener.bound', 2000),
      recent('listener.unbound', 2000),
      recent('log.lines', KEEP_LOG_BATCHES),
    ];
    const results = await Promise.allSettled(loads);
    if (!this.alive) return;
    let unauthorized = false;
    for (const r of results) {
      if (r.status === 'fulfilled') this.add(r.value);
      else if (r.reason instanceof Unauthorized) unauthorized = true;
    }
    if (unauthorized) return; // loaded again when a token is entered (new feed)
    this.view = { ...this.view, historyLoaded: true };
    this.emit();
  }

  private async catchUp(): Promise<void> {
    if (this.catchingUp) return;
    this.catchingUp = true;
    try {
      const r = await loadEvents(this.id, { after: this.cursor, maxPages: 5 });
      if (this.alive && this.add(r.events)) this.emit();
    } catch {
      // Next poll tries again.
    } finally {
      this.catchingUp = false;
    }
  }
}

/** The sandbox page's data; a fresh feed per sandbox id (and per token entered). */
export function useSandboxFeed(id: string): SandboxView {
  const epoch = useAuthEpoch();
  const [feed, setFeed] = useState<SandboxFeed | null>(null);
  useEffect(() => {
    const f = new SandboxFeed(id);
    setFeed(f);
    f.start();
    return () => f.stop();
  }, [id, epoch]);
  const view = useSyncExternalStore(feed?.subscribe ?? noopSubscribe, feed?.getView ?? emptyView);
  return view;
}

const noopSubscribe = () => () => {};
const emptyView = () => EMPTY;
