// The set of sandboxes: registered through the API/CLI or found by discovery, persisted so
// a restarted collector listens again at once, before any probe retries.

import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import type { RegistryErrorCode } from '../catalogue.js';
import { Feed } from './feed.js';
import type { Logger } from './logger.js';
import { Sandbox, type SandboxSettings, type StateChange } from './sandbox.js';
import type { EventRecord, Store } from './store.js';

export const SANDBOX_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** Unix socket paths are limited to 107 bytes; keep room for the "_<port>" suffix. */
export const MAX_UDS_PATH = 100;

export class RegistryError extends Error {
  constructor(
    readonly code: RegistryErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface RegistrySettings extends SandboxSettings {
  /** When set, every udsPath must lie inside one of these folders (collector --uds-root). */
  udsRoots?: readonly string[];
}

/**
 * Why `udsPath` may not be used, or null. Checked on the path as given (absolute, normalised)
 * and, with roots configured, on where its folder really is, so neither "..", nor a symlinked
 * folder, leads a registration out of the roots.
 */
export function udsPathProblem(udsPath: string, roots: readonly string[] | undefined): string | null {
  if (!udsPath.startsWith('/') || Buffer.byteLength(udsPath) > MAX_UDS_PATH || udsPath.includes('\0')) {
    return `udsPath must be an absolute path of at most ${MAX_UDS_PATH} bytes`;
  }
  if (path.posix.normalize(udsPath) !== udsPath || udsPath.endsWith('/'))
    return `udsPath must be normalised (no "..", "." or "//"): ${udsPath}`;
  if (!roots || roots.length === 0) return null;
  const inside = (p: string, root: string) => p.startsWith(root.endsWith('/') ? root : `${root}/`);
  if (!roots.some((r) => inside(udsPath, r))) return `udsPath ${udsPath} is outside the allowed folders (--uds-root ${roots.join(', ')})`;
  let dir: string;
  try {
    dir = fs.realpathSync(path.dirname(udsPath));
  } catch {
    return null; // no such folder: binding fails with LISTEN_FAILED, and nothing is created
  }
  const realRoots = roots.map((r) => {
    try {
      return fs.realpathSync(r);
    } catch {
      return r;
    }
  });
  if (!realRoots.some((r) => inside(`${dir}/`, r))) return `udsPath ${udsPath} leads outside the allowed folders through a symbolic link`;
  return null;
}

/** What the registry tells its listeners. */
export interface RegistryEvents {
  /** A sandbox was registered or restored (before its listener is bound). */
  added: [sandbox: Sandbox];
  /** A sandbox was unregistered, or its registration failed after it was added. */
  removed: [id: string];
  /** Any sandbox's state changed (its own 'state' event, for listeners of the whole fleet). */
  state: [change: StateChange];
}

export class Registry extends EventEmitter<RegistryEvents> {
  readonly sandboxes = new Map<string, Sandbox>();
  /** What the fleet's sandboxes tell, typed, for the exporters (feed.ts). */
  readonly feed: Feed;

  constructor(
    private readonly store: Store,
    private readonly settings: RegistrySettings,
    private readonly log: Logger,
  ) {
    super();
    this.feed = new Feed(log);
  }

  /** Brings back every persisted sandbox and listens for each (if its path is still allowed). */
  async restore(): Promise<void> {
    for (const row of this.store.listSandboxes()) {
      const sb = this.create(row.id, row.udsPath, row.source);
      try {
        const problem = udsPathProblem(row.udsPath, this.settings.udsRoots);
        if (problem) throw new Error(problem);
        await sb.startListening();
      } catch (err) {
        sb.listenFailed((err as Error).message);
        this.log.error({ sandbox: row.id, err: sb.listenError }, 'cannot listen for a persisted sandbox');
      }
    }
  }

  get(id: string): Sandbox | undefined {
    return this.sandboxes.get(id);
  }

  /**
   * Registers (or moves) a sandbox. Returns whether it was new. Fails without changing
   * anything if the socket cannot be bound.
   */
  async register(id: string, udsPath: string, source: 'api' | 'discover'): Promise<{ sandbox: Sandbox; created: boolean }> {
    if (!SANDBOX_ID_PATTERN.test(id)) {
      throw new RegistryError('BAD_ID', `sandbox id must match ${SANDBOX_ID_PATTERN} (got ${JSON.stringify(id.slice(0, 140))})`);
    }
    const problem = udsPathProblem(udsPath, this.settings.udsRoots);
    if (problem) throw new RegistryError('BAD_PATH', problem);
    for (const other of this.sandboxes.values()) {
      if (other.id !== id && other.udsPath === udsPath) {
        throw new RegistryError('PATH_IN_USE', `udsPath ${udsPath} already belongs to sandbox ${other.id}`);
      }
    }
    const existing = this.sandboxes.get(id);
    if (existing) {
      if (existing.udsPath !== udsPath || existing.listenError) {
        const old = existing.udsPath;
        try {
          await existing.move(udsPath);
        } catch (err) {
          existing.listenFailed((err as Error).message);
          throw new RegistryError('LISTEN_FAILED', `cannot listen on ${existing.socketPath}: ${(err as Error).message}`);
        }
        this.store.saveSandbox({ id, udsPath, source, generation: existing.generation, createdMs: Date.now() });
        this.log.info({ sandbox: id, from: old, to: udsPath }, 'sandbox socket moved');
      }
      return { sandbox: existing, created: false };
    }
    const sb = this.create(id, udsPath, source);
    try {
      await sb.startListening();
    } catch (err) {
      this.sandboxes.delete(id);
      await sb.stop();
      // Listeners were told it was added (the readiness thread already has a reading of it).
      this.emit('removed', id);
      throw new RegistryError('LISTEN_FAILED', `cannot listen on ${sb.socketPath}: ${(err as Error).message}`);
    }
    this.store.saveSandbox({ id, udsPath, source, generation: 0, createdMs: Date.now() });
    this.log.info({ sandbox: id, udsPath, source }, 'sandbox registered');
    return { sandbox: sb, created: true };
  }

  async unregister(id: string): Promise<boolean> {
    const sb = this.sandboxes.get(id);
    if (!sb) return false;
    this.sandboxes.delete(id);
    await sb.stop();
    this.store.deleteSandbox(id);
    this.emit('removed', id);
    this.feed.publish({ type: 'removed', id, generation: sb.generation, at: Date.now() });
    this.log.info({ sandbox: id }, 'sandbox unregistered');
    return true;
  }

  async closeAll(): Promise<void> {
    await Promise.all([...this.sandboxes.values()].map((sb) => sb.stop()));
  }

  private create(id: string, udsPath: string, source: 'api' | 'discover'): Sandbox {
    const sb = new Sandbox(id, udsPath, source, this.store, this.settings, this.log);
    sb.on('state', (change) => {
      // After the batch that caused it: a sandbox decides on a batch before it hands the
      // batch's rows on, and the feed tells what happened in the order it happened. Queued
      // before the listeners below run, so it also comes before what they publish in reply
      // (the dump service's end of the automatic dumps, say).
      queueMicrotask(() => this.publishState(sb, change));
      this.emit('state', change);
    });
    sb.on('recorded', (rows) => this.publishRows(sb, rows));
    this.sandboxes.set(id, sb);
    this.emit('added', sb);
    return sb;
  }

  private publishState(sb: Sandbox, c: StateChange): void {
    const target = sb.intake.status?.target;
    this.feed.publish({
      type: 'state',
      id: c.id,
      generation: c.generation,
      at: Date.now(),
      state: c.state,
      previous: c.previous,
      reason: c.reason,
      conditions: sb.conditionsAt().map((x) => ({ name: x.name, detail: x.detail })),
      lagMs: c.lagMs,
      targetStartedAt: target ? Math.round(sb.intake.clock.toHost(target.startedAt)) : null,
      // Those of this generation: taken since it opened (a life of the VM, over its sessions).
      dumpIds: sb.history.recentDumps.flatMap((d) => (d.id !== null && d.at >= (sb.intake.currentGeneration?.openedMs ?? 0) ? [d.id] : [])),
    });
  }

  /** The rows the feed tells about: sessions, targets and phases (dumps come from the dump service). */
  private publishRows(sb: Sandbox, rows: EventRecord[]): void {
    for (const r of rows) {
      const about = { id: r.sandboxId, generation: r.generation, at: r.tHost };
      const d = r.data as Record<string, unknown>;
      if (r.kind === 'phase' && r.tGuest !== null) {
        this.feed.publish({
          ...about,
          type: 'phase',
          guestMs: r.tGuest,
          ready: d.ready === true,
          ...(typeof d.name === 'string' ? { name: d.name } : {}),
        });
      } else if (r.kind === 'target.found') {
        this.feed.publish({
          ...about,
          type: 'target',
          pid: d.pid as number,
          name: d.name as string,
          startedAt: Math.round(sb.intake.clock.toHost(d.startedAt as number)),
        });
      } else if (r.kind === 'generation') {
        this.feed.publish({ ...about, type: 'generation', cause: String(d.cause), detail: String(d.detail) });
      } else if (r.kind === 'session.open') {
        this.feed.publish({
          ...about,
          type: 'session.open',
          session: r.session,
          bootId: d.bootId as string,
          instanceId: d.instanceId as string,
          probeVersion: d.probeVersion as string,
        });
      } else if (r.kind === 'session.close') {
        this.feed.publish({ ...about, type: 'session.close', reason: d.reason as string, code: (d.code as string | null) ?? null });
      }
    }
  }
}
