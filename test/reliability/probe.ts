// A hardened probe: bounded memory and a small share of the CPU whatever the guest feeds
// it (sd_notify floods, a target with a huge command line and environment and thousands of
// fds, thousands of other processes), and hours without a collector (simulated by a high,
// bounded event rate: the ring stays bounded, and what fell out of it is reported as a
// gap, never dropped silently). The probe is the real one (the built bundle) run on the
// emulator's vsock stand-in, outside any namespace; every process here is ours and ended by pid.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULTS } from '@vsockdiag/proto';
import { PROBE_BIN, allEvents, startCollector, type CollectorProcess } from '../harness/collector.js';
import { NOTIFY_BURST, NOTIFY_EVENTS_PER_SEC, NOTIFY_PAUSE_MS } from '../../guest-probe/src/notify/rate.js';
import { FirecrackerVsock } from '../harness/firecracker.js';
import { waitFor } from '../support/wait.js';
import { mib, rssOf, secs } from './check.js';
import type { ReliabilityRow, ScenarioOptions } from './row.js';

const AREA = 'probe';
const COMMAND = 'node test/run-ts.mjs test/reliability/run.ts probe';
/** The probe's resident memory must stay under this whatever it is fed. */
export const PROBE_RSS_BOUND = 160 * 1024 * 1024;
/** …and its CPU under this share of one core while it reads a target's huge /proc files. */
export const PROBE_CPU_BOUND = 0.5;
/** …and under this while a flood waits in its notify socket: the read rate is bounded, so
 *  what is left is the probe's own sampling (a few % while it looks for its target). */
export const FLOOD_CPU_BOUND = 0.2;
/** Looking for a target among thousands of processes: a scan may take 5 % of the time (target.ts). */
export const SEARCH_CPU_BOUND = 0.1;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const TICKS = 100; // USER_HZ

/** utime + stime of a process, in ms; null when it is gone. */
function cpuMs(pid: number): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / TICKS;
  } catch {
    return null;
  }
}

/** Samples a process's RSS every 200 ms until stopped; returns the peak and the last. */
function watchRss(pid: number): { stop: () => { peak: number; last: number; first: number } } {
  let peak = 0;
  let last = 0;
  let first = 0;
  const timer = setInterval(() => {
    const r = rssOf(pid);
    if (r === null) return;
    if (first === 0) first = r;
    last = r;
    peak = Math.max(peak, r);
  }, 200);
  return {
    stop: () => {
      clearInterval(timer);
      return { peak, last, first };
    },
  };
}

interface Probe {
  vm: FirecrackerVsock;
  udsPath: string;
  notify: string;
  proc: ChildProcess;
  pid: number;
  stop: () => Promise<void>;
}

async function startProbe(dir: string, args: string[]): Promise<Probe> {
  fs.mkdirSync(dir, { recursive: true });
  const udsPath = path.join(dir, 'v.sock');
  const vm = new FirecrackerVsock({ udsPath, guestDir: dir, halfClose: 'firecracker' });
  await vm.start();
  const connectTo = await vm.exposeHostPort(DEFAULTS.vsockPort);
  const notify = path.join(dir, 'notify.sock');
  const proc = spawn(
    process.execPath,
    [
      PROBE_BIN,
      '--connect',
      `unix:${connectTo}`,
      '--listen',
      `unix:${vm.guestListenPath(DEFAULTS.probePort)}`,
      '--notify-socket',
      notify,
      ...args,
    ],
    { stdio: 'ignore' },
  );
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await exited;
    }
    await vm.close();
  };
  try {
    await waitFor('the probe notify socket', () => fs.existsSync(notify), { timeoutMs: 15_000 });
  } catch (err) {
    await stop();
    throw err;
  }
  return { vm, udsPath, notify, proc, pid: proc.pid!, stop };
}

/** What a flood got: datagrams the socket took, and sends refused with EAGAIN (a full queue). */
interface Flooded {
  sent: number;
  refused: number;
}

/**
 * A child that sends sd_notify datagrams as fast as it can for `seconds`. Blocking, a full
 * queue holds it until the probe reads again; non-blocking, it retries at once and counts
 * the EAGAINs (a sender that spins: the hardest on the probe).
 */
function flood(notify: string, opts: { seconds: number; payload?: string; nonBlocking?: boolean }): Promise<Flooded> {
  const script = `
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path, seconds, payload = sys.argv[1], float(sys.argv[2]), sys.argv[3]
s.setblocking(sys.argv[4] != '1')
end = time.monotonic() + seconds
n = refused = 0
while time.monotonic() < end:
    try:
        s.sendto((payload + str(n)).encode(), path)
        n += 1
    except BlockingIOError:
        refused += 1
print(n, refused)
`;
  return new Promise((resolve, reject) => {
    const p = spawn(
      'python3',
      ['-c', script, notify, String(opts.seconds), opts.payload ?? 'STATUS=flood ', opts.nonBlocking ? '1' : '0'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.once('exit', (code) => {
      const [sent, refused] = out.trim().split(' ').map(Number);
      if (code === 0 && sent !== undefined && refused !== undefined) resolve({ sent, refused });
      else reject(new Error(`flood failed: ${err}`));
    });
  });
}

/** One datagram the way envd's notifier sends it: a connected socket, 2 s to get it in. */
function notifyOnce(notify: string, message: string): Promise<void> {
  const script = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.connect(sys.argv[1])
s.settimeout(2.0)
s.send(sys.argv[2].encode())
`;
  return new Promise((resolve, reject) => {
    const p = spawn('python3', ['-c', script, notify, message], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    p.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`notify send failed: ${err}`))));
  });
}

/** How many datagrams a datagram socket's queue holds (senders wait or get EAGAIN past it). */
function dgramQueueLength(): number {
  return Number(fs.readFileSync('/proc/sys/net/unix/max_dgram_qlen', 'utf8'));
}

async function register(c: CollectorProcess, id: string, udsPath: string): Promise<void> {
  const r = await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath });
  if (r.status >= 300) throw new Error(`register ${id}: ${r.status}`);
}

async function detail(c: CollectorProcess, id: string): Promise<any> {
  return (await c.api('GET', `/v1/sandboxes/${id}`)).body;
}

// ---- a notify flood -----------------------------------------------------------------------

async function notifyFlood(opts: ScenarioOptions, root: string, c: CollectorProcess): Promise<ReliabilityRow> {
  const seconds = opts.full ? 60 : 6;
  const p = await startProbe(path.join(root, 'flood'), ['--target', 'no-such-target', '--expect-port', '1']);
  try {
    await register(c, 'flood', p.udsPath);
    await waitFor('the probe connected', async () => (await detail(c, 'flood')).connected === true);
    const sessions0 = (await detail(c, 'flood')).sessions ?? null;
    const rss = watchRss(p.pid);
    const cpu0 = cpuMs(p.pid)!;
    const t0 = Date.now();
    const { sent, refused } = await flood(p.notify, { seconds, nonBlocking: true });
    const wall = Date.now() - t0;
    const cpu = (cpuMs(p.pid)! - cpu0) / wall;
    // What the probe may read in that time: the burst, the rate, and at each pause the one
    // datagram that found the bucket empty. The socket took no more than that plus what
    // its queue holds (and a little for timers that fire late, which only slows it down).
    const readBound = NOTIFY_BURST + ((NOTIFY_EVENTS_PER_SEC + 1000 / NOTIFY_PAUSE_MS) * wall) / 1000;
    const takenBound = readBound * 1.1 + dgramQueueLength() + 1;
    // envd's READY=1 once the flood is over: its 2 s send gets in, and the probe records it.
    const r0 = Date.now();
    const readySent = await notifyOnce(p.notify, 'READY=1\nSTATUS=after the flood').then(
      () => true,
      () => false,
    );
    const readyMs = await waitFor(
      'READY=1 after the flood',
      async () =>
        (await allEvents(c, 'flood', 'phase')).some((e) => e.data.ready === true && e.data.status === 'after the flood')
          ? Date.now() - r0
          : null,
      { timeoutMs: 20_000 },
    ).catch(() => null);
    const r = rss.stop();
    const d = await detail(c, 'flood');
    const alive = p.proc.exitCode === null;
    const connected = await waitFor('the probe connected after the flood', async () => (await detail(c, 'flood')).connected === true, {
      timeoutMs: 15_000,
    }).catch(() => false);
    const stored = (await allEvents(c, 'flood', 'phase')).length;
    // The pauses and drops are said (in a notice every 10 s), not silent; the last says how
    // many datagrams the probe read in all.
    const notices = await waitFor(
      'the rate notice',
      async () => {
        const n = (await allEvents(c, 'flood', 'probe.notice')).filter((e) => /not recorded/.test(e.data.message));
        return n.length ? n : null;
      },
      { timeoutMs: 20_000 },
    ).catch(() => []);
    const read = /(\d+) read\)/.exec(notices.at(-1)?.data.message ?? '')?.[1] ?? '?';
    return {
      area: AREA,
      scenario: `sd_notify flood for ${secs(wall)} (one sender, as fast as it can, retrying on EAGAIN)`,
      figure: `${sent + refused} sends (${Math.round((sent + refused) / (wall / 1000))}/s): ${sent} taken by the socket, ${refused} refused with EAGAIN; the probe read ${read} in all, CPU ${(cpu * 100).toFixed(1)} % of a core, RSS ${mib(r.first)} → peak ${mib(r.peak)}; ${stored} phase events stored (the rate limit), pauses said in ${notices.length} notice(s); READY=1 after it ${readyMs === null ? 'NOT SEEN' : `recorded in ${readyMs} ms`}; link ${connected ? 'up' : 'DOWN'} after${sessions0 !== null ? `, sessions ${sessions0} → ${d.sessions}` : ''}`,
      // The socket takes the rate's worth, and the sender is pushed back: it gets EAGAIN.
      // The flood is recorded at NOTIFY_EVENTS_PER_SEC after a burst, the rest counted. CPU
      // is a speed figure (it follows how busy this machine is): judged in the full run that
      // RELIABILITY.md reports, not in make test's small one.
      held:
        alive &&
        connected === true &&
        sent <= takenBound &&
        refused > sent &&
        readySent &&
        readyMs !== null &&
        r.peak < PROBE_RSS_BOUND &&
        (!opts.full || cpu < FLOOD_CPU_BOUND) &&
        stored <= NOTIFY_BURST + (NOTIFY_EVENTS_PER_SEC * (wall + 2000)) / 1000 + 1 &&
        notices.length > 0,
      command: COMMAND,
    };
  } finally {
    await p.stop();
  }
}

// ---- a target with huge /proc files, among thousands of processes --------------------------

/** Python renamed `name` (comm is the executable's basename): a target the probe finds by name. */
function renamedPython(dir: string, name: string): string {
  const bin = path.join(dir, name);
  // The interpreter itself, not a launcher in front of it (pyenv's shims go by their name).
  const real = spawnSync('python3', ['-c', 'import os, sys; print(os.path.realpath(sys.executable))'], { encoding: 'utf8' }).stdout.trim();
  fs.symlinkSync(real, bin);
  return bin;
}

/** Starts `n` sleeping processes in a group of their own; kill() ends the group by its id. */
function crowd(n: number): Promise<{ kill: () => void }> {
  const script = `
import os, sys, time, signal
n = int(sys.argv[1])
for i in range(n):
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
print('up', flush=True)
time.sleep(3600)
`;
  const p = spawn('python3', ['-c', script, String(n)], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
  const kill = () => {
    try {
      process.kill(-p.pid!, 'SIGKILL');
    } catch {
      /* gone */
    }
  };
  return new Promise((resolve, reject) => {
    p.stdout!.on('data', (d) => {
      if (String(d).includes('up')) resolve({ kill });
    });
    p.once('exit', (code) => reject(new Error(`crowd exited ${code}`)));
  });
}

function hardFdLimit(): number {
  const out = spawnSync('sh', ['-c', 'ulimit -Hn'], { encoding: 'utf8' }).stdout.trim();
  return out === 'unlimited' ? 1_048_576 : Number(out);
}

async function hugeTarget(opts: ScenarioOptions, root: string, c: CollectorProcess): Promise<ReliabilityRow> {
  const dir = path.join(root, 'huge');
  fs.mkdirSync(dir, { recursive: true });
  const nProcs = opts.full ? 4000 : 1500;
  // As many fds as the machine lets one process have, up to 50,000 (a container's hard limit
  // may be lower, and raising it past that is refused even to root).
  const nFds = opts.full ? Math.min(50_000, hardFdLimit() - 200) : 10_000;
  const bin = renamedPython(dir, 'bigtarget');
  const port = 40_000 + (process.pid % 20_000);
  // 720 KiB of arguments (128 KiB is the most one may be), 720 KiB of environment (together
  // under ARG_MAX), and nFds open fds.
  const args = Array.from({ length: 6 }, (_, i) => `${i}`.padEnd(120 * 1024, 'a'));
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH };
  for (let i = 0; i < 6; i++) env[`BIG${i}`] = 'e'.repeat(120 * 1024);
  const script = `
import os, socket, sys, time, resource
resource.setrlimit(resource.RLIMIT_NOFILE, (${nFds + 100}, ${nFds + 100}))
fds = [os.open('/dev/null', os.O_RDONLY) for _ in range(${nFds})]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', ${port})); s.listen(16)
print('up', flush=True)
time.sleep(3600)
`;
  const people = await crowd(nProcs);
  let target: ChildProcess | null = null;
  let p: Probe | null = null;
  try {
    // First the target is not there (yet): every tick looks for it among all the processes.
    p = await startProbe(path.join(dir, 'p'), ['--target', 'bigtarget', '--expect-port', String(port)]);
    const rss = watchRss(p.pid);
    await sleep(1000);
    const search0 = cpuMs(p.pid)!;
    const s0 = Date.now();
    await sleep(opts.full ? 10_000 : 3000);
    const searchCpu = (cpuMs(p.pid)! - search0) / (Date.now() - s0);
    const t = spawn(bin, ['-c', script, ...args], { env, stdio: ['ignore', 'pipe', 'ignore'] });
    target = t;
    await new Promise<void>((resolve, reject) => {
      t.stdout!.on('data', (d) => {
        if (String(d).includes('up')) resolve();
      });
      t.once('exit', (code) => reject(new Error(`target exited ${code}`)));
    });
    const cpu0 = cpuMs(p.pid)!;
    const t0 = Date.now();
    await register(c, 'huge', p.udsPath);
    const ready = await waitFor('the huge target ready', async () => (await detail(c, 'huge')).state === 'ready', {
      timeoutMs: 30_000,
    }).catch(() => false);
    const readyMs = Date.now() - t0;
    // Keep sampling a while: every tick reads the target's /proc files again.
    await sleep(opts.full ? 30_000 : 5000);
    const cpu = (cpuMs(p.pid)! - cpu0) / (Date.now() - t0);
    const r = rss.stop();
    const d = await detail(c, 'huge');
    const samples = await allEvents(c, 'huge', 'target.sample');
    const fds = samples.at(-1)?.data.fds ?? null;
    const targetAlive = t.exitCode === null;
    return {
      area: AREA,
      scenario: `a target with 720 KiB of arguments, 720 KiB of environment and ${nFds} fds, among ${nProcs} other processes`,
      figure: `looking for it among them: probe CPU ${(searchCpu * 100).toFixed(1)} % of a core; found and ready in ${secs(readyMs)} (${d.state}); fds seen ${fds}; probe RSS peak ${mib(r.peak)}, CPU ${(cpu * 100).toFixed(1)} % of a core; target ${targetAlive ? 'unharmed' : 'GONE'}`,
      held:
        ready === true &&
        typeof fds === 'number' &&
        fds >= nFds &&
        r.peak < PROBE_RSS_BOUND &&
        cpu < PROBE_CPU_BOUND &&
        searchCpu < SEARCH_CPU_BOUND &&
        targetAlive,
      command: COMMAND,
    };
  } finally {
    await p?.stop();
    target?.kill('SIGKILL');
    people.kill();
  }
}

// ---- hours without a collector ------------------------------------------------------------

async function noCollector(opts: ScenarioOptions, root: string, c: CollectorProcess): Promise<ReliabilityRow> {
  // A flood as fast as the notify socket takes it: the probe records NOTIFY_EVENTS_PER_SEC of
  // it, about 100 times a busy guest's rate, so each minute stands for well over an hour, and
  // the ring (4,096 events) overflows within the first minute.
  const rounds = opts.full ? 8 : 1;
  const roundSec = opts.full ? 60 : 45;
  const p = await startProbe(path.join(root, 'alone'), ['--target', 'no-such-target', '--expect-port', '1']);
  try {
    const rss = watchRss(p.pid);
    let sent = 0;
    const peaks: number[] = [];
    for (let i = 0; i < rounds; i++) {
      sent += (await flood(p.notify, { seconds: roundSec, payload: `STATUS=alone${i} ` })).sent;
      await sleep(500);
      peaks.push(rssOf(p.pid) ?? 0);
    }
    const r = rss.stop();
    // A collector at last: the probe sends what its ring kept and says what it lost.
    await register(c, 'alone', p.udsPath);
    await waitFor('the probe connected', async () => (await detail(c, 'alone')).connected === true, { timeoutMs: 20_000 });
    // Every number the probe gave out is either stored or inside a gap it reported, once.
    const all = await waitFor(
      'the replay stored',
      async () => {
        const ev = await allEvents(c, 'alone');
        const hello = ev.find((e) => e.kind === 'session.open')?.data.lastSeq ?? 0;
        const seen = new Map<number, number>();
        const add = (q: number) => seen.set(q, (seen.get(q) ?? 0) + 1);
        let stored = 0;
        let lost = 0;
        for (const e of ev) {
          if (e.seq !== null) {
            stored++;
            add(e.seq as number);
          } else if (e.kind === 'gap') {
            lost += e.data.lost as number;
            for (let q = e.data.from as number; q <= (e.data.to as number); q++) add(q);
          }
        }
        const top = Math.max(hello, ...seen.keys());
        let missing = 0;
        for (let q = 1; q <= top; q++) if (!seen.has(q)) missing++;
        const twice = [...seen.values()].filter((n) => n > 1).length;
        return hello > 0 && missing === 0 ? { stored, lost, hello, twice } : null;
      },
      { timeoutMs: 30_000 },
    ).catch(() => null);
    const accounted = all !== null && all.twice === 0;
    // After the first round the ring is full: from then on memory must not grow.
    const late = peaks.slice(1);
    const growth = late.length > 1 ? Math.max(...late) - Math.min(...late) : 0;
    return {
      area: AREA,
      scenario: `no collector for ${rounds} × ${roundSec} s of a notify flood (${sent} datagrams: hours of a busy guest's events)`,
      figure: `probe RSS ${mib(r.first)} → peak ${mib(r.peak)}, ${mib(growth)} apart between rounds; on connecting: ${all?.stored ?? '?'} events replayed and ${all?.lost ?? '?'} reported lost in a gap (the ring holds the newest), of ${all?.hello ?? '?'} numbered before it, none missing or twice`,
      held: r.peak < PROBE_RSS_BOUND && growth < 24 * 1024 * 1024 && accounted && (all?.lost ?? 0) > 0,
      command: COMMAND,
    };
  } finally {
    await p.stop();
  }
}

type Part = (opts: ScenarioOptions, root: string, c: CollectorProcess) => Promise<ReliabilityRow>;

/** Each part makes one row; probe.test.ts runs them one by one. */
export const PARTS: Record<string, Part> = { notifyFlood, hugeTarget, noCollector };

export async function run(opts: ScenarioOptions, parts: Part[] = Object.values(PARTS)): Promise<ReliabilityRow[]> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-p-'));
  const c = await startCollector({ args: ['--stall-after', '60s'] });
  const rows: ReliabilityRow[] = [];
  try {
    for (const part of parts) {
      const row = await part(opts, root, c);
      opts.log(`${row.held ? 'held' : 'FAILED'}: ${row.scenario}: ${row.figure}`);
      rows.push(row);
    }
  } finally {
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return rows;
}
