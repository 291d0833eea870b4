// The probe's per-tick work, timed call by call. Runs INSIDE the benchmark's namespace (see
// probe-cost.ts, which bundles this file with esbuild and starts it there), next to the load:
// `node probe-micro.mjs OUT.json TARGET PORT`.
//
// Measured, interleaved round by round so that machine noise falls on all of them alike:
//   sample   – one steady-state probe tick once the target is known: TargetWatcher.tick
//              (its /proc/<pid>/stat), ListenerWatcher.tick (sock_diag LISTEN query for PORT),
//              SocketWatcher.tick with totals only (/proc/net/sockstat);
//   census   – socketCensus({ top: 10 }), the per-remote census the probe runs every 30 s (sooner on growth);
// and the baselines, which the probe does NOT do per tick:
//   tcp      – readTcpSockets LISTEN-on-PORT over /proc/net/tcp + tcp6 (the /proc fallback
//              of the listener check: the kernel formats every socket anyway);
//   tcpAll   – readTcpSockets() with no filter (every socket parsed into an object);
//   scan     – findProcessByName for a name no process has (a full /proc/*/comm scan).
// Bounded by rounds and by a deadline. Warm-up first; the watchers' first ticks (target
// found, listener bound: the edge work) happen in the warm-up, not in the figures.

import fs from 'node:fs';
import type { EventBody } from '@vsockdiag/proto';
import { socketCensus } from '../../guest-probe/src/diag.js';
import { ListenerWatcher, pickListenerQuery } from '../../guest-probe/src/listener.js';
import { findProcessByName, listPids, readSockstat, readTcpSockets, sockstatFiles, TcpState } from '../../guest-probe/src/proc/index.js';
import { SocketWatcher } from '../../guest-probe/src/sockets.js';
import { TargetWatcher } from '../../guest-probe/src/target.js';
import { summarize } from './stats.js';

const [outFile, targetName = 'fake-envd', portArg = '49983'] = process.argv.slice(2);
if (!outFile) throw new Error('usage: probe-micro OUT.json TARGET PORT');
const port = Number(portArg);
const progress = (msg: string) => process.stderr.write(`micro: ${msg}\n`);

const ROUNDS = Number(process.env.VSOCKDIAG_BENCH_MICRO_ROUNDS ?? 20);
const DEADLINE_MS = Number(process.env.VSOCKDIAG_BENCH_MICRO_MS ?? 20_000);
/** Calls per round of each measurement: cheap things more often, so each has enough samples. */
const PER_ROUND = { sample: 250, target: 100, listener: 100, sockstat: 100, census: 15, tcp: 3, tcpAll: 2, scan: 5 } as const;
type Name = keyof typeof PER_ROUND;

const emitted: Record<string, number> = {};
const emit = (body: EventBody) => {
  emitted[body.kind] = (emitted[body.kind] ?? 0) + 1;
};
const procRoot = '/proc';
const target = new TargetWatcher({ name: targetName, pidFile: null, procRoot, emit });
const query = pickListenerQuery(procRoot);
const listener = new ListenerWatcher({ port, procRoot, query, emit, targetPid: () => target.pid });
const sinceBoot = () => 0;
const sockets = new SocketWatcher({ procRoot, emit, census: null, sinceBootMs: sinceBoot });

// Warm-up and the edges: find the target (one /proc scan), see the listener bound. The target
// was started just before this script: give it (at most) 10 s.
const pause = new Int32Array(new SharedArrayBuffer(4));
for (const until = Date.now() + 10_000; Date.now() < until; Atomics.wait(pause, 0, 0, 20)) {
  if (target.pid === null) target.tick();
  if (target.pid !== null) listener.tick();
  if (emitted['listener.bound']) break;
}
if (target.pid === null) throw new Error(`no process named ${targetName} in this namespace`);
if (!emitted['listener.bound']) throw new Error(`no listener on :${port} (query source ${query.source})`);
const missing = `no-such-process-${process.pid}`;
const LISTEN_ONLY = new Set<number>([TcpState.LISTEN]);

const work: Record<Name, () => unknown> = {
  sample: () => {
    target.tick();
    listener.tick();
    sockets.tick();
  },
  target: () => target.tick(),
  listener: () => listener.tick(),
  sockstat: () => sockets.tick(),
  census: () => socketCensus({ top: 10 }),
  tcp: () => readTcpSockets({ states: LISTEN_ONLY, localPort: port }, procRoot),
  tcpAll: () => readTcpSockets({}, procRoot),
  scan: () => findProcessByName(missing, procRoot),
};
const names = Object.keys(PER_ROUND) as Name[];
for (const n of names) for (let i = 0; i < Math.max(3, PER_ROUND[n]); i++) work[n]();

// What the namespace holds, as the probe would see it.
const census = socketCensus({ top: 10 });
const sockstat = readSockstat(sockstatFiles(procRoot));
const tcpAll = readTcpSockets({}, procRoot);
const processes = listPids(procRoot).length;
if (findProcessByName(missing, procRoot) !== null) throw new Error('the missing name was found');

const us: Record<Name, number[]> = Object.fromEntries(names.map((n) => [n, []])) as unknown as Record<Name, number[]>;
const started = Date.now();
let rounds = 0;
for (; rounds < ROUNDS && Date.now() - started < DEADLINE_MS; rounds++) {
  for (const n of names) {
    const f = work[n];
    const out = us[n];
    for (let i = 0; i < PER_ROUND[n]; i++) {
      const t0 = process.hrtime.bigint();
      f();
      out.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
  }
  if ((rounds + 1) % 5 === 0) progress(`round ${rounds + 1}/${ROUNDS}`);
}

const result = {
  load: {
    processes,
    tcpInUse: sockstat?.tcpInUse ?? null,
    timeWait: sockstat?.tcpTimeWait ?? null,
    censusTotal: census.total,
    censusByState: Object.fromEntries(Object.entries(census.byState).filter(([, v]) => v > 0)),
    censusTop: census.byRemote.slice(0, 3),
    procNetTcpLines: tcpAll.length,
  },
  listenerSource: query.source,
  targetPid: target.pid,
  rounds,
  elapsedMs: Date.now() - started,
  emittedDuringRun: emitted,
  us: Object.fromEntries(names.map((n) => [n, summarize(us[n])])),
};
fs.writeFileSync(outFile, `${JSON.stringify(result, null, 2)}\n`);
progress(`done: ${rounds} rounds in ${result.elapsedMs} ms`);
