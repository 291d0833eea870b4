// JournalFollower against a fake `journalctl` placed first on PATH: a shell script that
// records its arguments and prints JSON entries from a journal file (one entry per line,
// like `journalctl -o json`), starting after --after-cursor if given, then waits or exits.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { appendFileSync, chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '../../test/support/wait.js';
import { JournalFollower, MAX_JOURNAL_JSON_LINE, processStartMonotonicUs } from '../src/logs/journal.js';

let dir: string;
let bin: string;
let journal: string;
let savedPath: string | undefined;
const followers: JournalFollower[] = [];

// Prints the entries after the one whose cursor is given (all without one), in order.
// mode exit: then exits 3; wait: then sleeps; cut: prints half of one more line, exits.
function fakeJournalctl(mode: 'wait' | 'exit' | 'cut'): void {
  const script = `#!/bin/sh
echo "$@" >> '${dir}/args'
after=''
for a in "$@"; do case "$a" in --after-cursor=*) after="\${a#--after-cursor=}";; esac; done
if [ -z "$after" ]; then cat '${journal}'; else sed -n "/\\"__CURSOR\\":\\"$after\\"/,\\$p" '${journal}' | tail -n +2; fi
${mode === 'exit' ? 'exit 3' : mode === 'cut' ? `printf '{"__CURSOR":"half'; exit 3` : 'exec sleep 1000'}
`;
  writeFileSync(join(bin, 'journalctl'), script);
  chmodSync(join(bin, 'journalctl'), 0o755);
}

let nextCursor = 1;
/** Appends an entry to the fake journal; returns its cursor. */
function log(message: unknown, monoUs: number): string {
  const cursor = `s=1;i=${nextCursor++}`;
  appendFileSync(
    journal,
    `${JSON.stringify({ __CURSOR: cursor, __MONOTONIC_TIMESTAMP: String(monoUs), _BOOT_ID: 'b', MESSAGE: message })}\n`,
  );
  return cursor;
}

function setup(opts: { minBackoffMs?: number; maxBackoffMs?: number; sinceMonotonicUs?: number } = {}) {
  const entries: Array<{ text: string; t: number | undefined }> = [];
  const logs: string[] = [];
  const j = new JournalFollower(
    'envd',
    (m, t) => entries.push({ text: m.toString('utf8'), t }),
    (_level, m) => logs.push(m),
    {
      sinceMonotonicUs: 0,
      toBootMs: (us) => us / 1000 + 7,
      ...opts,
    },
  );
  followers.push(j);
  return { j, entries, logs, texts: () => entries.map((e) => e.text) };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const argRuns = () => readFileSync(join(dir, 'args'), 'utf8').trim().split('\n');

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'vsockdiag-journal-'));
  bin = join(dir, 'bin');
  journal = join(dir, 'journal.json');
  mkdirSync(bin);
  writeFileSync(journal, '');
  nextCursor = 1;
  savedPath = process.env.PATH;
  process.env.PATH = `${bin}:${savedPath ?? ''}`;
});
afterEach(() => {
  for (const j of followers.splice(0)) j.close();
  process.env.PATH = savedPath;
  rmSync(dir, { recursive: true, force: true });
});

describe('JournalFollower', () => {
  it('reads this boot from the start (no -n 0), as JSON, and keeps the journal timestamps', async () => {
    log('envd startup: creating run directory /run/e2b', 1_000_000);
    log('envd startup: starting MMDS poller', 1_500_000);
    fakeJournalctl('wait');
    const { j, entries, logs } = setup();
    await waitFor('both entries', () => entries.length === 2);
    expect(entries).toEqual([
      { text: 'envd startup: creating run directory /run/e2b\n', t: 1007 },
      { text: 'envd startup: starting MMDS poller\n', t: 1507 },
    ]);
    expect(argRuns()).toEqual(['-b -u envd -f --no-tail -o json --output-fields=MESSAGE --all --no-pager']);
    const pid = j.pid!;
    expect(alive(pid)).toBe(true);
    j.close();
    await waitFor('journalctl to end', () => !alive(pid));
    expect(j.counters).toMatchObject({ starts: 1, exits: 0, entries: 2, skipped: 0, bad: 0 });
    expect(logs).toEqual([]);
  });

  it("skips what was logged before the probe's own start", async () => {
    log('an envd from before the probe', 1_000_000);
    log('envd startup: creating logger', 3_000_000);
    fakeJournalctl('wait');
    const { j, texts } = setup({ sinceMonotonicUs: 2_000_000 });
    await waitFor("the line after the probe's start", () => texts().length === 1);
    expect(texts()).toEqual(['envd startup: creating logger\n']);
    expect(j.counters.skipped).toBe(1);
  });

  it('by default starts from this process: the monotonic clock at its start', () => {
    // process.uptime() counts from a moment of Node's start-up later than performance's time
    // origin, by 1-3 ms when the machine is busy (seen in make test), so the margin is 50 ms:
    // still far from a follower that starts from now (0 ms) or from boot (minutes).
    const sinceOriginUs = Math.floor(performance.now() * 1000);
    const start = processStartMonotonicUs();
    const now = Number(process.hrtime.bigint() / 1000n);
    expect(start).toBeLessThanOrEqual(now);
    expect(now - start).toBeGreaterThanOrEqual(sinceOriginUs - 50_000);
    expect(now - start).toBeLessThanOrEqual(Math.ceil(performance.now() * 1000) + 50_000);
  });

  it('goes on after the last cursor when journalctl restarts: nothing lost, nothing twice', async () => {
    log('line 1', 1_000);
    log('line 2', 2_000);
    fakeJournalctl('exit');
    const { j, texts, logs } = setup({ minBackoffMs: 300, maxBackoffMs: 300 });
    await waitFor('lines 1 and 2', () => texts().length === 2);
    // Logged while journalctl is down: the restarted one must deliver these, once.
    log('line 3', 3_000);
    const last = log('line 4', 4_000);
    await waitFor('lines 3 and 4', () => texts().length >= 4);
    // The run after the one that delivered line 4 starts after its cursor.
    await waitFor('a run after the cursor of line 4', () => argRuns().some((r) => r.includes(`--after-cursor=${last}`)));
    expect(texts()).toEqual(['line 1\n', 'line 2\n', 'line 3\n', 'line 4\n']);
    const runs = argRuns();
    expect(runs[0]).not.toContain('--after-cursor');
    expect(runs[1]).toContain('--after-cursor=s=1;i=2');
    expect(logs[0]).toMatch(/journalctl -u envd ended \(exit 3\); restarting/);
    j.close();
  });

  it('drops a line cut off by an exit; the entry comes again after the cursor', async () => {
    log('whole', 1_000);
    fakeJournalctl('cut');
    const { j, texts } = setup({ minBackoffMs: 50, maxBackoffMs: 50 });
    await waitFor('3 journalctl starts', () => j.counters.starts >= 3);
    j.close();
    expect(texts().every((t) => t === 'whole\n')).toBe(true);
    expect(texts().length).toBe(1);
    expect(j.counters.bad).toBe(0);
  });

  it('takes byte-array messages, skips non-entries and oversize lines, and counts them', async () => {
    log([0x67, 0x6f, 0xff, 0x0a, 0x78], 1_000); // not UTF-8: journalctl prints the bytes
    log(['first', 'second'], 2_000); // MESSAGE given twice
    appendFileSync(journal, 'not json\n');
    appendFileSync(journal, `{"MESSAGE":"no cursor"}\n`);
    appendFileSync(journal, `{"__CURSOR":"big","MESSAGE":"${'x'.repeat(MAX_JOURNAL_JSON_LINE)}"}\n`);
    log('after', 3_000);
    fakeJournalctl('wait');
    const { j, entries } = setup();
    await waitFor('the 3 good entries', () => entries.length === 3);
    expect(entries.map((e) => e.text)).toEqual([
      Buffer.from([0x67, 0x6f, 0xff, 0x0a, 0x78, 0x0a]).toString('utf8'),
      'first\nsecond\n',
      'after\n',
    ]);
    expect(j.counters.bad).toBe(3);
  });

  it('restarts journalctl with a growing, capped backoff when it exits', async () => {
    fakeJournalctl('exit');
    const { j } = setup({ minBackoffMs: 40, maxBackoffMs: 160 });
    const t0 = performance.now();
    await waitFor('5 journalctl starts', () => j.counters.starts >= 5);
    const elapsed = performance.now() - t0;
    // delays 40 + 80 + 160 + 160 before the fifth start
    expect(elapsed).toBeGreaterThanOrEqual(440 - 20);
    j.close();
    const starts = j.counters.starts;
    await new Promise((r) => setTimeout(r, 400));
    expect(j.counters.starts).toBe(starts);
  });

  it('reports a missing journalctl once and stops trying', async () => {
    process.env.PATH = bin; // empty: no journalctl anywhere
    const { j, entries, logs } = setup({ minBackoffMs: 10, maxBackoffMs: 20 });
    process.env.PATH = `${bin}:${savedPath ?? ''}`;
    await waitFor('the not-found log', () => logs.length > 0);
    await new Promise((r) => setTimeout(r, 200));
    expect(logs).toEqual(['journalctl not found: not following the journal of envd']);
    expect(j.counters.starts).toBe(1);
    expect(entries).toEqual([]);
    expect(existsSync(join(dir, 'args'))).toBe(false);
  });
});
