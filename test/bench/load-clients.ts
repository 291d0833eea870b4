// The fleet of light probes for the collector-load benchmark (collector-load.ts), run as a
// child process so their CPU is not the benchmark's (nor the collector's). Speaks JSON
// lines: commands on stdin, answers on stdout.
//
//   {"op":"connect","paths":[...],"readyEvery":2,"deadlineMs"?}
//                                                  → {"op":"connected","n","failed","ms","cut"}
//       one ProbeClient per path (heartbeats and acks as the probe's); every `readyEvery`-th one says hello with
//       a status whose target is up and bound (→ `ready`), the others with the initial status
//       (→ `booting`). Each then sends one `sockets` totals event a second, at its own offset.
//       A client not welcomed in time is closed and tried again (3 tries in all).
//       With deadlineMs, no connect starts after it: `cut` paths were never tried. Every
//       client answers a dump command with a small threads dump (a stuck one is auto-dumped).
//   {"op":"target","i":N}                            → {"op":"target","at"}
//       client N's target appears (`target.found`, listener unbound): booting → starting,
//       then stuck once no phase came for the collector's --stall-after.
//   {"op":"bind","i":N}                              → {"op":"bind","i","at"}
//       client N's target appears and binds its port, in one batch (→ `ready`); `at` is the
//       wall clock just after the write.
//   {"op":"phase","i":N,"name":"..."}                → {"op":"phase","name","at"}
//       client N sends a `phase` event (source "log": it does not change the state); `at`
//       is the wall clock (sub-ms) just after the write.
//   {"op":"stats"}                                   → {"op":"stats","sent","acked","closed"}
//   {"op":"seqs"}                                    → {"op":"seqs","seqs":[[seq, acked] | null, …]}
//       each client's last seq sent and highest ack (soak: nothing sent may be unacked)
//   {"op":"quiet"}                                   → {"op":"quiet"}: the clients stop sending
//   {"op":"resume"}                                  → {"op":"resume"}: they send again
//   {"op":"stop"}                                    → closes everything and exits.
//
// Bounded: it exits by itself when stdin closes (the benchmark went away) or after
// MAX_LIFETIME_MS whatever happens.

import readline from 'node:readline';
import { HEARTBEAT_INTERVAL_MS, initialStatus, type EventBody, type ProbeStatus } from '@vsockdiag/proto';
import { ProbeClient, answerThreadsDump } from '../harness/probe-client.js';

const MAX_LIFETIME_MS = 15 * 60_000;
const CONNECT_PARALLEL = 64;
const clients: ProbeClient[] = [];
const timers: NodeJS.Timeout[] = [];
let sent = 0;
let closed = 0;
let quiet = false;

const out = (m: unknown) => process.stdout.write(`${JSON.stringify(m)}\n`);
const wallNow = () => performance.timeOrigin + performance.now();

function readyStatus(now: number): ProbeStatus {
  return {
    ...initialStatus(49983),
    target: { pid: 100, name: 'envd', startedAt: Math.max(0, now - 500), source: 'name', alive: true },
    listener: { port: 49983, bound: true, since: Math.max(0, now - 100), address: '0.0.0.0', pid: 100 },
  };
}

/** A target pid of its own per client (the stuck episode and its auto-dump are per pid). */
const targetPid = (i: number) => 1000 + i;
const targetFound = (i: number, now: number): EventBody => ({
  kind: 'target.found',
  pid: targetPid(i),
  name: 'envd',
  startedAt: Math.max(0, now - 1),
  source: 'name',
});

/** Tries per client: on a busy machine a welcome can take longer than the client waits. */
const CONNECT_TRIES = 3;

async function connectAll(paths: string[], readyEvery: number, deadlineMs: number): Promise<void> {
  const t0 = performance.now();
  let failed = 0;
  let next = 0;
  const retry: number[] = [];
  const tries = new Map<number, number>();
  const worker = async () => {
    while ((retry.length > 0 || next < paths.length) && performance.now() - t0 < deadlineMs) {
      const i = retry.length > 0 ? retry.shift()! : next++;
      const ready = readyEvery > 0 && i % readyEvery === 0;
      const c = new ProbeClient({
        path: paths[i]!,
        instanceId: `bench${String(i).padStart(11, '0')}`,
        heartbeatMs: HEARTBEAT_INTERVAL_MS,
        deferAcks: true,
        onMessage: (m, client) => void answerThreadsDump(m, client),
        ...(ready ? { status: readyStatus(performance.now()) } : {}),
      });
      try {
        await c.connect();
      } catch {
        c.close();
        const n = (tries.get(i) ?? 0) + 1;
        tries.set(i, n);
        if (n < CONNECT_TRIES) retry.push(i);
        else failed++;
        continue;
      }
      clients[i] = c;
      void c.closed.then(() => closed++);
      // One small batch a second, starting at a random offset so the fleet is spread out.
      const tick = () => {
        if (c.socket?.destroyed || quiet) return;
        c.events([{ kind: 'sockets', tcpInUse: 10 + (sent % 7), timeWait: sent % 3 }]);
        sent++;
      };
      timers.push(
        setTimeout(() => {
          tick();
          timers.push(setInterval(tick, 1000));
        }, Math.random() * 1000),
      );
    }
  };
  await Promise.all(Array.from({ length: CONNECT_PARALLEL }, worker));
  // Clients left to retry at the deadline count as failed.
  failed += retry.length;
  out({ op: 'connected', n: next - failed, failed, ms: performance.now() - t0, cut: paths.length - next });
}

function stop(): never {
  for (const t of timers) clearTimeout(t);
  for (const c of clients) c?.close();
  process.exit(0);
}

setTimeout(stop, MAX_LIFETIME_MS).unref();
const rl = readline.createInterface({ input: process.stdin });
rl.on('close', stop);
rl.on('line', (line) => {
  const m = JSON.parse(line) as { op: string; paths?: string[]; readyEvery?: number; deadlineMs?: number; i?: number; name?: string };
  switch (m.op) {
    case 'connect':
      void connectAll(m.paths!, m.readyEvery ?? 0, m.deadlineMs ?? Number.POSITIVE_INFINITY);
      return;
    case 'target': {
      const c = clients[m.i!];
      if (!c) return out({ op: 'target', at: null });
      c.events([targetFound(m.i!, performance.now())]);
      return out({ op: 'target', at: wallNow() });
    }
    case 'bind': {
      const c = clients[m.i!];
      if (!c) return out({ op: 'bind', i: m.i, at: null });
      const now = performance.now();
      c.events([targetFound(m.i!, now), { kind: 'listener.bound', port: 49983, address: '0.0.0.0', inode: 1, pid: targetPid(m.i!) }]);
      return out({ op: 'bind', i: m.i, at: wallNow() });
    }
    case 'phase': {
      const c = clients[m.i!];
      if (!c) return out({ op: 'phase', name: m.name, at: null });
      c.events([{ kind: 'phase', source: 'log', name: m.name! }]);
      return out({ op: 'phase', name: m.name, at: wallNow() });
    }
    case 'stats': {
      const acked = clients.reduce((a, c) => a + (c && c.acked >= c.seq ? 1 : 0), 0);
      return out({ op: 'stats', sent, acked, closed });
    }
    case 'seqs':
      return out({ op: 'seqs', seqs: clients.map((c) => (c ? [c.seq, c.acked] : null)) });
    case 'quiet':
      quiet = true;
      return out({ op: 'quiet' });
    case 'resume':
      quiet = false;
      return out({ op: 'resume' });
    case 'stop':
      return stop();
  }
});
