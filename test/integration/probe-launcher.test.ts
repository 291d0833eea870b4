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
