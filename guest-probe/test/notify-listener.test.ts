import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MAX_NOTIFY_DATAGRAM } from '@vsockdiag/proto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { waitFor } from '../../test/support/wait.js';

import { loadNative } from '../src/native.js';
import { NotifyListener } from '../src/notify/listener.js';
import type { NotifyMessage } from '../src/notify/parse.js';
import { NotifyRate } from '../src/notify/rate.js';

const ADDON = fileURLToPath(new URL('../native/build/Release/vsockdiag.node', import.meta.url));
const SYSTEMD_NOTIFY = '/usr/bin/systemd-notify';

// Sends each hex argument (or 'fill:<hex byte>:<count>') as one datagram to argv[1] ('@name' = abstract) and prints its pid.
// With SEND_FDS=<file>, every datagram also carries three fds of that file (SCM_RIGHTS).
// With BIND_ONLY=1 it binds argv[1] and exits without unlinking (a stale socket file).
const PY_SENDER = `
import array, os, socket, sys
path = sys.argv[1]
addr = '\\0' + path[1:] if path.startswith('@') else path
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
if os.environ.get('BIND_ONLY'):
    s.bind(addr)
    os._exit(0)
marker = os.environ.get('SEND_FDS')
fds = [os.open(marker, os.O_RDONLY) for _ in range(3)] if marker else []
for h in sys.argv[2:]:
    if h.startswith('fill:'):
        _, byte, count = h.split(':')
        data = bytes.fromhex(byte) * int(count)
    else:
        data = bytes.fromhex(h)
    if fds:
        s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))], 0, addr)
    else:
        s.sendto(data, addr)
print(os.getpid())
`;

function run(
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ stdout: string; stderr: string; code: number | null; signal: string | null }> {
  return new Promise((resolve) => {
    execFile(file, args, { env: { ...process.env, ...env }, timeout: 20_000 }, (err, stdout, stderr) => {
      const e = err as (Error & { code?: unknown; signal?: string | null }) | null;
      resolve({
        stdout,
        stderr,
        code: e ? (typeof e.code === 'number' ? e.code : null) : 0,
        signal: e?.signal ?? null,
      });
    });
  });
}

/** Payloads: text, bytes, or { fill: byte, count } for big datagrams (argv strings are capped at 128 KiB). */
type Payload = string | Buffer | { fill: number; count: number };

async function pySend(target: string, payloads: Payload[], env: NodeJS.ProcessEnv = {}): Promise<number> {
  const hex = payloads.map((p) =>
    typeof p === 'string'
      ? Buffer.from(p).toString('hex')
      : Buffer.isBuffer(p)
        ? p.toString('hex')
        : `fill:${p.fill.toString(16).padStart(2, '0')}:${p.count}`,
  );
  const r = await run('python3', ['-c', PY_SENDER, target, ...hex], env);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return Number(r.stdout.trim());
}

function collect(l: NotifyListener): { msg: NotifyMessage; pid: number }[] {
  const got: { msg: NotifyMessage; pid: number }[] = [];
  l.on('message', (msg, pid) => got.push({ msg, pid }));
  return got;
}

let dir = '';
const open: NotifyListener[] = [];
function listen(p: string, rate?: NotifyRate): NotifyListener {
  const l = NotifyListener.open(p, rate);
  open.push(l);
  return l;
}
function tmp(): string {
  dir = mkdtempSync('/tmp/vsdn-');
  return dir;
}
const abstractName = () => `@vsockdiag-test-${process.pid}-${Math.random().toString(36).slice(2)}`;

afterEach(() => {
  for (const l of open.splice(0)) l.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = '';
});

describe('NotifyListener (real AF_UNIX datagram socket)', () => {
  it('delivers parsed datagrams with the sender pid and counts them', async () => {
    const sock = path.join(tmp(), 'notify');
    const l = listen(sock);
    expect(l.fd).toBeGreaterThan(2);
    expect(statSync(sock).isSocket()).toBe(true);
    const got = collect(l);

    const pid = await pySend(sock, ['READY=1\nSTATUS=up\nPHASE=init\nX_EXTRA=1', '', 'bad line\nlower=1\nSTOPPING=1\n']);
    await waitFor('3 messages', () => got.length === 3, { timeoutMs: 5000 });

    expect(pid).toBeGreaterThan(0);
    expect(got.map((g) => g.pid)).toEqual([pid, pid, pid]);
    expect(got[0]?.msg).toMatchObject({
      fields: { READY: '1', STATUS: 'up', PHASE: 'init', X_EXTRA: '1' },
      ready: true,
      status: 'up',
      phase: 'init',
      invalid: 0,
    });
    expect(got[1]?.msg).toMatchObject({ fields: {}, ready: false, invalid: 0 }); // zero-length datagram
    expect(got[2]?.msg).toMatchObject({ fields: { STOPPING: '1' }, stopping: true, invalid: 2 });
    expect(l.counters).toEqual({ received: 3, rejected: 0, oversize: 0, invalidLines: 2, dropped: 0, pauses: 0 });
  });

  it('over the rate it stops reading, so a blocked sender waits, and READY=1 still passes', async () => {
    const sock = path.join(tmp(), 'notify');
    // 5 at once, then 10/s: 40 datagrams take a few pauses; the queue (max_dgram_qlen, often
    // 10) fills while paused, so the blocking sender below waits for each resume.
    const l = listen(sock, new NotifyRate(10, 5));
    const got = collect(l);
    const flood = Array.from({ length: 40 }, (_, i) => `STATUS=flood ${i}`);
    await pySend(sock, [...flood, 'READY=1\nSTATUS=last']);
    await waitFor('READY=1 behind the flood', () => got.some((g) => g.msg.ready), { timeoutMs: 20_000 });
    expect(l.counters.received).toBe(41);
    expect(l.counters.pauses).toBeGreaterThan(0);
    // What passed fits the bucket; the rest was read then dropped, bar READY=1, which always passes.
    expect(got.length + l.counters.dropped).toBe(41);
    expect(got.length).toBeLessThan(41);
    expect(got.at(-1)?.msg.status).toBe('last');
  });

  it('close() while paused leaves no resume timer behind', async () => {
    // Only the listener's own timers are faked; the socket and the rate's clock stay real.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const sock = path.join(tmp(), 'notify');
      const l = listen(sock, new NotifyRate(1, 1));
      // Ten in a row: past the bucket of one whatever the machine's pace; the listener then
      // reads no more until its (faked, never firing) resume, so it pauses exactly once.
      await pySend(
        sock,
        Array.from({ length: 10 }, (_, i) => `STATUS=${i}`),
      );
      for (const end = Date.now() + 10_000; l.counters.pauses === 0 && Date.now() < end; ) {
        await new Promise((r) => setImmediate(r));
      }
      expect(l.counters.pauses).toBe(1);
      expect(vi.getTimerCount()).toBe(1); // the resume, NOTIFY_PAUSE_MS away
      l.close();
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('accepts systemd-notify', async (ctx) => {
    if (!existsSync(SYSTEMD_NOTIFY)) ctx.skip();
    const sock = path.join(tmp(), 'notify');
    const l = listen(sock);
    const got = collect(l);

    const t0 = Date.now();
    const r = await run(SYSTEMD_NOTIFY, ['--ready', '--status=warming up', 'PHASE=envd-start', 'X_PROBE=7'], {
      NOTIFY_SOCKET: sock,
    });
    // Without --no-block, systemd-notify (systemd >= 246) sends BARRIER=1 with a pipe fd and waits
    // until the receiver closes that fd; the addon never keeps passed fds, so this is immediate.
    expect(r.code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(4000);

    await waitFor('READY=1 from systemd-notify', () => got.some((g) => g.msg.ready), { timeoutMs: 5000 });
    const main = got.find((g) => g.msg.ready);
    expect(main?.msg.fields).toMatchObject({ READY: '1', STATUS: 'warming up', PHASE: 'envd-start', X_PROBE: '7' });
    expect(main?.msg.phase).toBe('envd-start');
    expect(main?.msg.status).toBe('warming up');
    expect(main?.pid).toBeGreaterThan(0);
  });

  it('rejects a 5000-byte datagram as oversize without parsing it', async () => {
    const sock = path.join(tmp(), 'notify');
    const l = listen(sock);
    const got = collect(l);

    await pySend(sock, [`STATUS=${'x'.repeat(4993)}`, 'READY=1']);
    await waitFor('2 datagrams', () => l.counters.received === 2, { timeoutMs: 5000 });

    expect(got).toHaveLength(1);
    expect(got[0]?.msg.ready).toBe(true);
    expect(l.counters).toEqual({ received: 2, rejected: 1, oversize: 1, invalidLines: 0, dropped: 0, pauses: 0 });
  });

  it('gives the raw callback exactly MAX_NOTIFY_DATAGRAM bytes and truncated=true for longer datagrams', async () => {
    const sock = path.join(tmp(), 'raw');
    const seen: [number, number, boolean][] = [];
    const h = loadNative().notifyBind(sock, (buf, pid, truncated) => seen.push([buf.length, pid, truncated]));
    try {
      const pid = await pySend(sock, [
        { fill: 0x41, count: MAX_NOTIFY_DATAGRAM },
        { fill: 0x41, count: MAX_NOTIFY_DATAGRAM + 1 },
        { fill: 0x41, count: 70000 },
      ]);
      await waitFor('3 datagrams', () => seen.length === 3, { timeoutMs: 5000 });
      expect(seen).toEqual([
        [MAX_NOTIFY_DATAGRAM, pid, false],
        [MAX_NOTIFY_DATAGRAM, pid, true],
        [MAX_NOTIFY_DATAGRAM, pid, true],
      ]);
    } finally {
      h.close();
    }
  });

  it('binds in the abstract namespace with a leading @', async () => {
    const name = abstractName();
    const l = listen(name);
    const got = collect(l);
    expect(existsSync(name)).toBe(false);

    const pid = await pySend(name, ['READY=1']);
    await waitFor('message', () => got.length === 1, { timeoutMs: 5000 });
    expect(got[0]?.pid).toBe(pid);

    // A second bind of the same abstract name fails; after close() it can be bound again.
    expect(() => NotifyListener.open(name)).toThrow(expect.objectContaining({ code: 'EADDRINUSE' }));
    l.close();
    listen(name).close();
  });

  it('refuses a path held by a live socket (EADDRINUSE) and leaves the owner working', async () => {
    const sock = path.join(tmp(), 'notify');
    const first = listen(sock);
    const got = collect(first);

    let err: (Error & { code?: string }) | undefined;
    try {
      listen(sock);
    } catch (e) {
      err = e as Error & { code?: string };
    }
    expect(err).toBeInstanceOf(Error);
    expect(err?.code).toBe('EADDRINUSE');
    expect(err?.message).toBe(`notify socket ${sock}: Address already in use`);

    await pySend(sock, ['READY=1']);
    await waitFor('message to the first listener', () => got.length === 1, { timeoutMs: 5000 });
  });

  it('replaces a stale socket file but never a regular file', async () => {
    const d = tmp();
    const stale = path.join(d, 'stale');
    await run('python3', ['-c', PY_SENDER, stale], { BIND_ONLY: '1' });
    expect(statSync(stale).isSocket()).toBe(true);
    const l = listen(stale);
    const got = collect(l);
    await pySend(stale, ['READY=1']);
    await waitFor('message on the rebound path', () => got.length === 1, { timeoutMs: 5000 });

    const regular = path.join(d, 'regular');
    writeFileSync(regular, 'keep me');
    expect(() => listen(regular)).toThrow(expect.objectContaining({ code: 'EADDRINUSE' }));
    expect(statSync(regular).isFile()).toBe(true);
  });

  it('reports errno names as codes: ENAMETOOLONG, ENOENT, EINVAL', () => {
    const d = tmp();
    const long = path.join(d, 'n'.repeat(108 - d.length - 1)); // 108 bytes
    expect(Buffer.byteLength(long)).toBe(108);
    expect(() => listen(long)).toThrow(
      expect.objectContaining({ code: 'ENAMETOOLONG', message: `notify socket ${long}: File name too long` }),
    );
    const max = long.slice(0, 107); // 107 bytes still fits
    listen(max).close();

    expect(() => listen('@' + 'a'.repeat(108))).toThrow(expect.objectContaining({ code: 'ENAMETOOLONG' }));
    listen('@' + 'a'.repeat(107)).close(); // abstract names may use all 108 bytes of sun_path

    expect(() => listen(path.join(d, 'missing', 'notify'))).toThrow(
      expect.objectContaining({ code: 'ENOENT', message: expect.stringMatching(/^notify socket .*missing\/notify: /) }),
    );
    expect(() => listen('')).toThrow(expect.objectContaining({ code: 'EINVAL' }));
    expect(() => listen(`${d}/a\0b`)).toThrow(expect.objectContaining({ code: 'EINVAL' }));
  });

  it('close() removes the socket file, is idempotent, and releases the path', async () => {
    const sock = path.join(tmp(), 'notify');
    const l = listen(sock);
    const fd = l.fd;
    expect(readlinkSync(`/proc/self/fd/${fd}`)).toMatch(/^socket:/);
    l.close();
    l.close();
    expect(existsSync(sock)).toBe(false);
    expect(l.fd).toBe(-1);

    const again = listen(sock);
    const got = collect(again);
    await pySend(sock, ['READY=1']);
    await waitFor('message after re-bind', () => got.length === 1, { timeoutMs: 5000 });
  });

  it('does not keep file descriptors passed with SCM_RIGHTS', async () => {
    const d = tmp();
    const marker = path.join(d, 'marker');
    writeFileSync(marker, '');
    const l = listen(path.join(d, 'notify'));
    const got = collect(l);

    await pySend(path.join(d, 'notify'), ['READY=1', 'STATUS=two'], { SEND_FDS: marker });
    await waitFor('2 messages', () => got.length === 2, { timeoutMs: 5000 });
    expect(got[1]?.msg.status).toBe('two');

    const leaked = readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === marker;
      } catch {
        return false;
      }
    });
    expect(leaked).toEqual([]);
  });
});

// The addon's behaviour around the event loop and process lifetime, checked in child processes.
describe('notify addon in a child process', () => {
  function child(script: string, sock: string): { done: Promise<{ code: number | null; out: string; err: string }>; ready: Promise<void> } {
    const c = spawn(process.execPath, ['-e', script], { env: { ...process.env, ADDON, SOCK: sock } });
    let out = '';
    let err = '';
    let onReady: () => void = () => {};
    const ready = new Promise<void>((r) => (onReady = r));
    c.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('ready\n')) onReady();
    });
    c.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => c.kill('SIGKILL'), 15_000);
    const done = new Promise<{ code: number | null; out: string; err: string }>((resolve) =>
      c.on('close', (code) => {
        clearTimeout(timer);
        onReady();
        resolve({ code, out, err });
      }),
    );
    return { done, ready };
  }

  it('keeps the loop alive while open, drains microtasks per datagram, and turns a throw into uncaughtException', async () => {
    const sock = path.join(tmp(), 'notify');
    const script = `
      const a = require(process.env.ADDON);
      process.on('uncaughtException', (e) => console.log('uncaught:' + e.message));
      const h = a.notifyBind(process.env.SOCK, (buf, pid) => {
        const s = buf.toString();
        console.log('got:' + s);
        if (s === 'boom') throw new Error('boom from callback');
        Promise.resolve().then(() => console.log('micro:' + s));
        if (s === 'quit') h.close();
      });
      console.log('ready');`;
    const c = child(script, sock);
    await c.ready;
    await pySend(sock, ['one', 'boom', 'two', 'quit']);
    const r = await c.done;
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out.trim().split('\n')).toEqual([
      'ready',
      'got:one',
      'micro:one',
      'got:boom',
      'uncaught:boom from callback',
      'got:two',
      'micro:two',
      'got:quit',
      'micro:quit',
    ]);
    expect(existsSync(sock)).toBe(false);
  });

  it('exits with the usual uncaught-exception status when nothing handles the throw', async () => {
    const sock = path.join(tmp(), 'notify');
    const script = `
      const a = require(process.env.ADDON);
      a.notifyBind(process.env.SOCK, () => { throw new Error('unhandled in onDatagram'); });
      console.log('ready');`;
    const c = child(script, sock);
    await c.ready;
    await pySend(sock, ['READY=1']);
    const r = await c.done;
    expect(r.code).toBe(1);
    expect(r.err).toContain('unhandled in onDatagram');
  });

  it('closes the socket and removes its file when a Worker that owns it is terminated', async () => {
    const sock = path.join(tmp(), 'notify');
    const script = `
      const { Worker } = require('node:worker_threads');
      const fs = require('node:fs');
      const w = new Worker(\`
        const { parentPort } = require('node:worker_threads');
        require(process.env.ADDON).notifyBind(process.env.SOCK, () => {});
        parentPort.postMessage('bound');\`, { eval: true });
      w.on('message', async () => {
        console.log('bound:' + fs.existsSync(process.env.SOCK));
        await w.terminate();
        console.log('after:' + fs.existsSync(process.env.SOCK));
        console.log('ready');
      });`;
    const r = await child(script, sock).done;
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out.trim().split('\n')).toEqual(['bound:true', 'after:false', 'ready']);
  });
});
