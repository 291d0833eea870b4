// The Go reader on the fake envd built exactly as E2B builds envd (`go build -trimpath
// -ldflags "-s -w -buildid="`, with the Go on PATH: Debian's go1.19 here; and the same as a
// PIE, -buildmode=pie), hung in its
// cgroup-manager phase with an MMDS poll storm running: the live dump must name the hang
// frame and the storm's creator, match the target's own SIGQUIT dump, and leave it running;
// 10,000 goroutines read streamed without holding up the event loop; and a ready fake envd
// goes on exactly as before after reads (goroutines, listener, exit status).
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../test/support/wait.js';
import { childReaper } from '../../test/support/children.js';
import { DUMP_CHUNK_BYTES } from '@vsockdiag/proto';
import { parseGoroutines } from '../../host-collector/src/dumps/goroutines.js';
import { type GoroutinesRead, goroutinesText, readGoroutines } from '../../guest-probe/src/dumps/go/index.js';
import { ElfFile } from '../../guest-probe/src/dumps/go/elf.js';
import { decodeAllgs } from '../../guest-probe/src/dumps/go/allgs.js';
import { GoBinary } from '../../guest-probe/src/dumps/go/binary.js';
import { layoutFor } from '../../guest-probe/src/dumps/go/layout.js';
import { ProcessMemory, loadBias } from '../../guest-probe/src/dumps/go/memory.js';
import { NO_G, RESERVED_WINDOW_BYTES, Snapshot } from '../../guest-probe/src/dumps/go/snapshot.js';
import { u64 } from '../../guest-probe/src/dumps/go/space.js';
import { buildStrippedFakeEnvd, freePort, funcNames, goroutineBlocks } from '../../guest-probe/test/go-binaries.js';

const STORM = 20;
let binary = '';
let pieBinary = '';
let tmp = '';
const children = childReaper({ after: 'all' });

function run(args: string[], exe = binary): { child: ChildProcess; stderr: () => string; exited: Promise<void> } {
  const child = spawn(exe, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, GOTRACEBACK: 'all' } });
  children.track(child);
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  return { child, stderr: () => err, exited: new Promise((r) => child.once('exit', () => r())) };
}

/**
 * Two dumps of one goroutine, with every address into its stack as an offset from the stack's
 * start ("S+0x…"). A GC may move a stack (copystack) between two dumps: Go then shifts the
 * frames and the live pointers into the stack, but a dead spill slot keeps the old address,
 * which is then into the other dump's stack: either way, the same offset. Where the stack did
 * not move, nothing changes the comparison. "Into the stack": between the lowest sp and the
 * highest fp the dump shows.
 */
function stackRelative(a: string[], b: string[]): [string[], string[]] {
  const range = (block: string[]) => {
    // BigInts (addresses print in full): sorted, as Math.min and Math.max take numbers only.
    const v = block
      .flatMap((l) => [...l.matchAll(/ (?:sp|fp)=0x([0-9a-f]+)/g)].map((m) => BigInt(`0x${m[1]}`)))
      .sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
    return v.length ? { lo: v[0]!, hi: v[v.length - 1]! } : null;
  };
  const ranges = [range(a), range(b)].filter((r) => r !== null);
  const rel = (block: string[]) =>
    block.map((l) =>
      l.replace(/0x([0-9a-f]+)/g, (hex, digits: string) => {
        const v = BigInt(`0x${digits}`);
        const r = ranges.find((x) => v >= x.lo && v <= x.hi);
        return r ? `S+0x${(v - r.lo).toString(16)}` : hex;
      }),
    );
  return [rel(a), rel(b)];
}

function state(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return stat[stat.lastIndexOf(')') + 2] ?? '?';
}

/** The fake MMDS and a fake envd hung in cgroup-manager, polling it from STORM goroutines. */
async function hungEnvd(extra: string[] = [], exe = binary) {
  const mmdsPort = await freePort();
  const ready = path.join(tmp, `mmds-${mmdsPort}`);
  run(['-serve-mmds', `127.0.0.1:${mmdsPort}`, '-mmds-reply', '404', '-ready-file', ready]);
  await waitFor('the fake MMDS', () => existsSync(ready), { timeoutMs: 30_000 });
  const envd = run(
    [
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
    ],
    exe,
  );
  await waitFor('the hang', () => envd.stderr().includes('creating cgroup manager'), { timeoutMs: 30_000 });
  // The line is read before its write(2) returns: wait until goroutine 1 is parked in the lock
  // (the MMDS pollers keep threads waking, so no look at thread states would do).
  await waitFor('goroutine 1 parked at the lock', async () => parkedAtTheLock(goroutinesText(await readGoroutines(envd.child.pid!))), {
    timeoutMs: 30_000,
  });
  return envd;
}

/** Goroutine 1 waits (not running, runnable or in a syscall) with acquireRoot on its stack. */
function parkedAtTheLock(text: string): boolean {
  const main = parseGoroutines(text).goroutines.find((g) => g.id === 1);
  return (
    main !== undefined &&
    !/^(running|runnable|syscall)/.test(main.state) &&
    main.frames.some((f) => f.func === 'main.(*cgroupManager).acquireRoot')
  );
}

/** The live dump names the hang frame (main blocked in acquireRoot) and the storm's creator. */
function namesTheHang(read: GoroutinesRead): void {
  const dump = parseGoroutines(goroutinesText(read));
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

/**
 * Reads the target once more (paused), then makes it print its own dump (SIGQUIT) and compares
 * the two: the same goroutines, main's line for line, the runtime's and main's own parked ones
 * at the same functions.
 */
async function sameAsSigquit(envd: Awaited<ReturnType<typeof hungEnvd>>): Promise<void> {
  const pid = envd.child.pid!;
  // The same goroutines as the target's own dump; the parked ones byte for byte.
  const again = await readGoroutines(pid, { pause: true });
  envd.child.kill('SIGQUIT');
  await envd.exited;
  const theirs = goroutineBlocks(envd.stderr());
  const mine = goroutineBlocks(goroutinesText(again));
  // Line by line, so a difference shows as one; stack addresses as offsets, as the storm
  // allocates and a GC may move main's stack between the read and the signal.
  const [main, theirMain] = stackRelative(mine.get(1)!, theirs.get(1)!);
  expect(main).toEqual(theirMain);
  // The storm's pollers and what their HTTP requests start (connection loops, timeout
  // timers) run between the read and the signal, so they may be elsewhere or gone by
  // then; the runtime's and main's own goroutines are parked and must be there, in the
  // same state, at the same functions. All but the GC's mark workers: any GC cycle wakes
  // them (the storm allocates), and one was seen in gcMarkDone at the signal, parked at
  // gopark in the read, its header the same in both.
  const churn = (block: string[]) => {
    if (funcNames(block).includes('runtime.gcBgMarkWorker')) return true;
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
}

beforeAll(async () => {
  binary = await buildStrippedFakeEnvd();
  pieBinary = await buildStrippedFakeEnvd({ pie: true });
  tmp = mkdtempSync(path.join(os.tmpdir(), 'go-fake-envd-'));
}, 320_000);

afterAll(async () => {
  await children.reap(); // before their folder goes
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('fake envd (stripped, Debian go1.19)', () => {
  it('names the hang frame and the storm, matches its SIGQUIT dump, and keeps it running', async () => {
    const envd = await hungEnvd();
    const pid = envd.child.pid!;
    // Read twice: once stopped (consistent even while the storm's goroutines run), once not.
    const paused = await readGoroutines(pid, { pause: true });
    expect(paused.complete).toBe(true);
    expect(paused.pausedMs).toBeGreaterThan(0);
    // The stop's parts: waiting for every thread to stop, then the copy; both within it.
    expect(paused.pause!.copyMs).toBeGreaterThan(0);
    expect(paused.pause!.stopWaitMs + paused.pause!.copyMs).toBeLessThanOrEqual(paused.pausedMs);
    expect(paused.notes.join('\n')).toMatch(
      /stopped \(SIGSTOP\) for [\d.]+ ms: [\d.]+ ms until every thread had stopped, [\d.]+ ms copying/,
    );
    await waitFor('the target to run again', () => state(pid) !== 'T', { timeoutMs: 30_000 });
    const r = await readGoroutines(pid);
    expect(r.goVersion).toMatch(/^go1\.19\./);
    expect(r.pause).toBeUndefined();

    for (const read of [paused, r]) namesTheHang(read);

    // Still running: not stopped, and the storm goes on (its threads use CPU).
    const cpu = () =>
      readFileSync(`/proc/${pid}/stat`, 'latin1')
        .split(') ')[1]!
        .split(' ')
        .slice(11, 13)
        .map(Number)
        .reduce((a, b) => a + b, 0);
    const before = cpu();
    await waitFor('the storm to keep polling', () => cpu() > before, { timeoutMs: 20_000 });
    expect(state(pid)).not.toBe('T');

    await sameAsSigquit(envd);
  }, 120_000);

  it('reads 10,000 goroutines quickly, streamed through reused chunks, the event loop turning meanwhile', async () => {
    const envd = await hungEnvd(['-idle-goroutines', '10000']);
    const pid = envd.child.pid!;
    await waitFor('10,000 goroutines', async () => (await readGoroutines(pid)).goroutines >= 10_000, { timeoutMs: 30_000 });
    // A timer that runs only when the read gives the event loop a turn (a synchronous read,
    // as it was, let none run: a 100,000-goroutine target would have cut the probe's session).
    let turns = 0;
    const timer = setInterval(() => turns++, 1);
    const streamed: Buffer[] = [];
    const buffers = new Set<ArrayBufferLike>();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    let r: Awaited<ReturnType<typeof readGoroutines>>;
    try {
      r = await readGoroutines(pid, {
        // Resolved at once: the turns counted above are the reader's own.
        onChunk: async (chunk) => {
          streamed.push(Buffer.from(chunk));
          buffers.add(chunk.buffer);
        },
      });
    } finally {
      clearInterval(timer);
    }
    const wall = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    expect(r.goroutines).toBeGreaterThanOrEqual(10_000);
    // At least one, not a count: the read yields by elapsed time (every YIELD_MS of work), so
    // a faster machine gets fewer turns from the same read; the synchronous read got none.
    expect(turns).toBeGreaterThanOrEqual(1);
    // Streamed: nothing left in the result; every chunk at most DUMP_CHUNK_BYTES, and a
    // handful of buffers reused for all of them.
    expect(r.chunks).toEqual([]);
    expect(streamed.length).toBeGreaterThan(10);
    for (const c of streamed) expect(c.length).toBeLessThanOrEqual(DUMP_CHUNK_BYTES);
    expect(buffers.size).toBeLessThanOrEqual(4);
    const text = Buffer.concat(streamed).toString('utf8');
    expect(Buffer.byteLength(text)).toBe(r.bytes);
    const dump = parseGoroutines(text);
    expect(dump.goroutines.length).toBe(r.goroutines);
    expect(dump.goroutines.filter((g) => g.frames.some((f) => f.func === 'main.parkedWorker')).length).toBe(10_000);
    console.log(
      `10,000+ goroutines: ${r.goroutines} read in ${wall.toFixed(0)} ms wall, ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms CPU, ${(r.bytes / 1e6).toFixed(1)} MB of text, ${turns} event-loop turns`,
    );
    // Generous: the machine is shared; the point is seconds, not minutes.
    expect(wall).toBeLessThan(15_000);

    // Pause mode on the same target: complete, and the target runs again after it.
    const paused = await readGoroutines(pid, { pause: true });
    expect(paused.complete, paused.notes.join('\n')).toBe(true);
    expect(paused.goroutines).toBeGreaterThanOrEqual(10_000);
    expect(paused.pausedMs).toBeGreaterThan(0);
    await waitFor('the target to run again', () => state(pid) !== 'T', { timeoutMs: 30_000 });
  }, 120_000);

  it('goes on exactly as before after reads: the same goroutines, its listener, its exit status', async () => {
    // Two fake envds started alike, ready and serving; one is read (running and paused), the
    // other is left alone: it says what "as before" is.
    const start = async () => {
      const port = await freePort();
      const e = run(['-addr', '127.0.0.1', '-port', String(port), '-no-notify', '-idle-goroutines', '50']);
      await waitFor('the fake envd to listen', () => e.stderr().includes('ready, listening on'), { timeoutMs: 30_000 });
      return {
        ...e,
        port,
        status: new Promise<[number | null, string | null]>((res) => e.child.once('exit', (code, sig) => res([code, sig]))),
      };
    };
    const read = await start();
    const control = await start();
    const pid = read.child.pid!;
    const headers = (text: string) => new Map([...goroutineBlocks(text)].map(([id, block]) => [id, block[0]!]));
    const before = await readGoroutines(pid);
    const paused = await readGoroutines(pid, { pause: true });
    await waitFor('the target to run again', () => state(pid) !== 'T', { timeoutMs: 30_000 });
    const after = await readGoroutines(pid);
    for (const r of [before, paused, after]) expect(r.complete, r.notes.join('\n')).toBe(true);

    // Its goroutines: the same goids, each in the same state (the header line, gp= and wait
    // reason included), parked where it was (the same functions).
    const h0 = headers(goroutinesText(before));
    const h2 = headers(goroutinesText(after));
    const blocks0 = goroutineBlocks(goroutinesText(before));
    const blocks2 = goroutineBlocks(goroutinesText(after));
    expect(h0.size).toBeGreaterThanOrEqual(50);
    expect([...h2.keys()].sort((a, b) => a - b)).toEqual([...h0.keys()].sort((a, b) => a - b));
    for (const [id, header] of h0) {
      if (/\[(running|runnable)/.test(header) || /\[(running|runnable)/.test(h2.get(id)!)) continue;
      expect(h2.get(id), `goroutine ${id}`).toBe(header);
      expect(funcNames(blocks2.get(id)!), `goroutine ${id}`).toEqual(funcNames(blocks0.get(id)!));
    }

    // Its listener: still bound (LISTEN in /proc/net/tcp) and serving.
    const listening = (port: number) =>
      readFileSync(`/proc/${pid}/net/tcp`, 'latin1')
        .split('\n')
        .some(
          (l) =>
            l
              .trim()
              .split(/\s+/)[1]
              ?.endsWith(`:${port.toString(16).toUpperCase().padStart(4, '0')}`) && l.trim().split(/\s+/)[3] === '0A',
        );
    expect(listening(read.port)).toBe(true);
    const health = await fetch(`http://127.0.0.1:${read.port}/health`, { signal: AbortSignal.timeout(10_000) });
    expect(health.status).toBe(204);

    // Its exit status: SIGTERM ends both the same way (exit 0, envd's handler ran).
    read.child.kill('SIGTERM');
    control.child.kill('SIGTERM');
    const [mine, theirs] = await Promise.all([read.status, control.status]);
    expect(theirs).toEqual([0, null]);
    expect(mine).toEqual(theirs);
    expect(read.stderr()).toContain('received SIGTERM, exiting');
  }, 120_000);
});

describe('fake envd (stripped PIE, Debian go1.19)', () => {
  it('reads a position-independent build at its load bias and matches its SIGQUIT dump', async () => {
    // A PIE: ELF type ET_DYN, so the reader must rebase the pclntab, the module data and
    // forEachGRace's data addresses by where the kernel loaded it.
    const elf = new ElfFile(pieBinary);
    try {
      expect(elf.pie).toBe(true);
    } finally {
      elf.close();
    }
    const envd = await hungEnvd([], pieBinary);
    const pid = envd.child.pid!;
    const exe = new ElfFile(`/proc/${pid}/exe`);
    let bias: number;
    try {
      bias = loadBias(pid, exe);
    } finally {
      exe.close();
    }
    expect(bias).toBeGreaterThan(0);
    const paused = await readGoroutines(pid, { pause: true });
    await waitFor('the target to run again', () => state(pid) !== 'T', { timeoutMs: 30_000 });
    const r = await readGoroutines(pid);
    for (const read of [paused, r]) {
      expect(read.complete, read.notes.join('\n')).toBe(true);
      expect(read.notes.join('\n')).toContain('(from forEachGRace)');
      namesTheHang(read);
    }
    // Every pc printed lies in the loaded image, not at the link-time addresses.
    const pcs = [...goroutinesText(r).matchAll(/ pc=0x([0-9a-f]+)/g)].map((m) => Number.parseInt(m[1]!, 16));
    expect(pcs.length).toBeGreaterThan(20);
    for (const pc of pcs) expect(pc).toBeGreaterThan(bias);
    await sameAsSigquit(envd);
  }, 120_000);
});

describe("pause mode's native copy (memSnapshot)", () => {
  it('copies the same g bytes, windows and stack bytes as the batched reads, and marks a g that does not read', async () => {
    const envd = await hungEnvd(['-idle-goroutines', '300']);
    const pid = envd.child.pid!;
    await waitFor('300 goroutines', async () => (await readGoroutines(pid)).goroutines >= 300, { timeoutMs: 30_000 });
    const mem = new ProcessMemory(pid);
    const bin = new GoBinary(`/proc/${pid}/exe`, { space: mem });
    try {
      const layout = layoutFor(bin.version.minor, bin.version.text);
      const loc = decodeAllgs(bin)!;
      process.kill(pid, 'SIGSTOP');
      try {
        await waitFor('the target to stop', () => state(pid) === 'T', { timeoutMs: 30_000 });
        const n = u64(mem.read(loc.lenAddr, 8), 0);
        const real = mem.read(u64(mem.read(loc.ptrAddr, 8), 0), 8 * n);
        // One more "g" at an address that is never mapped.
        const arr = Buffer.concat([real, Buffer.from([0, 0x10, 0, 0, 0, 0, 0, 0])]);
        const js = new Snapshot();
        const native = new Snapshot();
        expect(js.read(mem, layout, arr, 0, n + 1, Infinity)).toBe(true);
        expect(native.readAll(mem, layout, arr, n + 1, 64 << 20)).toBe(true);
        expect(native.window[n]).toBe(NO_G);
        expect(js.window[n]).toBe(NO_G);
        let windows = 0;
        for (let k = 0; k <= n; k++) {
          expect(native.addrs[k], `g ${k}`).toBe(js.addrs[k]);
          expect(native.window[k], `g ${k}`).toBe(js.window[k]);
          if (js.window[k] === NO_G) continue;
          const g = (s: Snapshot) => s.hdr.subarray(k * layout.size, (k + 1) * layout.size);
          expect(g(native).equals(g(js)), `g ${k}`).toBe(true);
          const w = js.window[k]!;
          if (w < 0) continue;
          expect(native.got[k], `g ${k}`).toBe(js.got[k]);
          expect(native.stack.subarray(w, w + native.got[k]!).equals(js.stack.subarray(w, w + js.got[k]!)), `g ${k}`).toBe(true);
          if (native.got[k]! > 0) windows++;
        }
        expect(windows).toBeGreaterThanOrEqual(300);
        // Reserved before the stop: the windows land in the buffer made (and written) then; one
        // reserved too small for them gives way to a new buffer. Either way the same bytes. (How
        // much a goroutine's window takes varies: room enough is sized from what the JS read got.)
        const enough = Math.max(n + 1, Math.ceil(js.stack.length / RESERVED_WINDOW_BYTES));
        for (const room of [enough, 1]) {
          const reserved = new Snapshot();
          reserved.reserve(room, layout.size);
          const before = reserved.stack;
          expect(reserved.readAll(mem, layout, arr, n + 1, 64 << 20)).toBe(true);
          expect(reserved.stack === before, `room for ${room}`).toBe(room === enough);
          for (let k = 0; k <= n; k++) {
            const w = js.window[k]!;
            if (w < 0) continue;
            expect(reserved.stack.subarray(w, w + reserved.got[k]!).equals(js.stack.subarray(w, w + js.got[k]!)), `g ${k}`).toBe(true);
          }
        }
        // Too large: only the g's are read.
        expect(native.readAll(mem, layout, arr, n + 1, 16)).toBe(false);
      } finally {
        process.kill(pid, 'SIGCONT');
      }
    } finally {
      bin.close();
      mem.close();
    }
  }, 60_000);
});
