// Wrap mode checked from outside: a harness (wrap.ts bundled with esbuild into a small Node
// program) wraps a shell command, and the test reads the harness's own stdout and stderr,
// exactly as a supervisor would, plus a JSON report of what onOutput saw and how the target
// ended.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childReaper } from '../../test/support/children.js';
import { waitFor } from '../../test/support/wait.js';

const WRAP_SRC = fileURLToPath(new URL('../src/wrap.ts', import.meta.url));

let dir: string;
let harness: string;
const running = childReaper();

interface Report {
  code: number | null;
  signal: string | null;
  status: number;
  errors: string[];
  ended: string[];
  seen: { stdout: string; stderr: string };
  output: Record<'stdout' | 'stderr', { bytes: number; discarded: number; broken: string | null; pauses: number }>;
}

const HARNESS = `
import { writeFileSync } from 'node:fs';
import { exitStatusOf, flushOutput, spawnWrapped } from ${JSON.stringify(WRAP_SRC)};
const command = process.argv.slice(process.argv.indexOf('--') + 1);
const seen = { stdout: [], stderr: [] };
const ended = [];
const errors = [];
const t = spawnWrapped({
  command,
  notifySocket: '/run/test-notify.sock',
  onOutput: (stream, chunk) => seen[stream].push(Buffer.from(chunk)),
  onOutputEnd: (stream) => ended.push(stream),
  onError: (err) => errors.push(err.message),
  onExit: async (code, signal) => {
    await flushOutput(5000);
    const status = exitStatusOf(code, signal);
    const state = (s) => ({ ...t.output[s], broken: t.output[s].broken ? t.output[s].broken.message : null });
    writeFileSync(process.env.WRAP_REPORT, JSON.stringify({
      code, signal, status, errors, ended,
      seen: { stdout: Buffer.concat(seen.stdout).toString('base64'), stderr: Buffer.concat(seen.stderr).toString('base64') },
      output: { stdout: state('stdout'), stderr: state('stderr') },
    }));
    process.exit(status);
  },
});
`;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'vsockdiag-wrap-'));
  const entry = path.join(dir, 'harness-src.mjs');
  writeFileSync(entry, HARNESS);
  harness = path.join(dir, 'harness.mjs');
  await build({
    entryPoints: [entry],
    outfile: harness,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'warning',
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Run {
  child: ChildProcess;
  report: string;
  stdout: Buffer[];
  stderr: Buffer[];
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function wrap(script: string, opts: { readStdout?: boolean } = {}): Run {
  const report = path.join(dir, `report-${randomBytes(4).toString('hex')}.json`);
  const child = spawn(process.execPath, [harness, '--', 'sh', '-c', script], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, WRAP_REPORT: report },
  });
  running.track(child);
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  if (opts.readStdout !== false) child.stdout!.on('data', (c: Buffer) => stdout.push(c));
  child.stderr!.on('data', (c: Buffer) => stderr.push(c));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal })),
  );
  return { child, report, stdout, stderr, done };
}

const readReport = (r: Run): Report => JSON.parse(readFileSync(r.report, 'utf8')) as Report;

describe('wrap mode', () => {
  it('passes stdout and stderr through byte for byte, binary included; onOutput sees the same bytes', async () => {
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const out = Buffer.concat([
      Buffer.from('envd startup: creating logger\r\n'),
      all,
      randomBytes(1 << 20),
      Buffer.from([0xff, 0xc3, 0x00]),
    ]);
    const err = Buffer.concat([Buffer.from('envd startup: binding HTTP listener\n'), randomBytes(100_000), all]);
    writeFileSync(path.join(dir, 'out.bin'), out);
    writeFileSync(path.join(dir, 'err.bin'), err);
    const r = wrap('cat out.bin; cat err.bin >&2; printf "%s" "$NOTIFY_SOCKET" > notify.env; exit 7');
    const { code } = await r.done;
    expect(code).toBe(7);
    expect(Buffer.concat(r.stdout).equals(out)).toBe(true);
    expect(Buffer.concat(r.stderr).equals(err)).toBe(true);
    const rep = readReport(r);
    expect(rep).toMatchObject({ code: 7, signal: null, status: 7, errors: [] });
    expect(rep.ended.sort()).toEqual(['stderr', 'stdout']);
    expect(Buffer.from(rep.seen.stdout, 'base64').equals(out)).toBe(true);
    expect(Buffer.from(rep.seen.stderr, 'base64').equals(err)).toBe(true);
    expect(rep.output.stdout).toMatchObject({ bytes: out.length, discarded: 0, broken: null });
    expect(readFileSync(path.join(dir, 'notify.env'), 'utf8')).toBe('/run/test-notify.sock');
  });

  it('reports death by a signal and passes it on as 128+n', async () => {
    const r = wrap('echo before; kill -KILL $$');
    const { code } = await r.done;
    expect(code).toBe(137);
    expect(Buffer.concat(r.stdout).toString()).toBe('before\n');
    expect(readReport(r)).toMatchObject({ code: null, signal: 'SIGKILL', status: 137 });
  });

  it('forwards SIGTERM to the target and reports its exit', async () => {
    const r = wrap('trap "echo got TERM; exit 42" TERM; echo ready; while :; do sleep 0.05; done');
    await waitFor('the target to be ready', () => Buffer.concat(r.stdout).toString().includes('ready'));
    r.child.kill('SIGTERM');
    const { code, signal } = await r.done;
    expect(signal).toBeNull();
    expect(code).toBe(42);
    expect(Buffer.concat(r.stdout).toString()).toBe('ready\ngot TERM\n');
    expect(readReport(r)).toMatchObject({ code: 42, signal: null });
  });

  it('reports a command that cannot be started', async () => {
    const report = path.join(dir, 'report-enoent.json');
    const child = spawn(process.execPath, [harness, '--', path.join(dir, 'no-such-program')], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, WRAP_REPORT: report },
    });
    running.track(child);
    const code = await new Promise((resolve) => child.once('close', resolve));
    expect(code).toBe(127);
    const rep = JSON.parse(readFileSync(report, 'utf8')) as Report;
    expect(rep.errors[0]).toMatch(/ENOENT/);
  });

  it('keeps backpressure: while our stdout is not read, the target blocks in write', async () => {
    const total = 128 * 65536;
    const r = wrap('i=0; while [ $i -lt 128 ]; do head -c 65536 /dev/zero; i=$((i+1)); echo $i > progress; done', {
      readStdout: false,
    });
    const progress = () => (existsSync(path.join(dir, 'progress')) ? Number(readFileSync(path.join(dir, 'progress'), 'utf8')) : 0);
    await sleep(700);
    const stalled = progress();
    await sleep(300);
    expect(progress()).toBe(stalled);
    // only what fits in the pipes and stream buffers between target and test: a few hundred KiB, far from all 8 MiB
    expect(stalled).toBeLessThan(32);
    expect(r.child.exitCode).toBeNull();
    r.child.stdout!.on('data', (c: Buffer) => r.stdout.push(c));
    const { code } = await r.done;
    expect(code).toBe(0);
    const got = Buffer.concat(r.stdout);
    expect(got.length).toBe(total);
    expect(got.every((b) => b === 0)).toBe(true);
    const rep = readReport(r);
    expect(rep.output.stdout.pauses).toBeGreaterThan(0);
    expect(rep.output.stdout.bytes).toBe(total);
    rmSync(path.join(dir, 'progress'));
  });

  it('when our stdout breaks (EPIPE), the target is not hurt: its output is drained and discarded', async () => {
    const r = wrap('i=0; while [ $i -lt 64 ]; do head -c 65536 /dev/zero; i=$((i+1)); done; echo finished >&2; exit 5', {
      readStdout: false,
    });
    r.child.stdout!.destroy(); // the reader of our stdout goes away
    const { code } = await r.done;
    expect(code).toBe(5);
    expect(Buffer.concat(r.stderr).toString()).toBe('finished\n');
    const rep = readReport(r);
    expect(rep).toMatchObject({ code: 5, signal: null });
    expect(rep.output.stdout.broken).toMatch(/EPIPE|closed/);
    expect(rep.output.stdout.bytes).toBe(64 * 65536);
    expect(rep.output.stdout.discarded).toBeGreaterThan(0);
    // onOutput still saw everything
    expect(Buffer.from(rep.seen.stdout, 'base64').length).toBe(64 * 65536);
  });
});
