// The fleet of light probes for the collector-load benchmark (collector-load.ts), run as a
// child process so their CPU is not the benchmark's (nor the collector's). Speaks JSON
// lines: commands on stdin, answers on stdout.
//
//   {"op":"connect","paths":[...],"readyEvery":2}  → {"op":"connected","n","failed","ms"}
//       one ProbeClient per path (heartbeat 1 s); every `readyEvery`-th one says hello with
//       a status whose target is up and bound (→ `ready`), the others with the initial status
//       (→ `booting`). Each then sends one `sockets` totals event a second, at its own offset.
//   {"op":"phase","i":N,"name":"..."}                → {"op":"phase","name","at"}
//       client N sends a `phase` event (source "log": it does not change the state); `at`
//       is the wall clock (sub-ms) just after the write.
//   {"op":"stats"}                                   → {"op":"stats","sent","acked","closed"}
//   {"op":"seqs"}                                    → {"op":"seqs","seqs":[[seq, acked] | null, …]}
//       each client's last seq sent and highest ack (soak: nothing sent may be unacked)
//   {"op":"quiet"}                                   → {"op":"quiet"}: the clients stop sending
//   {"op":"stop"}                                    → closes everything and exits.
//
// Bounded: it exits by itself when stdin closes (the benchmark went away) or after
// MAX_LIFETIME_MS whatever happens.

import readline from 'node:readline';
import { initialStatus, type ProbeStatus } from '@vsockdiag/proto';
import { ProbeClient } from '../harness/probe-client.js';

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

async function connectAll(paths: string[], readyEvery: number): Promise<void> {
  const t0 = performance.now();
  let failed = 0;
  let next = 0;
  const worker = async () => {
    while (next < paths.length) {
      const i = next++;
      const ready = readyEvery > 0 && i % readyEvery === 0;
      const c = new ProbeClient({
        path: paths[i]!,
        instanceId: `bench${String(i).padStart(11, '0')}`,
        heartbeatMs: 1000,
        ...(ready ? { status: readyStatus(performance.now()) } : {}),
      });
      try {
        await c.connect();
      } catch {
        failed++;
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
  out({ op: 'connected', n: paths.length - failed, failed, ms: performance.now() - t0 });
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
  const m = JSON.parse(line) as { op: string; paths?: string[]; readyEvery?: number; i?: number; name?: string };
  switch (m.op) {
    case 'connect':
      void connectAll(m.paths!, m.readyEvery ?? 0);
      return;
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
    case 'stop':
      return stop();
  }
});
