// The shipped probe (guest-probe/dist): a launcher that compiles the CommonJS bundle with V8's
// code cache. The cache only ever speeds things up: a missing, stale or corrupt one costs
// the compile it saves, never a start. guest-probe/code-cache.mjs makes it and says clearly
// when it cannot.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { FrameDecoder, decodeProbeMessage } from '@vsockdiag/proto';
import { ROOT, requireBuilt, soloProbeArgs } from '../harness/collector.js';
import { helloNote } from '../harness/hello-note.js';
import { waitFor } from '../support/wait.js';

const DIST = path.join(ROOT, 'guest-probe/dist');
const addon = createRequire(import.meta.url)(path.join(DIST, 'vsockdiag.node')) as { checksum(b: Buffer): string };
const FILES = ['package.json', 'vsockdiag-probe.js', 'vsockdiag-probe.bundle.js', 'vsockdiag-probe.bundle.cache', 'vsockdiag.node'];

let dir: string;
beforeEach(() => {
  requireBuilt();
  // A copy of the install, so the cache can be broken without touching the build.
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-launcher-'));
  for (const f of FILES) fs.copyFileSync(path.join(DIST, f), path.join(dir, f));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const cacheFile = () => path.join(dir, 'vsockdiag-probe.bundle.cache');

function version(file = 'vsockdiag-probe.js'): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [path.join(dir, file), '--version'], {
    encoding: 'utf8',
    env: { ...process.env, VSOCKDIAG_CODE_CACHE: 'report' },
  });
}

/** Starts the probe against a Unix socket here and resolves its first message (the hello). */
async function firstMessage(node: { args: string[]; env: Record<string, string> } = { args: [], env: {} }): Promise<{ type: string }> {
  const sock = path.join(dir, 'collector.sock');
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(sock, r));
  const probe = spawn(process.execPath, [...node.args, path.join(dir, 'vsockdiag-probe.js'), ...soloProbeArgs(sock)], {
    stdio: 'ignore',
    env: { ...process.env, ...node.env },
  });
  try {
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no hello within 10 s')), 10_000);
      probe.once('exit', (code) => reject(new Error(`the probe exited (${code}) before its hello`)));
      server.once('connection', (s) => {
        const decoder = new FrameDecoder((body) => {
          clearTimeout(timer);
          resolve(decodeProbeMessage(body));
        });
        s.on('data', (d: Buffer) => decoder.push(d));
      });
    });
  } finally {
    probe.kill('SIGKILL');
    server.close();
  }
}

it('uses the code cache the build made', () => {
  const r = version();
  expect(r.status).toBe(0);
  expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  expect(r.stderr).toContain('code cache accepted');
});

it('starts without a cache, and with a corrupt one, and still says hello', async () => {
  fs.rmSync(cacheFile());
  expect(version().stderr).toContain('code cache missing');
  expect((await firstMessage()).type).toBe('hello');

  const bytes = fs.readFileSync(path.join(DIST, 'vsockdiag-probe.bundle.cache'));
  for (let i = 64; i < bytes.length; i += 97) bytes[i] = bytes[i]! ^ 0xff; // V8 alone would crash on these
  fs.writeFileSync(cacheFile(), bytes);
  const r = version();
  expect(r.status).toBe(0);
  expect(r.stderr).toContain('code cache corrupt');
  expect((await firstMessage()).type).toBe('hello');

  // Whole by its checksum, but not V8's (or a truncated one): V8 rejects it.
  fs.writeFileSync(cacheFile(), Buffer.from(`VDC2${addon.checksum(Buffer.from('nonsense'))}nonsense`, 'latin1'));
  expect(version().stderr).toContain('code cache rejected');
  expect((await firstMessage()).type).toBe('hello');
});

// The probe's start-up ends at its hello (the collector's first word of a booting VM): Node's
// modules the probe needs only later are loaded after it. Seen from inside, with a preload
// that notes which of Node's modules are loaded when the first write(2) to a socket happens.
const LATER = ['net', 'stream', 'perf_hooks', 'child_process', 'http'];

it('writes its hello on the raw socket before it loads node:net, streams or perf_hooks', async () => {
  const note = helloNote(path.join(dir, 'hello-note'));
  expect((await firstMessage(note)).type).toBe('hello');
  const notes = [...note.notes().values()];
  expect(notes).toHaveLength(1);
  const seen = notes[0]!;
  expect(seen.at).toBe('hello');
  expect(seen.loaded).toContain('fs');
  expect(seen.loaded.filter((m) => LATER.includes(m))).toEqual([]);
});

// A command port on a Unix path is bound without Node's listen(), whose cluster support loads
// node:cluster, child_process and dgram for good (guest-probe/src/vsock/pipe.ts). Seen from
// outside with a preload that lists the loaded modules on SIGUSR2, next to a plain Node
// listening on a Unix path the usual way, which does load them.
const CLUSTER = ['cluster', 'child_process', 'dgram'];

async function modulesListeningOn(sock: string, args: string[]): Promise<string[]> {
  const note = path.join(dir, `modules-${path.basename(sock)}.json`);
  const child = spawn(process.execPath, ['--require', path.join(ROOT, 'test/harness/modules-note.cjs'), ...args], {
    stdio: 'ignore',
    env: { ...process.env, VD_MODULES_NOTE: note },
  });
  try {
    // Accepting: something answers on the socket (the probe's hello, or the echo below).
    await waitFor(`a listener on ${sock}`, () => (fs.existsSync(sock) ? accepts(sock) : null), { timeoutMs: 20_000 });
    child.kill('SIGUSR2');
    return await waitFor('the modules note', () => (fs.existsSync(note) ? (JSON.parse(fs.readFileSync(note, 'utf8')) as string[]) : null), {
      timeoutMs: 10_000,
    });
  } finally {
    child.kill('SIGKILL');
  }
}

function accepts(sock: string): Promise<true | null> {
  return new Promise((resolve) => {
    const c = net.connect(sock, () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(null));
  });
}

it('serves its command port on a Unix path without loading node:cluster, child_process or dgram', async () => {
  const sock = path.join(dir, 'cmd.sock');
  const probe = await modulesListeningOn(sock, [
    path.join(dir, 'vsockdiag-probe.js'),
    ...soloProbeArgs(path.join(dir, 'nobody.sock')),
    '--listen',
    `unix:${sock}`,
  ]);
  expect(probe).toContain('net');
  expect(probe.filter((m) => CLUSTER.includes(m))).toEqual([]);

  const plainSock = path.join(dir, 'plain.sock');
  const plain = await modulesListeningOn(plainSock, [
    '-e',
    `require('node:net').createServer((s) => s.on('error', () => {}).end()).listen(${JSON.stringify(plainSock)})`,
  ]);
  expect(plain.filter((m) => CLUSTER.includes(m)).sort()).toEqual([...CLUSTER].sort());
});

// Once up, the probe has V8 interpret its code and compile no more machine code, and once its
// target is settled collect only in full (guest-probe/src/v8-flags.ts), for memory. Seen from
// inside, with a preload that has V8 optimise a function of its own and counts collections
// once the flags are set.
interface TierNote {
  v8Loaded: boolean;
  status: number;
  minor: number;
  major: number;
}

function tierNote(opts: { env?: Record<string, string>; args?: string[] } = {}): Promise<TierNote> {
  const file = path.join(dir, 'tier-note.json');
  const probe = spawn(
    process.execPath,
    [
      '--allow-natives-syntax',
      '--require',
      path.join(ROOT, 'test/harness/tier-note.cjs'),
      path.join(dir, 'vsockdiag-probe.js'),
      // No collector: the first attempt fails at once, and start-up goes on without it.
      ...soloProbeArgs(path.join(dir, 'nobody.sock')),
      ...(opts.args ?? []),
    ],
    { stdio: 'ignore', env: { ...process.env, ...opts.env, VD_TIER_NOTE: file } },
  );
  return waitFor('the tier note', () => (fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as TierNote) : null), {
    timeoutMs: 20_000,
  }).finally(() => probe.kill('SIGKILL'));
}

const OPTIMISED = 16; // %GetOptimizationStatus: kOptimized

it('compiles no more machine code once it is up, and scavenges while its target is not settled', async () => {
  const note = await tierNote();
  expect(note.v8Loaded).toBe(true);
  expect(note.status & OPTIMISED).toBe(0);
  expect(note.minor).toBeGreaterThan(0);
});

it('collects garbage only in full once its target is settled', async () => {
  // A free port for the target (wrapped: the probe's child) to bind.
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((r) => server.close(r));
  // It ends when the probe does (killed at the end of tierNote): its parent changes then.
  const target = `require('node:net').createServer().listen(${port}, '127.0.0.1'); const p = process.ppid; setInterval(() => process.ppid !== p && process.exit(0), 100)`;
  const note = await tierNote({
    env: { VD_TIER_UNTIL: 'full-gc' },
    args: ['--expect-port', String(port), '--', process.execPath, '-e', target],
  });
  expect(note.status & OPTIMISED).toBe(0);
  expect(note.major).toBeGreaterThan(0);
  expect(note.minor).toBe(0);
});

it("keeps V8's defaults in the run that writes the code cache (V8 stamps a cache with the flags)", async () => {
  const note = await tierNote({ env: { VSOCKDIAG_CODE_CACHE: 'write' } });
  expect(note.v8Loaded).toBe(false);
  expect(note.status & OPTIMISED).toBe(OPTIMISED);
  expect(note.minor).toBeGreaterThan(0);
});

it('rejects a cache made for another bundle (a rebuild without a new cache)', () => {
  fs.appendFileSync(path.join(dir, 'vsockdiag-probe.bundle.js'), '\n// changed\n');
  expect(version().stderr).toContain('code cache rejected');
});

it('is strict code, as its ES module sources were (the directive must open the function the bundle is)', () => {
  const bundle = fs.readFileSync(path.join(DIST, 'vsockdiag-probe.bundle.js'), 'utf8');
  expect(bundle.startsWith('(function (exports, require, module, __filename, __dirname) {"use strict";')).toBe(true);
});

// V8 keeps a script's source for the script's life: the launcher has the addon map the
// bundle and hand it to V8 as an external string, so the text stays in the file's pages.
it("compiles the bundle from the file's own pages, which stay mapped while it runs", async () => {
  const probe = spawn(process.execPath, [path.join(dir, 'vsockdiag-probe.js'), ...soloProbeArgs(path.join(dir, 'nobody.sock'))], {
    stdio: 'ignore',
  });
  try {
    const bundle = path.join(dir, 'vsockdiag-probe.bundle.js');
    const line = await waitFor('the bundle among the mappings', () =>
      fs
        .readFileSync(`/proc/${probe.pid}/maps`, 'utf8')
        .split('\n')
        .find((l) => l.endsWith(` ${bundle}`)),
    );
    expect(line.split(/\s+/)[1]).toBe('r--p');
  } finally {
    probe.kill('SIGKILL');
  }
});

it('says clearly when the bundle is not beside it', () => {
  fs.rmSync(path.join(dir, 'vsockdiag-probe.bundle.js'));
  const r = version();
  expect(r.status).toBe(1);
  expect(r.stderr).toContain('cannot read');
  expect(r.stderr).toContain('(ENOENT): install vsockdiag-probe.bundle.js beside vsockdiag-probe.js');
});

it('runs the bundle directly too, without the launcher', () => {
  const r = version('vsockdiag-probe.bundle.js');
  expect(r.status).toBe(0);
  expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
});

it('code-cache.mjs remakes the cache, and fails loudly when the probe cannot start', () => {
  fs.rmSync(cacheFile());
  const ok = spawnSync(process.execPath, [path.join(ROOT, 'guest-probe/code-cache.mjs'), dir], { encoding: 'utf8' });
  expect(ok.status, ok.stderr).toBe(0);
  expect(ok.stdout).toContain('accepted');
  expect(version().stderr).toContain('code cache accepted');

  fs.writeFileSync(path.join(dir, 'vsockdiag-probe.bundle.js'), 'process.exit(3)\n');
  const bad = spawnSync(process.execPath, [path.join(ROOT, 'guest-probe/code-cache.mjs'), dir], { encoding: 'utf8' });
  expect(bad.status).toBe(1);
  expect(bad.stderr).toMatch(/sent no hello \(exit 3\)/);
});
