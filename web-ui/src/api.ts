// The dashboard's view of the collector API: types for what it answers, and one request
// helper that adds the bearer token and turns a 401 into a single, app-wide "token needed"
// signal (the App shows the prompt once; every hook refetches when a token is entered).
//
// The sandbox types are those of the collector's presenters (host-collector/src/http/present.ts,
// the one place the API's sandbox JSON is shaped) and the dump groups those of its parsers:
// type-only imports, so the dashboard cannot drift from what the API sends. The codes
// (states, dump modes, event kinds) come from the catalogues, host-collector/src/catalogue.ts
// and proto/src/codes.ts: pure constant modules, the only kind the dashboard may take values
// from across the boundary (test/integration/boundary.test.ts), so no code of the collector
// runs in the browser.
//
// Everything typed here as string may come from the guest: render it as React text only.

import {
  ENDED_STATES,
  OUTCOME_STATES,
  SANDBOX_STATES,
  STARTING_UP_STATES,
  STATES,
  STATES_TROUBLE_FIRST,
  isSandboxState,
  type CollectorEventKind,
} from '../../host-collector/src/catalogue';
import { DUMP_MODES, DUMP_MODE_INFO, type DumpMode } from '../../proto/src/codes';
import type { EventKind } from '../../proto/src/events';
import type { CreatorGroup } from '../../host-collector/src/dumps/creators';
import type { Frame } from '../../host-collector/src/dumps/goroutines';
import type { GoroutineGroup, LabelSetCount } from '../../host-collector/src/dumps/group';
import type { ThreadGroup, ThreadSyscall } from '../../host-collector/src/dumps/threads';
import type { detail, dumpBrief, dumpDetail, dumpDiff, phaseStats, summary } from '../../host-collector/src/http/present';
import type { EventJson } from '../../host-collector/src/http/schemas';

export type { CreatorGroup, Frame, GoroutineGroup, LabelSetCount, ThreadGroup, ThreadSyscall };
export {
  DUMP_MODES,
  DUMP_MODE_INFO,
  ENDED_STATES,
  OUTCOME_STATES,
  STARTING_UP_STATES,
  STATES_TROUBLE_FIRST,
  isSandboxState,
  type DumpMode,
};

/** Trouble first: the order of the fleet list and of the counts (a state this dashboard does
 *  not know, from a newer collector, last). */
export function stateRank(state: string): number {
  return isSandboxState(state) ? SANDBOX_STATES[state].trouble : STATES.length;
}

/** The kinds of event in a sandbox's history: the probe's and the collector's own. */
export type HistoryKind = EventKind | CollectorEventKind;

/** A sandbox in the list (GET /v1/sandboxes) and the stream. */
export type SandboxSummary = ReturnType<typeof summary>;
/** One sandbox (GET /v1/sandboxes/:id). */
export type SandboxDetail = ReturnType<typeof detail>;
export type Condition = SandboxSummary['conditions'][number];
export type PhaseRecord = SandboxDetail['phases'][number];
export type RemoteCount = NonNullable<NonNullable<SandboxDetail['sockets']>['top']>[number];
export type KernelMessage = SandboxDetail['kernel'][number];
/** A dump in the list (GET …/dumps), and what POST …/dumps answers. */
export type DumpBrief = ReturnType<typeof dumpBrief>;
/** One dump with its text and groups (GET …/dumps/:id). */
export type DumpFull = ReturnType<typeof dumpDetail>;
/** GET …/dumps/:id/diff. */
export type DumpDiff = ReturnType<typeof dumpDiff>;
/** One phase name across the fleet (GET /v1/phases). */
export type PhaseStats = ReturnType<typeof phaseStats>;

/** An event of a sandbox's history (GET …/events), as the stream sends it too. */
export type SandboxEvent = EventJson;

/** GET …/events: `more` says a page follows after `next` (a page can be short and still have one). */
interface EventPage {
  events: SandboxEvent[];
  next: number;
  more: boolean;
}

// ---- token and auth state ----

const TOKEN_KEY = 'vsockdiag.token';

export function getToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

type AuthListener = () => void;
const authListeners = new Set<AuthListener>();
let needToken = false;
/** Bumped when a token is entered: hooks include it in their dependencies to refetch. */
let authEpoch = 0;
let rejectedToken = false;

function emitAuth(): void {
  for (const l of authListeners) l();
}

export const auth = {
  subscribe(l: AuthListener): () => void {
    authListeners.add(l);
    return () => authListeners.delete(l);
  },
  /** True while a request was refused for want of a (right) token. */
  needToken: () => needToken,
  /** The token in session storage was refused (as opposed to: none was set). */
  rejected: () => rejectedToken,
  epoch: () => authEpoch,
  setToken(token: string): void {
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch {
      // Storage disabled: the token cannot be kept; requests will ask again.
    }
    needToken = false;
    authEpoch++;
    emitAuth();
  },
};

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function authHeaders(): Record<string, string> {
  const token = getToken();
  return token ? { authorization: `Bearer ${token}` } : {};
}

async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: { ...authHeaders(), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    ...(signal ? { signal } : {}),
  });
  if (res.status === 401) {
    if (!needToken) {
      needToken = true;
      rejectedToken = getToken() !== null;
      emitAuth();
    }
    throw new Unauthorized('token required');
  }
  if (!res.ok) {
    let code = `HTTP_${res.status}`;
    let message = `${method} ${path}: HTTP ${res.status}`;
    try {
      const j = (await res.json()) as { error?: { code?: string; message?: string } };
      if (j.error?.code) code = j.error.code;
      if (j.error?.message) message = j.error.message;
    } catch {
      // Not JSON: keep the status line.
    }
    throw new ApiError(res.status, code, message);
  }
  return (await res.json()) as T;
}

export function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  return request<T>('GET', path, undefined, signal);
}

export function postJson<T>(path: string, body: unknown): Promise<T> {
  return request<T>('POST', path, body);
}

/** Downloads a protected text resource (the raw dump) through fetch, so the token goes along. */
export async function downloadWithToken(path: string, filename: string): Promise<void> {
  const res = await fetch(path, { headers: authHeaders() });
  if (!res.ok) throw new ApiError(res.status, `HTTP_${res.status}`, `download failed: HTTP ${res.status}`);
  const blob = await res.blob();
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export const sandboxPath = (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`;

/**
 * The newest `count` events of one kind (or prefix), oldest first: read backwards (order=desc),
 * so a sandbox with a long history costs as much to open as a fresh one.
 */
export async function loadRecent(id: string, opts: { kind: HistoryKind; count: number; signal?: AbortSignal }): Promise<SandboxEvent[]> {
  const out: SandboxEvent[] = [];
  let before: number | null = null;
  while (out.length < opts.count) {
    const limit = Math.min(1000, opts.count - out.length);
    const q = new URLSearchParams({ order: 'desc', kind: opts.kind, limit: String(limit) });
    if (before !== null) q.set('before', String(before));
    const r = await getJson<EventPage>(`${sandboxPath(id)}/events?${q}`, opts.signal);
    out.push(...r.events);
    if (!r.more) break;
    before = r.next;
  }
  return out.reverse();
}

/** Pages forward through a sandbox's events from `after` (catching up after a gap). */
export async function loadEvents(
  id: string,
  opts: { after?: number; maxPages?: number; signal?: AbortSignal } = {},
): Promise<{ events: SandboxEvent[]; next: number }> {
  const maxPages = opts.maxPages ?? 10;
  let after = opts.after ?? 0;
  let out: SandboxEvent[] = [];
  for (let page = 0; page < maxPages; page++) {
    const q = new URLSearchParams({ after: String(after), limit: '1000' });
    const r = await getJson<EventPage>(`${sandboxPath(id)}/events?${q}`, opts.signal);
    out = out.concat(r.events);
    after = r.next;
    if (!r.more) break;
  }
  return { events: out, next: after };
}
