// A live collector for the reliability scenarios: the collector's source in a child process
// (collector-child.ts) with the options a scenario needs, its API, its RSS and what it logged
// at error level. Ours: stop() ends it by pid (SIGKILL if it does not go), and its data
// folder is removed.

import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import type { CollectorOptions } from '../../host-collector/src/collector/collector.js';
import { REQUIRE_BANNER, bundleForNode } from '../bench/bundle.js';
import { ROOT, requireBuilt } from '../harness/collector.js';

export interface LiveCollector {
  url: string;
  proc: ChildProcess;
  dataDir: string;
  /** Resident set size now (KiB), from /proc; null once it is gone. */
  rssKb(): number | null;
  /** The V8 heap in use just after a full collection (KiB): what the collector holds. Null
   *  once it is gone or when it did not answer within 30 s. */
  heldKb(): Promise<number | null>;
  /** Lines it logged at error level or above (pino JSON). */
  errors(): string[];
  /** Whether it is still running. */
  alive(): boolean;
  api<T = any>(method: string, p: string, body?: unknown, timeoutMs?: number): Promise<{ status: number; body: T; ms: number }>;
  stop(): Promise<void>;
}

let bundle: string | null = null;

/** Bundles collector-child.ts once into host-collector/dist/, beside the dump worker. */
function childBundle(): string {
  requireBuilt();
  if (bundle) return bundle;
  const outfile = path.join(ROOT, 'host-collector/dist/reliability-collector.mjs');
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'host-collector/package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
  };
  bundleForNode(path.join(ROOT, 'test/reliability/collector-child.ts'), outfile, {
    banner: REQUIRE_BANNER,
    external: Object.keys(pkg.dependencies).filter((d) => !d.startsWith('@vsockdiag/')),
  });
  return (bundle = outfile);
}

export async function startLiveCollector(opts: Partial<CollectorOptions> = {}): Promise<LiveCollector> {
  const file = childBundle();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-rel-'));
  const proc = spawn(process.execPath, ['--expose-gc', file, JSON.stringify({ ...opts, dataDir })], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, VSOCKDIAG_LOG_LEVEL: 'error' },
  });
  const errors: string[] = [];
  // Records at error level or above, and anything that is not a record (a crash's trace).
  const isError = (line: string) => {
    try {
      const { level } = JSON.parse(line) as { level?: unknown };
      return level === 'error' || level === 'fatal' || (typeof level === 'number' && level >= 50);
    } catch {
      return line.trim() !== '';
    }
  };
  readline.createInterface({ input: proc.stderr! }).on('line', (l) => errors.length < 1000 && isError(l) && errors.push(l));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    fs.rmSync(dataDir, { recursive: true, force: true });
  };
  // Its stdout: the url once listening, then one line per heldKb() asked for, in order.
  const answers: Array<(line: string) => void> = [];
  const stdout = readline.createInterface({ input: proc.stdout! });
  let url: string;
  try {
    url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the collector did not start in 30 s: ${errors.join('\n')}`)), 30_000);
      stdout.once('line', (l) => {
        clearTimeout(timer);
        resolve((JSON.parse(l) as { url: string }).url);
        stdout.on('line', (line) => answers.shift()?.(line));
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the collector exited with ${code}: ${errors.join('\n')}`));
      });
    });
  } catch (err) {
    await stop();
    throw err;
  }
  const api = async <T>(method: string, p: string, body?: unknown, timeoutMs = 10_000) => {
    const t0 = performance.now();
    const res = await fetch(`${url}${p}`, {
      method,
      signal: AbortSignal.timeout(timeoutMs),
      ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T, ms: performance.now() - t0 };
  };
  return {
    url,
    proc,
    dataDir,
    rssKb: () => {
      try {
        return Number(/^VmRSS:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${proc.pid}/status`, 'utf8'))?.[1] ?? Number.NaN);
      } catch {
        return null;
      }
    },
    heldKb: () =>
      new Promise<number | null>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve(null);
        const timer = setTimeout(() => resolve(null), 30_000);
        answers.push((line) => {
          clearTimeout(timer);
          resolve((JSON.parse(line) as { heldKb: number | null }).heldKb);
        });
        proc.kill('SIGUSR2');
      }),
    errors: () => errors,
    alive: () => proc.exitCode === null && proc.signalCode === null,
    api,
    stop,
  };
}
