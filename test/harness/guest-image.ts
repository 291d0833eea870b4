// Real guest images for the boot tests (test/boot/): a minimal Debian root filesystem built
// from Debian's packages with mmdebstrap, cached on this machine, and two ways to run it:
//   - bootSystemd(): `systemd-nspawn --boot`, systemd as PID 1 with a real journald;
//   - runInNamespace(): a PID, network and mount namespace chrooted into the image, running
//     one command as its PID 1 (runit's runsvdir).
// Each run gets its own copy-on-write view of the cached image (an overlay mount), so runs
// never change the cache or each other. A folder of this machine is bound into the guest at
// GUEST_HOST_DIR: the collector's sockets live there. Everything started here is ended by
// pid and every mount and folder removed by stop(), also when the test failed.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnTethered } from './tether.js';

/** The image: Debian bookworm, minbase, with systemd (for the nspawn boot) and runit (for
 *  runsv in a namespace; it hooks nothing into systemd). */
const IMAGE = { suite: 'bookworm', variant: 'minbase', include: ['systemd', 'systemd-sysv', 'dbus', 'runit'] } as const;
/** Where the cached images live (one folder per package list). */
const CACHE_DIR = process.env.VSOCKDIAG_CACHE_DIR ?? '/var/cache/vsockdiag';
/** Where the guest sees the bound host folder. */
export const GUEST_HOST_DIR = '/mnt/vdhost';
const MMDEBSTRAP_TIMEOUT_MS = 10 * 60_000;

/** Why the boot tests cannot run here, or null when they can. */
export function bootUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (mounts, namespaces, systemd-nspawn)';
  for (const tool of ['mmdebstrap', 'systemd-nspawn', 'nsenter', 'unshare', 'setpriv']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' }).status !== 0) {
      return `${tool} is not installed (scripts/install-system-deps.sh installs it)`;
    }
  }
  return null;
}

function run(cmd: string, args: string[], timeoutMs = 60_000): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.status ?? r.signal}): ${r.stderr || r.stdout || r.error?.message}`);
  return r.stdout;
}

/**
 * The cached image's folder, built with mmdebstrap the first time (about 15 s on a quiet
 * machine, a minute on a busy one; it needs Debian's mirror). Keyed by the package list,
 * so a changed list builds a new image. Built beside the cache and renamed into place, so a
 * half-built image is never used; concurrent builders wait for each other on a lock file.
 */
export async function cachedImage(): Promise<string> {
  const key = crypto.createHash('sha256').update(JSON.stringify(IMAGE)).digest('hex').slice(0, 16);
  const dir = path.join(CACHE_DIR, `rootfs-${IMAGE.suite}-${key}`);
  if (fs.existsSync(path.join(dir, 'etc/os-release'))) return dir;
  fs.mkdirSync(CACHE_DIR, { recursive: true });
  const lock = `${dir}.lock`;
  const deadline = Date.now() + MMDEBSTRAP_TIMEOUT_MS;
  for (;;) {
    try {
      fs.writeFileSync(lock, String(process.pid), { flag: 'wx' });
      break;
    } catch {
      const holder = Number(fs.readFileSync(lock, 'utf8'));
      if (!holder || !alive(holder))
        fs.rmSync(lock, { force: true }); // a builder that died
      else if (Date.now() > deadline) throw new Error(`another process (${holder}) holds ${lock}`);
      else await new Promise((r) => setTimeout(r, 500));
    }
  }
  try {
    if (fs.existsSync(path.join(dir, 'etc/os-release'))) return dir;
    const tmp = `${dir}.tmp-${process.pid}`;
    fs.rmSync(tmp, { recursive: true, force: true });
    try {
      await runAsync(
        'mmdebstrap',
        ['--quiet', `--variant=${IMAGE.variant}`, `--include=${IMAGE.include.join(',')}`, IMAGE.suite, tmp],
        MMDEBSTRAP_TIMEOUT_MS,
      );
      fs.rmSync(dir, { recursive: true, force: true });
      fs.renameSync(tmp, dir);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
    return dir;
  } finally {
    fs.rmSync(lock, { force: true });
  }
}

function runAsync(cmd: string, args: string[], timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr!.on('data', (d) => (err += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.once('error', reject);
    p.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`${cmd} failed (${signal ?? code}): ${err.slice(-4000)}`));
    });
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A copy-on-write view of an image and a folder of this machine to bind into it. */
export interface Overlay {
  /** The merged root filesystem: install into it, boot it. */
  root: string;
  /** This machine's side of GUEST_HOST_DIR. Short path: socket paths are limited. */
  hostDir: string;
  /** Unmounts and removes everything (idempotent). */
  remove: () => void;
}

const OVERLAY_PREFIX = 'vd-img-';
const OWNER_FILE = 'owner';

/** Overlays left by a test process that was killed before its afterAll (its guests died with
 *  it): unmounted and removed. Those of live processes are left alone. */
function removeStaleOverlays(): void {
  for (const name of fs.readdirSync(os.tmpdir()).filter((n) => n.startsWith(OVERLAY_PREFIX))) {
    const base = path.join(os.tmpdir(), name);
    let owner = 0;
    try {
      owner = Number(fs.readFileSync(path.join(base, OWNER_FILE), 'utf8'));
    } catch {
      continue; // not one of ours, or not written yet
    }
    if (!owner || alive(owner)) continue;
    const root = path.join(base, 'root');
    if (spawnSync('mountpoint', ['-q', root]).status === 0) spawnSync('umount', ['-l', root]);
    fs.rmSync(base, { recursive: true, force: true });
  }
}

export function overlay(image: string): Overlay {
  removeStaleOverlays();
  const base = fs.mkdtempSync(path.join(os.tmpdir(), OVERLAY_PREFIX));
  fs.writeFileSync(path.join(base, OWNER_FILE), String(process.pid));
  const [upper, work, root, hostDir] = ['upper', 'work', 'root', 'h'].map((d) => path.join(base, d)) as [string, string, string, string];
  for (const d of [upper, work, root, hostDir]) fs.mkdirSync(d);
  let mounted = false;
  const remove = () => {
    if (mounted) {
      // A guest that is still going down may hold it for a moment.
      for (let i = 0; i < 50 && spawnSync('umount', [root]).status !== 0; i++) spawnSync('sleep', ['0.1']);
      if (spawnSync('mountpoint', ['-q', root]).status === 0) spawnSync('umount', ['-l', root]);
      mounted = false;
    }
    fs.rmSync(base, { recursive: true, force: true });
  };
  try {
    run('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${image},upperdir=${upper},workdir=${work}`, root]);
    mounted = true;
    fs.mkdirSync(path.join(root, GUEST_HOST_DIR), { recursive: true });
  } catch (err) {
    remove();
    throw err;
  }
  return { root, hostDir, remove };
}

/** A running guest. */
export interface Guest {
  /** Host pid of the guest's PID 1. */
  leader: number;
  /** Runs a command inside the guest (all its namespaces, its root); throws on failure. */
  exec: (argv: string[], timeoutMs?: number) => string;
  /** Same, returning the status instead of throwing. */
  tryExec: (argv: string[], timeoutMs?: number) => { status: number | null; stdout: string; stderr: string };
  /** What the guest printed on its console. */
  console: () => string;
  /** Ends the guest (cleanly if it can, by pid if it must) and waits for it. Idempotent. */
  stop: () => Promise<void>;
}

function guestOf(proc: ChildProcess, leader: number, output: () => string, shutdown: () => void): Guest {
  const tryExec = (argv: string[], timeoutMs = 30_000) => {
    const r = spawnSync('nsenter', ['-t', String(leader), '-a', ...argv], { encoding: 'utf8', timeout: timeoutMs });
    return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
  };
  const exec = (argv: string[], timeoutMs?: number) => {
    const r = tryExec(argv, timeoutMs);
    if (r.status !== 0) throw new Error(`in the guest: ${argv.join(' ')} failed (${r.status}): ${r.stderr || r.stdout}`);
    return r.stdout;
  };
  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      try {
        shutdown();
      } catch {
        /* the kill below ends it */
      }
      const clean = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 15_000))]);
      if (!clean) {
        // The guest's PID 1 takes its whole PID namespace with it.
        kill(leader);
        kill(proc.pid!);
        await exited;
      }
    })());
  return { leader, exec, tryExec, console: output, stop };
}

/** The child of `pid` in another PID namespace than `pid`'s own, once there is one: the
 *  PID 1 that unshare --fork or nspawn starts (nspawn through an intermediate process that
 *  exits, in its own namespace). */
async function childInNewPidNs(pid: number, what: string, output: () => string): Promise<number> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    let kids: string[];
    let own: string;
    try {
      own = fs.readlinkSync(`/proc/${pid}/ns/pid`);
      kids = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').filter(Boolean);
    } catch {
      throw new Error(`${what} exited before its guest started:\n${output()}`);
    }
    for (const k of kids) {
      try {
        if (fs.readlinkSync(`/proc/${k}/ns/pid`) !== own) return Number(k);
      } catch {
        /* gone already */
      }
    }
    if (Date.now() > deadline) throw new Error(`${what} started no guest in 30 s:\n${output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function kill(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    /* already gone */
  }
}

/**
 * Boots the image with systemd-nspawn: systemd as PID 1, its own PID namespace and a private
 * network (loopback only), `hostDir` bound at GUEST_HOST_DIR. This machine runs no systemd
 * and uses cgroup v1: hence --register=no --keep-unit and the legacy hierarchy.
 * Resolves once `systemctl is-system-running` says the boot is over.
 */
export async function bootSystemd(o: Overlay): Promise<Guest> {
  // A machine name of its own: nspawn keeps per-name state in /run/systemd/nspawn/.
  const machine = `vd-${path.basename(path.dirname(o.root))}`;
  // nspawn runs as PID 1 of a PID namespace of ours: killing it (unshare --kill-child does,
  // when we die: tether.ts) takes the guest down too, which killing nspawn alone does not.
  const proc = spawnTethered(
    [
      'unshare',
      '--pid',
      '--mount',
      '--fork',
      '--mount-proc',
      '--kill-child=SIGKILL',
      '--',
      'systemd-nspawn',
      '--quiet',
      '-D',
      o.root,
      `--machine=${machine}`,
      '--boot',
      '--register=no',
      '--keep-unit',
      '--private-network',
      `--bind=${o.hostDir}:${GUEST_HOST_DIR}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY: '0' } },
  );
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const output = () => out;
  let guest: Guest | null = null;
  try {
    const nspawn = await childInNewPidNs(proc.pid!, 'unshare', output);
    const leader = await childInNewPidNs(nspawn, 'systemd-nspawn', output);
    guest = guestOf(proc, leader, output, () => {
      // systemd powers the guest off and nspawn exits; if it cannot be asked, end it by pid.
      if (guest!.tryExec(['systemctl', 'poweroff', '--no-block'], 10_000).status !== 0) kill(leader);
    });
    const deadline = Date.now() + 60_000;
    for (;;) {
      const state = guest.tryExec(['systemctl', 'is-system-running'], 10_000).stdout.trim();
      if (state === 'running' || state === 'degraded') break;
      if (Date.now() > deadline) throw new Error(`the guest did not finish booting in 60 s (state ${state}):\n${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return guest;
  } catch (err) {
    if (guest) await guest.stop();
    else kill(proc.pid!);
    throw err;
  }
}

/**
 * Runs `argv` as PID 1 of new PID, network and mount namespaces, chrooted into the image,
 * with /proc, /dev, a tmpfs /run and `hostDir` at GUEST_HOST_DIR (mounted inside the new
 * mount namespace only: they go away with it).
 */
export async function runInNamespace(o: Overlay, argv: string[]): Promise<Guest> {
  const r = o.root;
  const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const setup = [
    'set -e',
    `mount -t proc proc ${q(`${r}/proc`)}`,
    `mount --rbind /dev ${q(`${r}/dev`)}`,
    `mount -t tmpfs -o mode=0755 tmpfs ${q(`${r}/run`)}`,
    `mount --bind ${q(o.hostDir)} ${q(r + GUEST_HOST_DIR)}`,
    `exec chroot ${q(r)} ${argv.map(q).join(' ')}`,
  ].join('\n');
  // Killed with this process should it die first (tether.ts), with its whole namespace.
  const proc = spawnTethered(['unshare', '--pid', '--net', '--mount', '--fork', '--kill-child=SIGKILL', '--', 'sh', '-c', setup], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const output = () => out;
  try {
    const leader = await childInNewPidNs(proc.pid!, 'unshare', output);
    // nsenter -a would enter the mount namespace but not the chroot: enter the root too.
    const g = guestOf(proc, leader, output, () => kill(leader));
    const chrooted = (argv2: string[]) => ['--root', '--wd=/', ...argv2];
    return {
      ...g,
      exec: (a, t) => g.exec(chrooted(a), t),
      tryExec: (a, t) => g.tryExec(chrooted(a), t),
    };
  } catch (err) {
    kill(proc.pid!);
    throw err;
  }
}
