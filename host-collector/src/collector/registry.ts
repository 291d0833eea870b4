// The set of sandboxes: registered through the API/CLI or found by discovery, persisted so
// a restarted collector listens again at once, before any probe retries.

import { EventEmitter } from 'node:events';
import type { Logger } from './logger.js';
import { Sandbox, type SandboxSettings, type StateChange } from './sandbox.js';
import type { Store } from './store.js';

export const SANDBOX_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** Unix socket paths are limited to 107 bytes; keep room for the "_<port>" suffix. */
export const MAX_UDS_PATH = 100;

export class RegistryError extends Error {
  constructor(
    readonly code: 'BAD_ID' | 'BAD_PATH' | 'LISTEN_FAILED' | 'PATH_IN_USE',
    message: string,
  ) {
    super(message);
  }
}

export class Registry extends EventEmitter {
  readonly sandboxes = new Map<string, Sandbox>();

  constructor(
    private readonly store: Store,
    private readonly settings: SandboxSettings,
    private readonly log: Logger,
  ) {
    super();
  }

  /** Brings back every persisted sandbox and listens for each. */
  async restore(): Promise<void> {
    for (const row of this.store.listSandboxes()) {
      const sb = this.create(row.id, row.udsPath, row.source, row.generation);
      try {
        await sb.startListening();
      } catch (err) {
        sb.listenError = (err as Error).message;
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
    if (!udsPath.startsWith('/') || Buffer.byteLength(udsPath) > MAX_UDS_PATH || udsPath.includes('\0')) {
      throw new RegistryError('BAD_PATH', `udsPath must be an absolute path of at most ${MAX_UDS_PATH} bytes`);
    }
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
          existing.listenError = (err as Error).message;
          throw new RegistryError('LISTEN_FAILED', `cannot listen on ${existing.socketPath}: ${(err as Error).message}`);
        }
        this.store.saveSandbox({ id, udsPath, source, generation: existing.generation, createdMs: Date.now() });
        this.log.info({ sandbox: id, from: old, to: udsPath }, 'sandbox socket moved');
      }
      return { sandbox: existing, created: false };
    }
    const sb = this.create(id, udsPath, source, 0);
    try {
      await sb.startListening();
    } catch (err) {
      this.sandboxes.delete(id);
      await sb.stop();
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
    this.log.info({ sandbox: id }, 'sandbox unregistered');
    return true;
  }

  async closeAll(): Promise<void> {
    await Promise.all([...this.sandboxes.values()].map((sb) => sb.stop()));
  }

  private create(id: string, udsPath: string, source: 'api' | 'discover', generation: number): Sandbox {
    const sb = new Sandbox(id, udsPath, source, generation, this.store, this.settings, this.log);
    sb.on('state', (change: StateChange) => this.emit('state', change));
    this.sandboxes.set(id, sb);
    this.emit('added', sb);
    return sb;
  }
}
