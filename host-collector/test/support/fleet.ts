// A small fleet in known states for the exporters' tests (metrics, OTLP, webhooks): fake
// probes (the harness's ProbeClient) speak the real protocol over each sandbox's socket,
// answer every command with a failure (so the automatic dumps of a stuck sandbox end at once)
// or, if asked, every dump with a small threads dump, and are closed after the test, also
// when it fails.

import path from 'node:path';
import type { ProbeEvent, ProbeMessage, ProbeStatus } from '@vsockdiag/proto';
import { afterEach } from 'vitest';
import { ProbeClient, answerThreadsDump } from '../../../test/harness/probe-client.js';
import { waitFor } from '../../../test/support/wait.js';
import type { Collector } from '../../src/collector/collector.js';

export interface FakeProbe {
  send(m: ProbeMessage): void;
  /** Sends events as given (their own seq and guest times). */
  events(events: ProbeEvent[]): void;
  close(): void;
}

const TARGET = { pid: 42, name: 'envd', source: 'name' as const };
const NOT_BOUND = { port: 49983, bound: false };

export type ProbeStarter = (
  socketPath: string,
  status: ProbeStatus,
  sinceBootMs?: number,
  opts?: { dumps?: boolean; bootId?: string },
) => Promise<FakeProbe>;

/** Registers the after-hook that closes every probe; call at the top of a test file. */
export function fakeProbes(): ProbeStarter {
  const open: ProbeClient[] = [];
  afterEach(() => {
    for (const p of open.splice(0)) p.close();
  });
  return async (socketPath, status, sinceBootMs = 2000, opts = {}) => {
    const p = new ProbeClient({
      path: socketPath,
      status,
      sinceBootMs: () => sinceBootMs,
      ...(opts.bootId ? { bootId: opts.bootId } : {}),
      onMessage: (m, c) => {
        if (m.type !== 'command') return;
        if (opts.dumps && answerThreadsDump(m, c)) return;
        c.send({ type: 'result', id: m.id, ok: false, error: 'no dumps from this fake probe' });
      },
    });
    open.push(p);
    await p.connect();
    return { send: (m) => void p.send(m), events: (events) => void p.send({ type: 'events', events }), close: () => p.close() };
  };
}

/** One sandbox per state the collector can reach without waiting: registered (`fresh`),
 *  starting (`slow`), ready through two phases (`healthy`), stuck (`hung`, whose probe
 *  answers dumps with `dumps`), exited (`crashed`) and silent (`quiet`). Resolves once each
 *  is there. */
export async function buildFleet(c: Collector, dir: string, probe: ProbeStarter, opts: { dumps?: boolean } = {}): Promise<void> {
  const reg = async (id: string) => (await c.registry.register(id, path.join(dir, `${id}.sock`), 'api')).sandbox.socketPath;
  const at = (id: string, state: string) => waitFor(`${id} ${state}`, () => c.registry.get(id)?.state === state);

  await reg('fresh');

  await probe(await reg('slow'), {
    target: { ...TARGET, startedAt: 1900, alive: true },
    listener: NOT_BOUND,
    phases: { reported: false, ready: false },
  });
  await at('slow', 'starting');

  const ok = await probe(await reg('healthy'), {
    target: { ...TARGET, startedAt: 1000, alive: true },
    listener: NOT_BOUND,
    phases: { reported: false, ready: false },
  });
  ok.events([
    { kind: 'phase', seq: 1, t: 1100, name: 'cgroups', source: 'notify' },
    { kind: 'phase', seq: 2, t: 1300, name: 'api', source: 'notify' },
    { kind: 'phase', seq: 3, t: 1600, ready: true, source: 'notify' },
    { kind: 'listener.bound', seq: 4, t: 1650, port: 49983, address: '0.0.0.0', inode: 7, pid: 42 },
  ]);
  await at('healthy', 'ready');

  // Alive 99 s and nothing listening: past the start deadline at once.
  await probe(
    await reg('hung'),
    { target: { ...TARGET, startedAt: 1000, alive: true }, listener: NOT_BOUND, phases: { reported: false, ready: false } },
    100_000,
    opts,
  );
  await at('hung', 'stuck');

  await probe(await reg('crashed'), {
    target: { ...TARGET, startedAt: 1000, alive: false, exitCode: 1 },
    listener: NOT_BOUND,
    phases: { reported: false, ready: false },
  });
  await at('crashed', 'exited');

  const gone = await probe(await reg('quiet'), {
    target: { ...TARGET, startedAt: 1900, alive: true },
    listener: NOT_BOUND,
    phases: { reported: false, ready: false },
  });
  await at('quiet', 'starting');
  gone.close();
  await at('quiet', 'silent');
}
