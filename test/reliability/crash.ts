// Crash safety: the collector SIGKILLed at random points while probes stream, a probe
// SIGKILLed, SQLite killed inside a write transaction, and a full disk. The figure that
// matters is always the same: every event a probe numbered is stored exactly once (its
// sent sequence compared with what is stored), and nothing is acked that was not stored.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT, allEvents, startCollector, type CollectorProcess } from '../harness/collector.js';
import { descendants, startSandbox, type Sandbox } from '../harness/sandbox.js';
import { waitFor } from '../support/wait.js';
import { checkSeqs, mib, rssOf, seeded, secs, sumSeqs, type SeqCheck } from './check.js';
import type { ReliabilityRow, ScenarioOptions } from './row.js';
import { Streamer } from './streamer.js';

const AREA = 'crash safety';
const COMMAND = 'node test/run-ts.mjs test/reliability/run.ts crash';
const COLLECTOR_ARGS = ['--stall-after', '60s'];
/** Events per 10 ms tick and streamer: 100 events/s each. */
const PER_TICK = 1;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function register(c: CollectorProcess, id: string, udsPath: string): Promise<void> {
  const r = await c.api('PUT', `/v1/sandboxes/${id}`, { udsPath });
  if (r.status >= 300) throw new Error(`register ${id}: ${r.status} ${JSON.stringify(r.body)}`);
}

async function kill9(c: CollectorProcess): Promise<void> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return;
  const exited = new Promise((r) => c.proc.once('exit', r));
  c.proc.kill('SIGKILL');
  await exited;
}

async function waitState(c: CollectorProcess, id: string, ok: (state: string) => boolean, timeoutMs = 20_000): Promise<void> {
  await waitFor(
    `sandbox ${id} state`,
    async () => {
      const r = await c.api('GET', `/v1/sandboxes/${id}`);
      return r.status === 200 && ok(r.body.state);
    },
    { timeoutMs },
  );
}

/** Pauses the streamers and waits until the collector acked everything they numbered. */
async function drain(streamers: Streamer[], timeoutMs = 30_000): Promise<void> {
  for (const s of streamers) s.pause();
  await waitFor('every event acked', () => streamers.every((s) => s.acked === s.ring.lastSeq), { timeoutMs }).catch(() => undefined);
}

interface StreamCheck extends SeqCheck {
  /** Stored events whose payload says another seq than the one they are filed under. */
  misfiled: number;
  /** Acked at some moment but not stored now. */
  ackedNotStored: number;
}

async function checkStreamer(c: CollectorProcess, s: Streamer): Promise<StreamCheck> {
  const events = (await allEvents(c, s.id)).filter((e) => e.seq !== null);
  const seqs = events.map((e) => e.seq as number);
  const stored = new Set(seqs);
  let ackedNotStored = 0;
  for (let q = 1; q <= s.maxAcked; q++) if (!stored.has(q)) ackedNotStored++;
  return {
    ...checkSeqs(s.ring.lastSeq, seqs),
    misfiled: events.filter((e) => e.data.status !== String(e.seq)).length,
    ackedNotStored,
  };
}

function sumStreams(checks: StreamCheck[]): StreamCheck {
  return {
    ...sumSeqs(checks),
    misfiled: checks.reduce((n, c) => n + c.misfiled, 0),
    ackedNotStored: checks.reduce((n, c) => n + c.ackedNotStored, 0),
  };
}

const clean = (c: StreamCheck) => c.lost === 0 && c.duplicated === 0 && c.unexpected === 0 && c.misfiled === 0 && c.ackedNotStored === 0;
const streamText = (c: StreamCheck) =>
  `${c.sent} events, ${c.lost} lost, ${c.duplicated} duplicated, ${c.misfiled} misfiled, ${c.ackedNotStored} acked but not stored`;

/** A real sandbox's numbered events: what its hellos said it had, against what is stored. */
async function checkSandbox(c: CollectorProcess, id: string): Promise<SeqCheck & { gaps: number }> {
  const events = await allEvents(c, id);
  const seqs = events.filter((e) => e.seq !== null).map((e) => e.seq as number);
  const hellos = events.filter((e) => e.kind === 'session.open').map((e) => e.data.lastSeq as number);
  return { ...checkSeqs(Math.max(0, ...seqs, ...hellos), seqs), gaps: events.filter((e) => e.kind === 'gap').length };
}

// ---- collector SIGKILL during busy boots ------------------------------------------------

async function collectorKills(opts: ScenarioOptions, root: string): Promise<ReliabilityRow> {
  const kills = opts.full ? 20 : 3;
  const nStreamers = opts.full ? 6 : 3;
  const random = seeded(kills);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-crash-'));
  let c = await startCollector({ dataDir, args: COLLECTOR_ARGS });
  const streamers: Streamer[] = [];
  const boots: Sandbox[] = [];
  let restarts = 0;
  try {
    for (let i = 0; i < nStreamers; i++) {
      const s = new Streamer(`stream${i}`, path.join(root, `s${i}`), `feed${String(i).padStart(12, '0')}`);
      streamers.push(s);
      await s.start();
      await register(c, s.id, s.udsPath);
      s.stream(PER_TICK);
    }
    // Real probes booting a slow envd (12 phases, 300 ms each) while the collector dies.
    for (let i = 0; i < (opts.full ? 2 : 1); i++) {
      const sb = await startSandbox({ id: `boot${i}`, root, envd: ['-slow', '300ms'] });
      boots.push(sb);
      await register(c, sb.id, sb.udsPath);
    }
    for (let k = 0; k < kills; k++) {
      await sleep(200 + random() * 1800);
      await kill9(c);
      opts.log(`collector SIGKILL ${k + 1}/${kills}`);
      await sleep(random() * 500);
      c = await startCollector({ dataDir, args: COLLECTOR_ARGS });
      restarts++;
    }
    await drain(streamers);
    const check = sumStreams(await Promise.all(streamers.map((s) => checkStreamer(c, s))));
    const real = [];
    for (const sb of boots) {
      await waitState(c, sb.id, (s) => s === 'ready', 30_000).catch(() => undefined);
      real.push(await checkSandbox(c, sb.id));
    }
    const realSum = sumSeqs(real);
    const gaps = real.reduce((n, r) => n + r.gaps, 0);
    return {
      area: AREA,
      scenario: `collector SIGKILL at random points ×${kills} during busy boots (${nStreamers} probes streaming 100 events/s each, ${boots.length} envd booting)`,
      figure: `${streamText(check)}; real probes: ${realSum.sent} events, ${realSum.lost} lost, ${realSum.duplicated} duplicated, ${gaps} gaps; ${restarts}/${kills} restarts`,
      held: clean(check) && realSum.lost === 0 && realSum.duplicated === 0 && gaps === 0 && restarts === kills,
      command: COMMAND,
    };
  } finally {
    await c.stop();
    for (const s of streamers) await s.stop();
    for (const sb of boots) await sb.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

// ---- probe SIGKILL ------------------------------------------------------------------------

function isProbe(pid: number): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('vsockdiag-probe');
  } catch {
    return false;
  }
}

/** Starts the probe again with the command line it had, in the sandbox's namespaces. */
function restartProbe(sb: Sandbox, argv: string[]): { pid: number; stop: () => void } {
  let cmd = argv;
  if (sb.isolated) {
    const init = descendants(sb.proc.pid!).find((p) => {
      try {
        return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('init.sh');
      } catch {
        return false;
      }
    });
    if (!init) throw new Error(`${sb.id}: no init in the sandbox`);
    cmd = ['nsenter', '-t', String(init), '-m', '-n', '-p', '--', ...argv];
  }
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio: 'ignore' });
  const stop = () => {
    for (const p of [...descendants(child.pid!), child.pid!]) {
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  };
  return { pid: child.pid!, stop };
}

async function probeKills(opts: ScenarioOptions, root: string): Promise<ReliabilityRow> {
  const rounds = opts.full ? 5 : 1;
  const c = await startCollector({ args: COLLECTOR_ARGS });
  const sb = await startSandbox({ id: 'pkill', root });
  const restarted: Array<() => void> = [];
  const silentMs: number[] = [];
  const backMs: number[] = [];
  try {
    await register(c, sb.id, sb.udsPath);
    await waitState(c, sb.id, (s) => s === 'ready', 30_000);
    // The first probe is the sandbox's; each later one descends from our nsenter.
    let probeOf = () => sb.pidsOf('vsockdiag-probe')[0];
    for (let r = 0; r < rounds; r++) {
      const pid = await waitFor('the probe process', probeOf);
      const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
      const t0 = Date.now();
      process.kill(pid, 'SIGKILL');
      await waitState(c, sb.id, (s) => s === 'silent');
      silentMs.push(Date.now() - t0);
      const t1 = Date.now();
      const again = restartProbe(sb, argv);
      restarted.push(again.stop);
      // Not nsenter itself (its command line names the probe too): the node it started.
      probeOf = () => descendants(again.pid).find((p) => isProbe(p));
      await waitState(c, sb.id, (s) => s === 'ready', 30_000);
      backMs.push(Date.now() - t1);
    }
    return {
      area: AREA,
      scenario: `probe SIGKILL ×${rounds}, then a probe started again`,
      figure: `silent ${silentMs.map(secs).join(', ')} after the kill; ready again ${backMs.map(secs).join(', ')} after the new probe started`,
      held: silentMs.length === rounds && backMs.length === rounds,
      command: COMMAND,
    };
  } finally {
    for (const stop of restarted) stop();
    await sb.stop();
    await c.stop();
  }
}

// ---- SQLite killed inside a write transaction ---------------------------------------------

/** Runs `body` in a Node child with better-sqlite3 and `db` open on the collector's database. */
function sqliteChild(dataDir: string, body: string): ReturnType<typeof spawn> {
  const script = `const Database = require('better-sqlite3'); const db = new Database(${JSON.stringify(
    path.join(dataDir, 'vsockdiag.db'),
  )}); ${body}`;
  return spawn(process.execPath, ['-e', script], { cwd: path.join(ROOT, 'host-collector'), stdio: ['ignore', 'pipe', 'pipe'] });
}

function sqliteQuery(dataDir: string, sql: string): unknown {
  const script = `const Database = require('better-sqlite3'); const db = new Database(${JSON.stringify(
    path.join(dataDir, 'vsockdiag.db'),
  )}); process.stdout.write(JSON.stringify(db.prepare(${JSON.stringify(sql)}).all())); db.close();`;
  const r = spawnSync(process.execPath, ['-e', script], { cwd: path.join(ROOT, 'host-collector'), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`sqlite query failed: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

async function sqliteKill(opts: ScenarioOptions, root: string): Promise<ReliabilityRow> {
  const rounds = opts.full ? 5 : 1;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-sql-'));
  let c = await startCollector({ dataDir, args: COLLECTOR_ARGS });
  const s = new Streamer('sqlite', path.join(root, 'sql'), 'feedsqlite000000');
  const uncommitted = 5000;
  let committedKept = 0;
  let uncommittedKept = 0;
  let starts = 0;
  try {
    await s.start();
    await register(c, s.id, s.udsPath);
    for (let r = 0; r < rounds; r++) {
      s.stream(PER_TICK);
      await sleep(500);
      await drain([s]);
      // The collector dies first (its last commits are in the WAL, not checkpointed), then
      // another writer commits once and dies holding a write transaction.
      await kill9(c);
      const child = sqliteChild(
        dataDir,
        `db.pragma('wal_autocheckpoint = 0');
         const ins = db.prepare("INSERT INTO events (sandbox_id, generation, seq, kind, t_host, data, bytes) VALUES ('sqlite-other', 0, NULL, ?, 0, '{}', 2)");
         db.transaction(() => { for (let i = 0; i < 100; i++) ins.run('committed'); })();
         db.exec('BEGIN IMMEDIATE');
         for (let i = 0; i < ${uncommitted}; i++) ins.run('uncommitted');
         process.stdout.write('in-tx\\n');
         setInterval(() => {}, 1000);`,
      );
      await new Promise<void>((resolve, reject) => {
        let out = '';
        child.stdout!.on('data', (d) => {
          out += d;
          if (out.includes('in-tx')) resolve();
        });
        child.once('exit', (code) => reject(new Error(`sqlite writer exited early (${code})`)));
      });
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
      c = await startCollector({ dataDir, args: COLLECTOR_ARGS });
      starts++;
    }
    s.stream(PER_TICK);
    await sleep(500);
    await drain([s]);
    const check = await checkStreamer(c, s);
    await c.stop();
    const kinds = sqliteQuery(dataDir, "SELECT kind, COUNT(*) AS n FROM events WHERE sandbox_id = 'sqlite-other' GROUP BY kind") as Array<{
      kind: string;
      n: number;
    }>;
    committedKept = kinds.find((k) => k.kind === 'committed')?.n ?? 0;
    uncommittedKept = kinds.find((k) => k.kind === 'uncommitted')?.n ?? 0;
    const integrity = (sqliteQuery(dataDir, 'PRAGMA integrity_check') as Array<{ integrity_check: string }>)[0]?.integrity_check;
    return {
      area: AREA,
      scenario: `SQLite writer SIGKILLed inside a write transaction (WAL, collector killed before it) ×${rounds}`,
      figure: `collector started ${starts}/${rounds}; integrity_check ${integrity}; committed rows kept ${committedKept}/${100 * rounds}, uncommitted kept ${uncommittedKept}/${uncommitted * rounds}; probe: ${streamText(check)}`,
      held:
        starts === rounds &&
        integrity === 'ok' &&
        committedKept === 100 * rounds &&
        uncommittedKept === 0 &&
        clean(check) &&
        check.sent > 0,
      command: COMMAND,
    };
  } finally {
    await c.stop();
    await s.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

// ---- a full disk --------------------------------------------------------------------------

/** Fills the file system holding `dir` with one file; returns its path. */
function fill(dir: string): string {
  const file = path.join(dir, 'filler');
  const fd = fs.openSync(file, 'w');
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  try {
    for (;;) fs.writeSync(fd, chunk);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    fs.closeSync(fd);
  }
  return file;
}

async function diskFull(opts: ScenarioOptions, root: string): Promise<ReliabilityRow> {
  const fullMs = opts.full ? 20_000 : 4000;
  const mnt = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-disk-'));
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', mnt]).status === 0;
  if (!mounted) {
    fs.rmSync(mnt, { recursive: true, force: true });
    return {
      area: AREA,
      scenario: 'a full disk under the store (16 MiB tmpfs)',
      figure: 'not run: mounting a tmpfs needs root',
      held: false,
      command: COMMAND,
    };
  }
  const dataDir = path.join(mnt, 'data');
  let c: CollectorProcess | null = null;
  const streamers: Streamer[] = [];
  try {
    c = await startCollector({ dataDir, args: COLLECTOR_ARGS });
    for (let i = 0; i < 2; i++) {
      const s = new Streamer(`disk${i}`, path.join(root, `d${i}`), `feeddisk${String(i).padStart(7, '0')}`);
      streamers.push(s);
      await s.start();
      await register(c, s.id, s.udsPath);
      s.stream(PER_TICK);
    }
    await waitFor('events stored', () => streamers.every((s) => s.acked > 50));
    const filler = fill(mnt);
    const full0 = Date.now();
    const ackedAtFull = streamers.map((s) => s.acked);
    const rssStart = rssOf(c.proc.pid!) ?? 0;
    await sleep(fullMs);
    const ackedDuringFull = streamers.reduce((n, s, i) => n + (s.maxAcked - ackedAtFull[i]!), 0);
    const pendingAtEnd = streamers.reduce((n, s) => n + (s.ring.lastSeq - s.acked), 0);
    const alive = c.proc.exitCode === null && c.proc.signalCode === null;
    const rssFull = rssOf(c.proc.pid!) ?? 0;
    const logs = c.logs();
    if (!alive) opts.log(`collector died on a full disk:\n${logs.slice(-4000)}`);
    const clearError = /disk is full|SQLITE_FULL/i.test(logs);
    fs.rmSync(filler);
    const freed = Date.now();
    await drain(streamers, 30_000);
    const recoveredMs = Date.now() - freed;
    const check = sumStreams(await Promise.all(streamers.map((s) => checkStreamer(c!, s))));
    return {
      area: AREA,
      scenario: `a full disk under the store for ${secs(Date.now() - full0 - recoveredMs)} (16 MiB tmpfs, 2 probes streaming)`,
      figure:
        `collector ${alive ? 'up' : 'DOWN'}; error logged: ${clearError ? 'yes' : 'no'}; ${ackedDuringFull} events acked while full (a few in flight at the moment of filling), ` +
        `${pendingAtEnd} held back in the probes; collector RSS ${mib(rssStart)} → ${mib(rssFull)}; all acked ${secs(recoveredMs)} after space returned; ${streamText(check)}`,
      held: alive && clearError && clean(check),
      command: COMMAND,
    };
  } finally {
    if (c) await c.stop();
    for (const s of streamers) await s.stop();
    spawnSync('umount', ['-l', mnt]);
    fs.rmSync(mnt, { recursive: true, force: true });
  }
}

export async function run(opts: ScenarioOptions): Promise<ReliabilityRow[]> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-c-'));
  const rows: ReliabilityRow[] = [];
  try {
    for (const part of [collectorKills, probeKills, sqliteKill, diskFull]) {
      const row = await part(opts, root);
      opts.log(`${row.held ? 'held' : 'FAILED'}: ${row.scenario}: ${row.figure}`);
      rows.push(row);
    }
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
  return rows;
}
