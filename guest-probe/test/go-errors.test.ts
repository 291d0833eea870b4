// The Go reader's errors, one per class of issue 12, each naming what to change, each caused
// for real: a target that is not Go; a Go version without a proven layout (a real stripped
// binary whose version string says a Go that does not exist yet); no ptrace permission (the
// reader run as nobody against a root process); the target exiting during the read (killed
// from the first streamed chunk); an address that does not read (a g that will not read,
// which leaves the dump incomplete). And a read that fails part-way is never complete.
import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childReaper, waitUntilAsleep } from '../../test/support/children.js';
import { waitFor } from '../../test/support/wait.js';
import { SigquitCapture, takeDump, waitForExit } from '../src/dumps/index.js';
import {
  NotGoBinaryError,
  PtraceDeniedError,
  TargetExitedError,
  UnreadableAddressError,
  UnsupportedGoVersionError,
  readGoroutines,
} from '../src/dumps/go/index.js';
import { ProcessMemory } from '../src/dumps/go/memory.js';
import { buildStrippedFakeEnvd } from './go-binaries.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const children = childReaper({ after: 'all' });
let envdBinary = '';
let tmp = '';

beforeAll(async () => {
  envdBinary = await buildStrippedFakeEnvd();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'go-errors-'));
}, 320_000);

afterAll(async () => {
  await children.reap();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** A fake envd hung in start-up (stripped, as envd is built), `idle` goroutines parked. */
async function hungEnvd(exe = envdBinary, idle = 0): Promise<ChildProcess> {
  const child = spawn(
    exe,
    ['-addr', '127.0.0.1', '-port', '0', '-no-notify', '-hang-in', 'cgroup-manager', '-idle-goroutines', String(idle)],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  children.track(child);
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  await waitFor('the fake envd to hang', () => err.includes('creating cgroup manager'), { timeoutMs: 30_000 });
  await waitUntilAsleep(child.pid!);
  if (idle > 0)
    await waitFor(`${idle} goroutines`, async () => (await readGoroutines(child.pid!)).goroutines >= idle, { timeoutMs: 30_000 });
  return child;
}

function dumpContext(pid: number, sendChunk?: (c: Buffer) => Promise<void>) {
  return {
    targetPid: pid,
    procRoot: '/proc',
    pprofUrl: null,
    sigquit: new SigquitCapture(),
    exited: (p: number, signal: AbortSignal) => waitForExit(p, { signal }),
    ...(sendChunk ? { sendChunk } : {}),
  };
}

describe('Go reader errors', () => {
  it('refuses a process that is not Go, and one that has exited', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      await new Promise((r) => child.once('spawn', r));
      await expect(readGoroutines(child.pid!)).rejects.toThrow(NotGoBinaryError);
      await expect(readGoroutines(child.pid!)).rejects.toThrow(/is not a Go executable/);
      const mem = new ProcessMemory(child.pid!);
      try {
        expect(() => mem.read(0x1000, 8)).toThrow(UnreadableAddressError);
        expect(() => mem.read(0x1000, 8)).toThrow(/address 0x1000 \(\+8 bytes\) does not read/);
      } finally {
        mem.close();
      }
    } finally {
      child.kill('SIGKILL');
    }
    await new Promise((r) => child.once('exit', r));
    await expect(readGoroutines(child.pid!)).rejects.toThrow(TargetExitedError);
  });

  it('names a Go version without a proven layout, read from a live stripped binary', async () => {
    // The fake envd with its version string (in .go.buildinfo and runtime.buildVersion) made
    // that of a Go that has no proven g layout: everything else is the real binary, which runs.
    const real = readFileSync(envdBinary);
    const version = /go1\.\d+\.\d+/.exec(real.toString('latin1'))![0];
    const future = version.replace(/^go1\.\d+/, 'go1.99');
    expect(future.length).toBe(version.length);
    const patched = Buffer.from(real.toString('latin1').split(version).join(future), 'latin1');
    const exe = path.join(tmp, 'fake-envd-go1.99');
    writeFileSync(exe, patched);
    chmodSync(exe, 0o755);
    const child = await hungEnvd(exe);
    const err = await readGoroutines(child.pid!).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UnsupportedGoVersionError);
    expect((err as Error).message).toContain(`${future}: no proven g layout for Go 1.99`);
    expect((err as Error).message).toMatch(/proven: 1\.19, 1\.20, .*1\.26/);
    expect((err as Error).message).toContain('guest-probe/src/dumps/go/layout.ts');
    // The probe's dump path says the same, and the target goes on.
    const r = await takeDump({ mode: 'goroutines', destructive: false }, dumpContext(child.pid!));
    expect(r).toMatchObject({ source: 'none', complete: false });
    expect(r.error).toContain('no proven g layout for Go 1.99');
    expect(child.exitCode).toBeNull();
  }, 60_000);

  it.runIf(process.getuid?.() === 0)(
    'without ptrace permission (run as nobody against a root process): names CAP_SYS_PTRACE and kernel.yama.ptrace_scope',
    async () => {
      const target = await hungEnvd();
      // The reader bundled as the probe bundles it, with the addon beside it, in a folder
      // nobody can read; then run as uid/gid 65534 with no groups and no capabilities.
      const dir = path.join(tmp, 'as-nobody');
      const entry = path.join(tmp, 'read-as-nobody.ts');
      writeFileSync(
        entry,
        `import { readGoroutines } from ${JSON.stringify(path.join(here, '../src/dumps/go/index.ts'))};
readGoroutines(Number(process.argv[2])).then(
  (r) => console.log(JSON.stringify({ ok: r.goroutines })),
  (e) => console.log(JSON.stringify({ name: e.constructor.name, message: e.message })),
);
`,
      );
      await build({
        entryPoints: [entry],
        bundle: true,
        platform: 'node',
        format: 'esm',
        outfile: path.join(dir, 'read.mjs'),
        logLevel: 'warning',
      });
      copyFileSync(path.join(here, '../native/build/Release/vsockdiag.node'), path.join(dir, 'vsockdiag.node'));
      chmodSync(tmp, 0o755);
      const out = await new Promise<string>((resolve, reject) => {
        const p = spawn(
          'setpriv',
          [
            '--reuid=65534',
            '--regid=65534',
            '--clear-groups',
            '--inh-caps=-all',
            '--bounding-set=-all',
            process.execPath,
            path.join(dir, 'read.mjs'),
            String(target.pid),
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        children.track(p);
        let o = '';
        let e = '';
        p.stdout.setEncoding('utf8').on('data', (d: string) => (o += d));
        p.stderr.setEncoding('utf8').on('data', (d: string) => (e += d));
        p.once('error', reject);
        p.once('exit', (code) => (code === 0 ? resolve(o) : reject(new Error(`exit ${code}: ${e}`))));
      });
      const res = JSON.parse(out.trim()) as { name?: string; message?: string; ok?: number };
      expect(res.name).toBe(PtraceDeniedError.name);
      expect(res.message).toContain('CAP_SYS_PTRACE');
      expect(res.message).toContain('kernel.yama.ptrace_scope');
      expect(res.message).toContain(`/proc/${target.pid}/`);
      // Nothing happened to the target.
      expect(target.exitCode).toBeNull();
    },
    60_000,
  );

  it('the target exiting during the read: TargetExitedError, and the probe keeps the dump incomplete', async () => {
    // Killed from the first streamed chunk: the read has sent text by then, so this is a
    // partial read, which must not come out as complete.
    for (const via of ['reader', 'probe'] as const) {
      const child = await hungEnvd(envdBinary, 10_000);
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      let chunks = 0;
      const onChunk = async () => {
        if (chunks++ === 0) {
          child.kill('SIGKILL');
          await exited;
        }
      };
      if (via === 'reader') {
        const err = await readGoroutines(child.pid!, { onChunk }).then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(TargetExitedError);
        expect((err as Error).message).toMatch(new RegExp(`process ${child.pid} (exited|is gone)`));
      } else {
        const r = await takeDump({ mode: 'goroutines', destructive: false }, dumpContext(child.pid!, onChunk));
        expect(chunks).toBeGreaterThan(0);
        expect(r.complete).toBe(false);
        expect(r.error).toMatch(/exited|is gone/);
      }
    }
  }, 120_000);

  it('a g that does not read: named in the notes, the dump not complete, running or paused', async () => {
    const child = await hungEnvd(envdBinary, 50);
    const pid = child.pid!;
    const whole = await readGoroutines(pid);
    expect(whole.complete).toBe(true);
    // The target's memory with one g's address made unreadable, as an unmapped page reads.
    class OneBadG extends ProcessMemory {
      bad = 0;
      override readMany(dst: Buffer, segs: Float64Array, count: number, got: Int32Array): void {
        super.readMany(dst, segs, count, got);
        for (let i = 0; i < count; i++) if (segs[2 * i] === this.bad) got[i] = 0;
      }
      override snapshot(...args: Parameters<ProcessMemory['snapshot']>): Buffer | null {
        const out = args[4];
        const stack = super.snapshot(...args);
        for (let k = 0; k < args[1]; k++) if (out.addrs[k] === this.bad) out.window[k] = -3;
        return stack;
      }
    }
    // The victim: allgs[1] (Go 1.19 prints no gp=), found through the reader's own notes.
    const mem = new OneBadG(pid);
    try {
      const loc = /allglen at 0x[0-9a-f]+, allgptr at 0x([0-9a-f]+)/.exec(whole.notes.join('\n'))!;
      const arr = Number(mem.read(Number.parseInt(loc[1]!, 16), 8).readBigUInt64LE(0));
      mem.bad = Number(mem.read(arr + 8, 8).readBigUInt64LE(0));
    } finally {
      mem.close();
    }
    for (const pause of [false, true]) {
      const bad = new OneBadG(pid);
      bad.bad = mem.bad;
      const r = await readGoroutines(pid, { pause, openMemory: () => bad });
      expect(r.complete, `pause ${pause}`).toBe(false);
      expect(r.goroutines).toBeGreaterThan(0);
      expect(r.notes.join('\n')).toContain(`= 0x${mem.bad.toString(16)}: address 0x${mem.bad.toString(16)} (+`);
      expect(r.notes.join('\n')).toMatch(/does not read in the target \(not mapped\)/);
      await waitFor('the target to run again', () => readFileSync(`/proc/${pid}/stat`, 'latin1').split(') ')[1]![0] !== 'T', {
        timeoutMs: 30_000,
      });
    }
  }, 60_000);
});
