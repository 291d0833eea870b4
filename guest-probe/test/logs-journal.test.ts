// JournalFollower against a fake `journalctl` placed first on PATH: a shell script that
// records its arguments, prints two lines per run, then either waits or exits.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JournalFollower } from '../src/logs/journal.js';
import { LineSplitter } from '../src/logs/lines.js';
import type { LogWriter } from '../src/logs/log-watcher.js';

let dir: string;
let bin: string;
let savedPath: string | undefined;
const followers: JournalFollower[] = [];

function fakeJournalctl(mode: 'wait' | 'exit'): void {
  const script = `#!/bin/sh
echo "$@" > '${dir}/args'
n=$(cat '${dir}/count' 2>/dev/null || echo 0)
n=$((n + 1))
echo $n > '${dir}/count'
printf 'run %s line 1\\nrun %s line 2\\n' $n $n
${mode === 'exit' ? 'exit 3' : 'exec sleep 1000'}
`;
  writeFileSync(join(bin, 'journalctl'), script);
  chmodSync(join(bin, 'journalctl'), 0o755);
}

function setup(opts: { minBackoffMs?: number; maxBackoffMs?: number } = {}) {
  const lines: string[] = [];
  const logs: string[] = [];
  const splitter = new LineSplitter((l) => lines.push(l));
  const writer: LogWriter = { feed: (c) => splitter.feed(c), end: () => splitter.end() };
  const j = new JournalFollower('envd', writer, (_level, m) => logs.push(m), opts);
  followers.push(j);
  return { j, lines, logs };
}

async function until(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'vsockdiag-journal-'));
  bin = join(dir, 'bin');
  mkdirSync(bin);
  savedPath = process.env.PATH;
  process.env.PATH = `${bin}:${savedPath ?? ''}`;
});
afterEach(() => {
  for (const j of followers.splice(0)) j.close();
  process.env.PATH = savedPath;
  rmSync(dir, { recursive: true, force: true });
});

describe('JournalFollower', () => {
  it('runs journalctl -u UNIT -f -o cat --no-pager -n 0 and feeds its lines', async () => {
    fakeJournalctl('wait');
    const { j, lines, logs } = setup();
    await until(() => lines.length === 2);
    expect(lines).toEqual(['run 1 line 1', 'run 1 line 2']);
    expect(readFileSync(join(dir, 'args'), 'utf8').trim()).toBe('-u envd -f -o cat --no-pager -n 0');
    const pid = j.pid!;
    expect(alive(pid)).toBe(true);
    j.close();
    await until(() => !alive(pid));
    expect(j.counters).toEqual({ starts: 1, exits: 0 });
    expect(logs).toEqual([]);
  });

  it('restarts journalctl with a growing, capped backoff when it exits', async () => {
    fakeJournalctl('exit');
    const { j, lines, logs } = setup({ minBackoffMs: 40, maxBackoffMs: 160 });
    const t0 = performance.now();
    await until(() => j.counters.starts >= 5);
    const elapsed = performance.now() - t0;
    // delays 40 + 80 + 160 + 160 before the fifth start
    expect(elapsed).toBeGreaterThanOrEqual(440 - 20);
    await until(() => lines.length >= 10);
    expect(lines.slice(0, 6)).toEqual(['run 1 line 1', 'run 1 line 2', 'run 2 line 1', 'run 2 line 2', 'run 3 line 1', 'run 3 line 2']);
    expect(logs[0]).toMatch(/journalctl -u envd ended \(exit 3\)/);
    j.close();
    const starts = j.counters.starts;
    await new Promise((r) => setTimeout(r, 400));
    expect(j.counters.starts).toBe(starts);
  });

  it('reports a missing journalctl once and stops trying', async () => {
    process.env.PATH = bin; // empty: no journalctl anywhere
    const { j, lines, logs } = setup({ minBackoffMs: 10, maxBackoffMs: 20 });
    process.env.PATH = `${bin}:${savedPath ?? ''}`;
    await until(() => logs.length > 0);
    await new Promise((r) => setTimeout(r, 200));
    expect(logs).toEqual(['journalctl not found: not following the journal of envd']);
    expect(j.counters.starts).toBe(1);
    expect(lines).toEqual([]);
    expect(existsSync(join(dir, 'count'))).toBe(false);
  });
});
