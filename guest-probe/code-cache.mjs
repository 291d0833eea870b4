// Produces vsockdiag-probe.bundle.cache (see src/launcher.ts): starts the probe once the way
// it starts in a VM, up to its hello and first sample, and lets the launcher save V8's code
// cache as it exits, so the cache holds the whole start-up path. Then checks that a fresh
// start accepts it. The run is harmless on a build machine: its collector is a Unix socket
// here, its notify socket a temporary path, no command port, no /dev/kmsg.
//
//   node guest-probe/code-cache.mjs [DIR] [NODE]   (defaults: guest-probe/dist, this node)
//
// The cache fits one Node binary (V8 version, flags, architecture): make rootfs-install
// rebuilds it with the Node it installs.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const TIMEOUT_MS = 15_000;
/** After the hello: time for the first sample and its events to run (and be compiled). */
const AFTER_HELLO_MS = 500;

/** Writes DIR/vsockdiag-probe.bundle.cache with NODE; resolves 'accepted' or throws why not. */
export async function writeCodeCache(dir, node = process.execPath) {
  const launcher = path.join(dir, 'vsockdiag-probe.js');
  const cacheFile = path.join(dir, 'vsockdiag-probe.bundle.cache');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-code-cache-'));
  const sock = path.join(tmp, 'collector.sock');
  const server = net.createServer();
  try {
    await new Promise((resolve, reject) => server.once('error', reject).listen(sock, resolve));
    const hello = new Promise((resolve) => server.once('connection', (s) => s.once('data', resolve).on('error', () => {})));
    fs.rmSync(cacheFile, { force: true });
    const probe = spawn(
      node,
      [launcher, '--connect', `unix:${sock}`, '--listen', 'off', '--kmsg', 'off', '--notify-socket', path.join(tmp, 'notify.sock')],
      { env: { ...process.env, VSOCKDIAG_CODE_CACHE: 'write' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    probe.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise((resolve) => probe.once('exit', (code, signal) => resolve({ code, signal })));
    const timer = setTimeout(() => probe.kill('SIGKILL'), TIMEOUT_MS);
    const first = await Promise.race([hello.then(() => 'hello'), exited.then(() => 'exit')]);
    if (first === 'hello') {
      await new Promise((r) => setTimeout(r, AFTER_HELLO_MS));
      probe.kill('SIGTERM');
    }
    const { code, signal } = await exited;
    clearTimeout(timer);
    if (first !== 'hello' || !fs.existsSync(cacheFile)) {
      throw new Error(
        `code cache: the probe (${node} ${launcher}) ${first === 'hello' ? `exited (${signal ?? code}) without writing it` : `sent no hello (exit ${signal ?? code})`}${stderr ? `:\n${stderr}` : ''}`,
      );
    }
  } finally {
    server.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  const check = spawnSync(node, [launcher, '--version'], { env: { ...process.env, VSOCKDIAG_CODE_CACHE: 'report' }, encoding: 'utf8' });
  const state = /code cache (\w+)/.exec(check.stderr ?? '')?.[1];
  if (check.status !== 0 || state !== 'accepted') {
    throw new Error(`code cache: a fresh start did not accept it (exit ${check.status}, ${state ?? 'no report'}): ${check.stderr}`);
  }
  return state;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const [dir = path.join(here, 'dist'), node = process.execPath] = process.argv.slice(2);
  try {
    console.log(`code cache for ${node}: ${await writeCodeCache(path.resolve(dir), node)}`);
  } catch (err) {
    console.error(err.message);
    process.exit(1);
  }
}
