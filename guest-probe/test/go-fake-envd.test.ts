// The Go reader on the fake envd built exactly as E2B builds envd (`go build -trimpath
// -ldflags "-s -w -buildid="`, with the Go on PATH: Debian's go1.19 here), hung in its
// cgroup-manager phase with an MMDS poll storm running: the live dump must name the hang
// frame and the storm's creator, match the target's own SIGQUIT dump, and leave it running.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseGoroutines } from '../../host-collector/src/dumps/goroutines.js';
import { readGoroutines } from '../src/dumps/go/index.js';
import { buildStrippedFakeEnvd, freePort, funcNames, goroutineBlocks } from './go-binaries.js';

const STORM = 20;
let binary = '';
let tmp = '';
const children: ChildProcess[] = [];

function run(args: string[]): { child: ChildProcess; stderr: () => string; exited: Promise<void> } {
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, GOTRACEBACK: 'all' } });
  children.push(child);
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  return { child, stderr: () => err, exited: new Promise((r) => child.once('exit', () => r())) };
}

async function until(what: string, cond: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function state(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return stat[stat.lastIndexOf(')') + 2] ?? '?';
}

/** The fake MMDS and a fake envd hung in cgroup-manager, polling it from STORM goroutines. */
async function hungEnvd(extra: string[] = []) {
  const mmdsPort = await freePort();
  const ready = path.join(tmp, `mmds-${mmdsPort}`);
  run(['-serve-mmds', `127.0.0.1:${mmdsPort}`, '-mmds-reply', '404', '-ready-file', ready]);
  await until('the fake MMDS', () => existsSync(ready));
  const envd = run([
    '-addr',
    '127.0.0.1',
    '-port',
    '0',
    '-no-notify',
    '-mmds-addr',
    `127.0.0.1:${mmdsPort}`,
    '-mmds-storm',
    String(STORM),
    '-hang-in',
    'cgroup-manager',
    ...extra,
  ]);
  await until('the hang', () => envd.stderr().includes('creating cgroup manager'));
  return envd;
}

beforeAll(async () => {
  binary = await buildStrippedFakeEnvd();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'go-fake-envd-'));
}, 320_000);

afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('fake envd (stripped, Debian go1.19)', () => {
  it('names the hang frame and the storm, matches its SIGQUIT dump, and keeps it running', async () => {
    const envd = await hungEnvd();
    const pid = envd.child.pid!;
    // Read twice: once stopped (consistent even while the storm's goroutines run), once not.
    const paused = readGoroutines(pid, { pause: true });
    expect(paused.complete).toBe(true);
    expect(paused.pausedMs).toBeGreaterThan(0);
    await until('the target to run again', () => state(pid) !== 'T');
    const r = readGoroutines(pid);
    expect(r.goVersion).toMatch(/^go1\.19\./);

    for (const read of [paused, r]) {
      const dump = parseGoroutines(read.text);
      expect(dump.goroutines.length).toBe(read.goroutines);
      const main = dump.goroutines.find((g) => g.id === 1)!;
      expect(main.state).toBe('semacquire'); // sync.Mutex.Lock has no wait reason of its own in 1.19
      expect(main.frames.map((f) => f.func)).toEqual(
        expect.arrayContaining(['sync.(*Mutex).Lock', 'main.(*cgroupManager).acquireRoot', 'main.createCgroupManager', 'main.main']),
      );
      const hang = main.frames.find((f) => f.func === 'main.(*cgroupManager).acquireRoot')!;
      expect(hang.file).toBe('vsockdiag/fake-envd/phases.go');
      const storm = dump.goroutines.filter((g) => g.createdBy?.func === 'main.startMMDSPoller');
      expect(storm.length).toBe(STORM);
      for (const g of storm) expect(g.createdBy!.file).toBe('vsockdiag/fake-envd/phases.go');
    }

    // Still running: not stopped, and the storm goes on (its threads use CPU).
    const cpu = () =>
      readFileSync(`/proc/${pid}/stat`, 'latin1')
        .split(') ')[1]!
        .split(' ')
        .slice(11, 13)
        .map(Number)
        .reduce((a, b) => a + b, 0);
    const before = cpu();
    await until('the storm to keep polling', () => cpu() > before, 20_000);
    expect(state(pid)).not.toBe('T');

    // The same goroutines as the target's own dump; the parked ones byte for byte.
    const again = readGoroutines(pid, { pause: true });
    envd.child.kill('SIGQUIT');
    await envd.exited;
    const theirs = goroutineBlocks(envd.stderr());
    const mine = goroutineBlocks(again.text);
    const main = mine.get(1)!;
    expect(main.join('\n')).toBe(theirs.get(1)!.join('\n'));
    // The storm's pollers and what their HTTP requests start (connection loops, timeout
    // timers) run between the read and the signal, so they may be elsewhere or gone by
    // then; the runtime's and main's own goroutines are parked and must be there, in the
    // same state, at the same functions.
    const churn = (block: string[]) => {
      const by = block.find((l) => l.startsWith('created by '));
      return by !== undefined && !/^created by (runtime\.|main\.(?!startMMDSPoller))/.test(by);
    };
    let compared = 0;
    for (const [id, block] of mine) {
      if (churn(block)) continue;
      const other = theirs.get(id);
      expect(other, `goroutine ${id} missing from the SIGQUIT dump`).toBeDefined();
      if (!other || other[0] !== block[0]) continue;
      expect(funcNames(block), `goroutine ${id}`).toEqual(funcNames(other));
      compared++;
    }
    expect(compared).toBeGreaterThanOrEqual(5);
  }, 120_000);

  it('reads 10,000 goroutines quickly', async () => {
    const envd = await hungEnvd(['-idle-goroutines', '10000']);
    const pid = envd.child.pid!;
    await until('10,000 goroutines', () => (readGoroutines(pid).goroutines ?? 0) >= 10_000);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const r = readGoroutines(pid);
    const wall = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    expect(r.goroutines).toBeGreaterThanOrEqual(10_000);
    const dump = parseGoroutines(r.text);
    expect(dump.goroutines.length).toBe(r.goroutines);
    expect(dump.goroutines.filter((g) => g.frames.some((f) => f.func === 'main.parkedWorker')).length).toBe(10_000);
    console.log(
      `10,000+ goroutines: ${r.goroutines} read in ${wall.toFixed(0)} ms wall, ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms CPU, ${(r.text.length / 1e6).toFixed(1)} MB of text`,
    );
    // Generous: the machine is shared; the point is seconds, not minutes.
    expect(wall).toBeLessThan(15_000);
  }, 120_000);
});
