// Runs a real collector process (the built bundle) for integration tests and benchmarks,
// and talks to its API. The process is ours: stop() ends it by pid, SIGKILL if needed.

import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../support/wait.js';
import { spawnTethered } from './tether.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const COLLECTOR_BIN = path.join(ROOT, 'host-collector/dist/vsockdiag.js');
export const PROBE_BIN = path.join(ROOT, 'guest-probe/dist/vsockdiag-probe.js');
/** The environment the guest units (deploy/guest/) start the probe with, for benchmarks that
 *  measure what init runs: one glibc malloc arena instead of one per thread that mallocs
 *  (V8's platform workers, libuv's pool), which saves about 1 MiB of RssAnon (of 11). */
export const PROBE_ENV = { MALLOC_ARENA_MAX: '1' } as const;
/** What a service in a guest inherits from init (systemd, runit, OpenRC): a PATH (systemd's
 *  default) and nothing else. Simulated guests and the benchmarks' Node baselines run with it,
 *  never with this process's environment: a NODE_EXTRA_CA_CERTS there (set on the machines we
 *  measure on) makes every Node start-up load a certificate store, ~50 ms of CPU and 1.1 MiB
 *  of RssAnon here that no guest pays, and a VSOCKDIAG_* variable would configure the probe. */
export const GUEST_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' } as const;

/** The probe's flags for a start alone: its collector is the Unix socket `sock`, and every
 *  optional part (command port, notify socket, /dev/kmsg) is off. */
export function soloProbeArgs(sock: string): string[] {
  return ['--connect', `unix:${sock}`, '--listen', 'off', '--notify-socket', 'off', '--kmsg', 'off'];
}

export function requireBuilt(): void {
  for (const f of [COLLECTOR_BIN, PROBE_BIN]) {
    if (!fs.existsSync(f)) throw new Error(`${path.relative(ROOT, f)} is missing: run "make build" first`);
  }
}

export interface CollectorProcess {
  url: string;
  /** The readiness thread's URL, when started with --readiness-http. */
  readinessUrl: string | null;
  dataDir: string;
  proc: ChildProcess;
  /** Everything the collector logged (pino JSON lines on stderr). */
  logs: () => string;
  api: <T = any>(method: string, p: string, body?: unknown) => Promise<{ status: number; body: T }>;
  stop: (signal?: NodeJS.Signals) => Promise<void>;
}

/**
 * Starts a collector. Without `dataDir` it gets a temporary one of its own, removed by stop()
 * (or at once if it fails to start); a given `dataDir` is the caller's and is kept.
 * `env` adds to this process's environment for the collector alone; `nodeArgs` go to node
 * before the bundle (a preload, a V8 flag).
 */
export async function startCollector(
  opts: { dataDir?: string; args?: string[]; port?: number; env?: NodeJS.ProcessEnv; nodeArgs?: string[] } = {},
): Promise<CollectorProcess> {
  requireBuilt();
  const owned = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'vd-data-'));
  const removeData = () => {
    if (owned) fs.rmSync(dataDir, { recursive: true, force: true });
  };
  const command = [COLLECTOR_BIN, 'collector', '--http', `127.0.0.1:${opts.port ?? 0}`, '--data', dataDir, ...(opts.args ?? [])];
  // Killed with this process should it die before stop() (tether.ts).
  const proc = spawnTethered([process.execPath, ...(opts.nodeArgs ?? []), ...command], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, VSOCKDIAG_LOG_LEVEL: 'debug', ...opts.env },
  });
  let log = '';
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => (log += d));
  const started = new Promise<ReadyRecord>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`collector did not start in 15 s:\n${log}`)), 15_000);
    const onData = () => {
      const ready = readyRecord(log);
      if (ready) {
        clearTimeout(timer);
        proc.stderr!.removeListener('data', onData);
        resolve(ready);
      }
    };
    proc.stderr!.on('data', onData);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`collector exited with ${code}:\n${log}`));
    });
  });
  let ready: ReadyRecord;
  try {
    ready = await started;
  } catch (err) {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await exited;
    }
    removeData();
    throw err;
  }
  const { url } = ready;
  const api = async <T>(method: string, p: string, body?: unknown) => {
    const res = await fetch(`${url}${p}`, {
      method,
      ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T };
  };
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    removeData();
  };
  return { url, readinessUrl: ready.readiness ?? null, dataDir, proc, logs: () => log, api, stop };
}

interface ReadyRecord {
  url: string;
  readiness?: string;
}

/** The collector's "collector ready" log record (its URLs), once it is in `log`. */
function readyRecord(log: string): ReadyRecord | undefined {
  // Whole lines only: the last piece may still be arriving.
  for (const line of log.split('\n').slice(0, -1)) {
    if (!line.includes('"collector ready"')) continue;
    const record = JSON.parse(line) as { msg?: string } & Partial<ReadyRecord>;
    if (record.msg === 'collector ready' && record.url)
      return { url: record.url, ...(record.readiness ? { readiness: record.readiness } : {}) };
  }
  return undefined;
}

/** Waits, as an orchestrator does, with the readiness long-poll until the sandbox settles
 *  (ready, stuck or exited); throws unless it settled as `want`. No polling: for benchmarks
 *  that time the collector while they wait. */
export async function settlesAs(c: CollectorProcess, id: string, want: 'ready' | 'stuck' | 'exited', timeoutMs = 30_000): Promise<void> {
  const { state, reason } = (await c.api('GET', `/v1/sandboxes/${id}/readiness?wait=${timeoutMs}`)).body;
  if (state !== want) throw new Error(`${id}: ${state}, not ${want}, after up to ${timeoutMs / 1000} s: ${reason}`);
}

/** Waits until the sandbox is in `state` and returns its detail. */
export async function waitForState(c: CollectorProcess, id: string, state: string | string[], timeoutMs = 15_000): Promise<any> {
  const want = Array.isArray(state) ? state : [state];
  return waitFor(
    `sandbox ${id} to be ${want.join('|')}`,
    async () => {
      const r = await c.api('GET', `/v1/sandboxes/${id}`);
      return r.status === 200 && want.includes(r.body.state) ? r.body : null;
    },
    { timeoutMs },
  );
}

/** All events of a sandbox (paged). */
export async function allEvents(c: CollectorProcess, id: string, kind?: string): Promise<any[]> {
  const out: any[] = [];
  let after = 0;
  for (;;) {
    const r = await c.api<{ events: any[]; next: number; more: boolean }>(
      'GET',
      `/v1/sandboxes/${id}/events?after=${after}&limit=1000${kind ? `&kind=${kind}` : ''}`,
    );
    out.push(...r.body.events);
    if (!r.body.more) return out;
    after = r.body.next;
  }
}

/** Runs the vsockdiag CLI against a collector; resolves with exit code and output. */
export function cli(
  c: CollectorProcess,
  args: string[],
  timeoutMs = 60_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [COLLECTOR_BIN, ...args], {
      env: { ...process.env, VSOCKDIAG_URL: c.url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
