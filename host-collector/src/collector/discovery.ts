// Finds Firecracker vsock sockets by a glob (e.g. /run/firecracker/*/vsock.sock) and
// registers each as a sandbox; a sandbox whose socket file disappears is unregistered.
// The sandbox id is what the wildcards matched, joined with "-" (for the example above,
// the directory name). Our own <uds>_<port> listener files are never taken for VMs.

import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from './logger.js';
import type { Registry } from './registry.js';

export const DISCOVERY_INTERVAL_MS = 1000;

export function globToRegExp(segment: string): RegExp {
  let re = '';
  for (const ch of segment) {
    if (ch === '*') re += '([^/]*)';
    else if (ch === '?') re += '([^/])';
    else re += ch.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/** Expands an absolute glob with * and ? in any segment; returns path and wildcard captures. */
export function expandGlob(pattern: string): Array<{ path: string; id: string }> {
  if (!pattern.startsWith('/')) throw new Error(`--discover needs an absolute glob, got "${pattern}"`);
  const segments = pattern.split('/').filter(Boolean);
  let frontier: Array<{ dir: string; captures: string[] }> = [{ dir: '/', captures: [] }];
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    const next: typeof frontier = [];
    for (const { dir, captures } of frontier) {
      if (!/[*?]/.test(seg)) {
        next.push({ dir: path.join(dir, seg), captures });
        continue;
      }
      const re = globToRegExp(seg);
      let names: string[];
      try {
        names = fs.readdirSync(dir);
      } catch {
        continue;
      }
      for (const name of names) {
        const m = re.exec(name);
        if (m) next.push({ dir: path.join(dir, name), captures: [...captures, ...m.slice(1).filter(Boolean)] });
      }
    }
    frontier = next;
  }
  return frontier
    .filter(({ dir }) => !/_\d+$/.test(dir) && isSocket(dir))
    .map(({ dir, captures }) => ({ path: dir, id: captures.join('-') || path.basename(dir) }));
}

function isSocket(p: string): boolean {
  try {
    return fs.statSync(p).isSocket();
  } catch {
    return false;
  }
}

export class Discovery {
  private timer: NodeJS.Timeout | null = null;
  private running = false;

  constructor(
    private readonly pattern: string,
    private readonly registry: Registry,
    private readonly log: Logger,
  ) {}

  start(): void {
    void this.scan();
    this.timer = setInterval(() => void this.scan(), DISCOVERY_INTERVAL_MS);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  async scan(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const found = new Map(expandGlob(this.pattern).map((f) => [f.id, f.path]));
      for (const [id, udsPath] of found) {
        const sb = this.registry.get(id);
        if (sb && sb.udsPath === udsPath && !sb.listenError) continue;
        if (sb && sb.source !== 'discover') continue; // an explicit registration wins
        try {
          await this.registry.register(id, udsPath, 'discover');
        } catch (err) {
          this.log.warn({ sandbox: id, udsPath, err: (err as Error).message }, 'discovered socket not registered');
        }
      }
      for (const sb of [...this.registry.sandboxes.values()]) {
        if (sb.source === 'discover' && !found.has(sb.id)) await this.registry.unregister(sb.id);
      }
    } finally {
      this.running = false;
    }
  }
}
