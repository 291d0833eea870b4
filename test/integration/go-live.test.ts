// The Go reader against live, stripped Go processes nobody here wrote (esbuild's dev server,
// buf's studio agent; Go 1.20–1.26, amd64, and arm64 esbuild under qemu-user when Debian's
// qemu-user-static is installed): read every goroutine from outside, check the
// target still serves HTTP, then make it print its own dump (SIGQUIT, GOTRACEBACK=all) and
// compare goroutine by goroutine.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { childReaper } from '../../test/support/children.js';
import { waitFor } from '../../test/support/wait.js';
import { parseGoroutines } from '../../host-collector/src/dumps/goroutines.js';
import { goroutinesText, readGoroutines } from '../../guest-probe/src/dumps/go/index.js';
import {
  GO_BINARIES,
  type GoTestBinary,
  freePort,
  funcNames,
  goroutineBlocks,
  requireBinary,
  waitForHttp,
} from '../../guest-probe/test/go-binaries.js';

function procState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

interface Target {
  child: ChildProcess;
  stderr: () => string;
  url: string;
  exited: Promise<void>;
}

const children = childReaper();
const cleanups: (() => void)[] = [];
afterEach(async () => {
  await children.reap(); // before the folders they serve go
  while (cleanups.length) cleanups.pop()?.();
});

async function start(b: GoTestBinary): Promise<Target> {
  const port = await freePort();
  let args: string[];
  let url: string;
  if (b.kind === 'esbuild') {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'go-live-'));
    writeFileSync(path.join(dir, 'hello.txt'), 'hello from the target\n');
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    args = [`--serve=127.0.0.1:${port}`, `--servedir=${dir}`];
    url = `http://127.0.0.1:${port}/hello.txt`;
  } else {
    args = ['beta', 'studio-agent', '--bind', '127.0.0.1', '--port', String(port), '--timeout', '0'];
    url = `http://127.0.0.1:${port}/`;
  }
  // esbuild --serve stops when its stdin closes: keep a pipe open. arm64 builds run under
  // qemu-user, whose guest memory sits at the guest's own addresses in the qemu process.
  const [cmd, argv] = b.arch === 'arm64' ? [QEMU!, [requireBinary(b), ...args]] : [requireBinary(b), args];
  const child = children.track(spawn(cmd, argv, { stdio: ['pipe', 'ignore', 'pipe'], env: { ...process.env, GOTRACEBACK: 'all' } }));
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await waitForHttp(url);
  return { child, stderr: () => err, url, exited };
}

const QEMU = ['/usr/bin/qemu-aarch64-static', '/usr/bin/qemu-aarch64'].find((p) => existsSync(p));
// arm64: the esbuild builds only (buf's agent is slow to start under emulation), and only
// where Debian's qemu-user-static is installed.
const LIVE = GO_BINARIES.filter((b) => b.arch === 'amd64' || (QEMU !== undefined && b.kind === 'esbuild'));

describe.each(LIVE)('live $go $arch ($pkg)', (b) => {
  it('reads every goroutine as its own SIGQUIT dump shows it, without disturbing it', async () => {
    const t = await start(b);
    const pid = t.child.pid!;
    const exe = b.arch === 'arm64' ? requireBinary(b) : undefined;
    const r = await readGoroutines(pid, { exe });
    const text = goroutinesText(r);
    expect(r.goVersion).toBe(b.go);
    expect(r.arch).toBe(b.arch);
    expect(r.complete, r.notes.join('\n')).toBe(true);
    expect(r.pausedMs).toBe(0);
    expect(r.notes.join('\n')).toMatch(/from forEachGRace/);

    // Undisturbed: not stopped, and still serving.
    expect(procState(pid)).not.toMatch(/[Tt]/);
    const res = await fetch(t.url, { signal: AbortSignal.timeout(10_000) });
    if (b.kind === 'esbuild') expect(await res.text()).toBe('hello from the target\n');
    else expect(res.status).toBeGreaterThan(0);

    // The collector's parser takes the text whole.
    const parsed = parseGoroutines(text);
    expect(parsed.goroutines.length).toBe(r.goroutines);
    expect(parsed.skippedLines).toBe(0);
    expect(parsed.truncated).toBeFalsy();

    // A second read once the request is served, then the target's own dump right after.
    // (The request started goroutines; goids are handed out per P in batches, so a newer
    // goroutine may have a smaller goid: the sets are compared read to read instead.)
    // Pause mode on this version's g layout (the addon's memSnapshot), then the running read:
    // the same goroutines, parked ones printed the same, and the target runs again.
    const rp = await readGoroutines(pid, { exe, pause: true });
    expect(rp.complete, rp.notes.join('\n')).toBe(true);
    expect(rp.pausedMs).toBeGreaterThan(0);
    await waitFor('the target to run again', () => !/[Tt]/.test(procState(pid)), { timeoutMs: 30_000 });
    const r2 = await readGoroutines(pid, { exe });
    expect(r2.complete, r2.notes.join('\n')).toBe(true);
    const paused = goroutineBlocks(goroutinesText(rp));
    const r2blocks = goroutineBlocks(goroutinesText(r2));
    const same = [...paused].filter(([id, block]) => r2blocks.get(id)?.join('\n') === block.join('\n')).length;
    expect(same).toBeGreaterThanOrEqual(r2blocks.size - 2);
    t.child.kill('SIGQUIT');
    await t.exited;
    // Its exit status is Go's for SIGQUIT (dump, then exit 2): the reads left its signal
    // handling as it was.
    expect(t.child.exitCode).toBe(2);
    const theirs = goroutineBlocks(t.stderr());
    const first = goroutineBlocks(text);
    const mine = goroutineBlocks(goroutinesText(r2));
    expect(first.size).toBe(r.goroutines);
    expect(mine.size).toBe(r2.goroutines);
    // The first read's goroutines are (nearly all) still there: one may have finished meanwhile.
    expect([...first.keys()].filter((id) => mine.has(id)).length).toBeGreaterThanOrEqual(first.size - 1);
    // Same goroutines, but for those our HTTP request started, which may end or be started
    // between the read and the signal: its connection's, and whatever serving it ran
    // (esbuild's rebuild starts a goroutine that sleeps a while): the ones the first read,
    // taken before the request, did not see.
    // A goroutine our read saw asleep in time.Sleep (the rebuild's, 250 ms) may wake and end
    // before the signal on a loaded machine: one missing from the target's dump is allowed.
    const conn = (block: string[] | undefined) => block?.some((l) => l.startsWith('created by net/http.')) ?? false;
    const endedAsleep = (id: number) => !theirs.has(id) && /\[sleep[\],]/.test(mine.get(id)?.[0] ?? '');
    const ids = (m: Map<number, string[]>) =>
      [...m.keys()].filter((id) => first.has(id) && !conn(mine.get(id)) && !conn(theirs.get(id)) && !endedAsleep(id)).sort((x, y) => x - y);
    const differ = [...new Set([...ids(theirs), ...ids(mine)])].filter((id) => !theirs.has(id) || !mine.has(id));
    expect(ids(theirs), differ.map((id) => (mine.get(id) ?? theirs.get(id))!.join('\n')).join('\n\n')).toEqual(ids(mine));

    let identical = 0;
    for (const [id, block] of mine) {
      const other = theirs.get(id);
      if (!other) continue;
      if (block.join('\n') === other.join('\n')) {
        identical++;
        continue;
      }
      // Allowed difference: a goroutine that ran between the read and the signal (the
      // accept loop that served our request, the one reading stdin). Then its header's
      // state or its frames' arguments may differ, but it is the same goroutine (gp=) and,
      // if it is parked again where it was, at the same functions.
      const gp = (l: string) => /gp=(\S+)/.exec(l)?.[1];
      expect(gp(block[0]!)).toBe(gp(other[0]!));
      if (block[0] === other[0]) expect(funcNames(block)).toEqual(funcNames(other));
    }
    // Nearly everything is parked and prints byte for byte as Go prints it.
    expect(identical).toBeGreaterThanOrEqual(mine.size - 2);
  });
});
