// A small fleet in known states for the exporters' tests (metrics, OTLP, webhooks): fake
// probes speak the real protocol over each sandbox's socket, answer every command with a
// failure (so the automatic dumps of a stuck sandbox end at once) or, if asked, every dump
// with a small threads dump, and are closed after the test, also when it fails.

import net from 'node:net';
import path from 'node:path';
import {
  FrameDecoder,
  decodeCollectorMessage,
  encodeMessage,
  type CollectorMessage,
  type ProbeEvent,
  type ProbeMessage,
  type ProbeStatus,
} from '@vsockdiag/proto';
import { afterEach } from 'vitest';
import { helloMessage } from '../../../test/support/hello.js';
import { waitFor } from '../../../test/support/wait.js';
import type { Collector } from '../../src/collector/collector.js';

export interface FakeProbe {
  send(m: ProbeMessage): void;
  events(events: ProbeEvent[]): void;
  close(): void;
}

const TARGET = { pid: 42, name: 'envd', source: 'name' as const };
const NOT_BOUND = { port: 49983, bound: false };

/** Registers the after-hook that closes every probe; call at the top of a test file. */
export type ProbeStarter = (
  socketPath: string,
  status: ProbeStatus,
  sinceBootMs?: number,
  opts?: { dumps?: boolean },
) => Promise<FakeProbe>;

export function fakeProbes(): ProbeStarter {
  const open: net.Socket[] = [];
  afterEach(() => {
    for (const s of open.splice(0)) s.destroy();
  });
  return async (socketPath, status, sinceBootMs = 2000, opts = {}) => {
    const s = net.connect(socketPath);
    open.push(s);
    s.on('error', () => {});
    const send = (m: ProbeMessage) => void s.write(encodeMessage(m));
    let welcomed = false;
    const decoder = new FrameDecoder((b) => {
      const m: CollectorMessage = decodeCollectorMessage(b);
      if (m.type === 'welcome') welcomed = true;
      if (m.type !== 'command') return;
      if (!opts.dumps || m.op !== 'dump') return send({ type: 'result', id: m.id, ok: false, error: 'no dumps from this fake probe' });
      const text = Buffer.from('threads of envd (pid 42)\ntask 42 S futex_wait_queue\n');
      send({ type: 'dump.chunk', id: m.id, index: 0, data: text });
      const dump = { mode: m.mode ?? 'threads', source: 'proc' as const, complete: true, bytes: text.length, chunks: 1, pid: 42 };
      send({ type: 'result', id: m.id, ok: true, dump });
    });
    s.on('data', (d: Buffer) => decoder.push(d));
    await new Promise<void>((resolve, reject) => {
      s.once('connect', resolve);
      s.once('error', reject);
    });
    send(helloMessage({ bootId: 'boot-0001', clocks: { wallMs: Date.now(), sinceBootMs }, status }));
    await waitFor('the welcome', () => welcomed);
    return { send, events: (events) => send({ type: 'events', events }), close: () => s.destroy() };
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
