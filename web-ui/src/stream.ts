// The live stream (/v1/stream, WebSocket): sandbox summaries for the fleet, and events of
// the sandboxes a page subscribed to. Reconnects with backoff when the socket drops and
// resubscribes. While it is not live, pages poll the REST API instead (see usePolling).

import { useSyncExternalStore } from 'react';
import type { StreamClientMessage, StreamMessageType, StreamServerMessage } from '../../host-collector/src/http/stream-messages';
import { getToken, postJson } from './api';

/** What the collector sends on the stream: its declaration (host-collector/src/http/stream-messages.ts). */
export type StreamMessage = StreamServerMessage;

/** connecting: first attempt; live: open; reconnecting: dropped (or never opened), retrying. */
export type StreamStatus = 'connecting' | 'live' | 'reconnecting';

type MessageListener = (m: StreamMessage) => void;

const MIN_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 15_000;

type Loose = Record<string, unknown> & { sandbox?: { id?: unknown }; event?: { id?: unknown } };

/** The shape each declared message type must have before listeners see it (the browser runs
 *  no schema compiler: its CSP allows no eval). A type added to the declaration fails to
 *  compile here until it is handled. */
const SHAPES = {
  snapshot: (m) => Array.isArray(m.sandboxes),
  sandbox: (m) => typeof m.sandbox?.id === 'string',
  removed: (m) => typeof m.id === 'string',
  event: (m) => typeof m.id === 'string' && typeof m.event?.id === 'number',
  subscribed: (m) => typeof m.id === 'string',
} satisfies Record<StreamMessageType, (m: Loose) => boolean>;

function isMessage(m: unknown): m is StreamMessage {
  if (!m || typeof m !== 'object') return false;
  const t = (m as { type?: unknown }).type;
  return typeof t === 'string' && Object.hasOwn(SHAPES, t) && SHAPES[t as StreamMessageType](m as Loose);
}

class Stream {
  private ws: WebSocket | null = null;
  private status: StreamStatus = 'connecting';
  private attempt = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private started = false;
  private connects = 0;
  /** Subscribed sandbox ids, with how many pages want each. */
  private subs = new Map<string, number>();
  private messageListeners = new Set<MessageListener>();
  private statusListeners = new Set<() => void>();
  /** When the current outage began (ms), for "reconnecting for 12 s". */
  downSince: number | null = null;

  start(): void {
    if (this.started) return;
    this.started = true;
    void this.connect();
  }

  /** Drop the socket and connect again now (a token was entered). */
  restart(): void {
    this.attempt = 0;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onclose = ws.onerror = ws.onmessage = ws.onopen = null;
      ws.close();
    }
    void this.connect();
  }

  getStatus = (): StreamStatus => this.status;

  onStatus = (l: () => void): (() => void) => {
    this.statusListeners.add(l);
    return () => this.statusListeners.delete(l);
  };

  onMessage(l: MessageListener): () => void {
    this.messageListeners.add(l);
    return () => this.messageListeners.delete(l);
  }

  /** Ask for a sandbox's events; the returned function gives the subscription back. */
  subscribe(id: string): () => void {
    const n = this.subs.get(id) ?? 0;
    this.subs.set(id, n + 1);
    if (n === 0) this.send({ type: 'subscribe', id });
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.subs.get(id) ?? 1) - 1;
      if (left > 0) this.subs.set(id, left);
      else {
        this.subs.delete(id);
        this.send({ type: 'unsubscribe', id });
      }
    };
  }

  private send(m: StreamClientMessage): void {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(m));
  }

  private setStatus(s: StreamStatus): void {
    if (s === this.status) return;
    this.status = s;
    if (s === 'live') this.downSince = null;
    else if (this.downSince === null) this.downSince = Date.now();
    for (const l of this.statusListeners) l();
  }

  private async connect(): Promise<void> {
    // A restart() while a ticket is on its way starts a newer connect: the older one gives up.
    const mine = ++this.connects;
    let ws: WebSocket;
    try {
      // With a token, trade it (in a header) for a single-use ticket: the token itself never
      // goes into a URL.
      const query = getToken()
        ? `?ticket=${encodeURIComponent((await postJson<{ ticket: string }>('/v1/stream/tickets', undefined)).ticket)}`
        : '';
      if (mine !== this.connects) return;
      ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/stream${query}`);
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      this.setStatus('live');
      for (const id of this.subs.keys()) this.send({ type: 'subscribe', id });
    };
    ws.onmessage = (e) => {
      if (typeof e.data !== 'string') return;
      let m: unknown;
      try {
        m = JSON.parse(e.data);
      } catch {
        return;
      }
      if (!isMessage(m)) return;
      for (const l of this.messageListeners) l(m);
    };
    ws.onerror = () => {
      // onclose follows and schedules the retry.
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.scheduleReconnect();
    };
  }

  private scheduleReconnect(): void {
    this.setStatus('reconnecting');
    const base = Math.min(MAX_BACKOFF_MS, MIN_BACKOFF_MS * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 10);
    const delay = base * (0.75 + Math.random() * 0.5);
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.connect();
    }, delay);
  }
}

export const stream = new Stream();

export function useStreamStatus(): StreamStatus {
  return useSyncExternalStore(stream.onStatus, stream.getStatus);
}
