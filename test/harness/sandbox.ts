// A simulated sandbox: what a Firecracker microVM looks like to vsockdiag, built from
// processes. Each one gets
//   - its own network and PID namespace (unshare, as root) with its own loopback, so the
//     probe sees only this sandbox's processes and sockets, and envd binds :49983 without
//     colliding with its neighbours;
//   - an emulated Firecracker vsock device (firecracker.ts): the probe dials the guest's
//     stand-in for "CID 2, port 52000" and the emulator connects to <udsPath>_52000 on the
//     host, exactly as Firecracker does;
//   - an init that starts the probe first, then the fake envd (or the probe wrapping it);
//   - with `mmds: true` (namespaces only), a fake MMDS at 169.254.169.254:80 on the sandbox's
//     own loopback, started before everything else, like Firecracker's MMDS for a real guest.
// Without root (no namespaces) it falls back to plain processes with a distinct expected
// port per sandbox. stop() ends every process it started, by pid, and removes its files.

import { spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { DEFAULTS } from '@vsockdiag/proto';
import { GUEST_ENV, PROBE_BIN } from './collector.js';
import { buildFakeEnvd } from './fake-envd.js';
import { FirecrackerVsock, guestHostPath, guestListenPath } from './firecracker.js';
import { spawnTethered } from './tether.js';

let namespacesChecked: boolean | undefined;

/** Can we make network + PID namespaces here (root, unshare present)? */
export function namespacesAvailable(): boolean {
  if (namespacesChecked === undefined) {
    const r = spawnSync('unshare', ['--net', '--pid', '--fork', '--mount-proc', '--kill-child=SIGKILL', 'true'], { stdio: 'ignore' });
    namespacesChecked = r.status === 0;
  }
  return namespacesChecked;
}

export interface SandboxOptions {
  id: string;
  /** Parent directory; the sandbox gets `<root>/<id>/`. Keep it short: socket paths are limited. */
  root: string;
  /** Arguments for the fake envd (e.g. ["-hang-in", "cgroup-manager"]). */
  envd?: string[];
  /** 'init': a shell init starts the probe, then envd. 'wrap': the probe starts envd (`-- envd`).
   *  Default: init in a namespace, wrap without one. */
  mode?: 'init' | 'wrap';
  /** Extra probe flags; "{port}" is replaced by the sandbox's expected port. */
  probeArgs?: string[];
  /** Use namespaces (default: when available). */
  isolate?: boolean;
  /** Extra delay before envd starts in init mode, after the probe's notify socket is up. */
  envdDelayMs?: number;
  /**
   * Give the sandbox a fake MMDS: 169.254.169.254/32 on the loopback of the sandbox's OWN
   * network namespace, served by `fake-envd -serve-mmds 169.254.169.254:80`, up before the
   * probe and envd start. Point envd at it with `envd: ['-mmds-addr', MMDS_ADDR, ...]`.
   * Needs an isolated sandbox: startSandbox throws otherwise (never a host address).
   * The server runs as `<dir>/fake-mmds` (a symlink to the fake-envd binary), so its comm is
   * not "fake-envd" and the probe's `--target fake-envd` never mistakes it for envd.
   */
  mmds?: boolean;
  /** With `mmds`: what GET / answers. '404' (default) keeps envd-style pollers polling forever. */
  mmdsReply?: '404' | 'ok';
}

/** What a sandbox needs of its vsock device once it runs: a way to end it. */
export interface VsockDevice {
  close(): Promise<void>;
}

/** Makes a sandbox's vsock device elsewhere (test/bench/vmm-host.ts: in a process of its own),
 *  listening on `udsPath` with the guest's stand-ins in `guestDir` and `hostPort` exposed. */
export type DeviceFactory<V extends VsockDevice> = (udsPath: string, guestDir: string, hostPort: number) => Promise<V>;

/** The link-local MMDS address, as a fake MMDS serves it inside a sandbox with `mmds: true`. */
export const MMDS_IP = '169.254.169.254';
export const MMDS_ADDR = `${MMDS_IP}:80`;

export interface Sandbox<V extends VsockDevice = FirecrackerVsock> {
  id: string;
  dir: string;
  udsPath: string;
  vm: V;
  isolated: boolean;
  expectPort: number;
  proc: ChildProcess;
  output: () => string;
  /** Host pids of the sandbox's processes whose command line contains `needle`. */
  pidsOf: (needle: string) => number[];
  /** The probe's sd_notify socket. */
  notifySocket: string;
  /** Sends one sd_notify datagram to the probe, as a process in the guest would; throws if it cannot. */
  notify: (payload: string) => void;
  stop: () => Promise<void>;
}

function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

/** All descendants of `pid` (via /proc/<pid>/task/<tid>/children). */
export function descendants(pid: number): number[] {
  const out: number[] = [];
  const stack = [pid];
  while (stack.length) {
    const p = stack.pop()!;
    let tasks: string[] = [];
    try {
      tasks = fs.readdirSync(`/proc/${p}/task`);
    } catch {
      continue;
    }
    for (const t of tasks) {
      let kids = '';
      try {
        kids = fs.readFileSync(`/proc/${p}/task/${t}/children`, 'utf8');
      } catch {
        continue;
      }
      for (const k of kids.split(' ').filter(Boolean)) {
        out.push(Number(k));
        stack.push(Number(k));
      }
    }
  }
  return out;
}

/** The probe's command line in a sandbox folder: connected as Firecracker's guest side
 *  would be (test/harness/firecracker.ts), with its notify socket and target. */
export function probeCommand(dir: string, notify: string, expectPort: number, target: string): string[] {
  return [
    process.execPath,
    PROBE_BIN,
    '--connect',
    `unix:${guestHostPath(dir, DEFAULTS.vsockPort)}`,
    '--listen',
    `unix:${guestListenPath(dir, DEFAULTS.probePort)}`,
    '--notify-socket',
    notify,
    '--expect-port',
    String(expectPort),
    '--target',
    target,
  ];
}

const inProcessDevice: DeviceFactory<FirecrackerVsock> = async (udsPath, guestDir, hostPort) => {
  // Firecracker's own shutdown semantics (no half-close), not the friendlier default.
  const vm = new FirecrackerVsock({ udsPath, guestDir, halfClose: 'firecracker' });
  await vm.start();
  await vm.exposeHostPort(hostPort);
  return vm;
};

/** A sandbox with an emulated Firecracker vsock device in this process (firecracker.ts), or
 *  with the one `device` makes. */
export function startSandbox(opts: SandboxOptions): Promise<Sandbox>;
export function startSandbox<V extends VsockDevice>(opts: SandboxOptions & { device: DeviceFactory<V> }): Promise<Sandbox<V>>;
export async function startSandbox(opts: SandboxOptions & { device?: DeviceFactory<VsockDevice> }): Promise<Sandbox<VsockDevice>> {
  const envdBin = await buildFakeEnvd();
  const isolated = opts.isolate ?? namespacesAvailable();
  if (opts.mmds && !isolated) {
    // 169.254.169.254 may only ever live on the loopback of a namespace the test created.
    throw new Error(
      `startSandbox(${opts.id}): mmds: true needs an isolated sandbox (own network namespace: root + unshare); ` +
        'refusing to serve or poll 169.254.169.254 in the host network namespace',
    );
  }
  if (opts.mmdsReply && !opts.mmds) throw new Error(`startSandbox(${opts.id}): mmdsReply needs mmds: true`);
  const dir = path.join(opts.root, opts.id);
  fs.mkdirSync(dir, { recursive: true });
  const udsPath = path.join(dir, 'v.sock');
  const vm = await (opts.device ?? inProcessDevice)(udsPath, dir, DEFAULTS.vsockPort);

  const expectPort = isolated ? DEFAULTS.expectPort : await freePort();
  const notify = path.join(dir, 'notify.sock');
  const probe = [
    ...probeCommand(dir, notify, expectPort, 'fake-envd'),
    // "{port}" in extra flags stands for the expected port (distinct per sandbox without namespaces).
    ...(opts.probeArgs ?? []).map((a) => a.replaceAll('{port}', String(expectPort))),
  ];
  const envd = [envdBin, '-addr', isolated ? '0.0.0.0' : '127.0.0.1', '-port', String(expectPort), ...(opts.envd ?? [])];
  // Without a PID namespace every probe would see every sandbox's envd and adopt the oldest:
  // there, each probe starts its own envd (wrap mode) unless told otherwise.
  const mode = opts.mode ?? (isolated ? 'init' : 'wrap');
  const lines = ['set -e'];
  if (isolated) lines.push('ip link set lo up');
  if (opts.mmds) {
    // Inside this sandbox's own network namespace only (isolated is checked above).
    lines.push(`ip addr add ${MMDS_IP}/32 dev lo`);
  }
  lines.push('set +e');
  if (opts.mmds) {
    const mmdsBin = path.join(dir, 'fake-mmds');
    fs.rmSync(mmdsBin, { force: true }); // a stale link from an earlier run in the same dir
    fs.symlinkSync(envdBin, mmdsBin);
    const ready = path.join(dir, 'mmds.ready');
    const mmds = [mmdsBin, '-serve-mmds', MMDS_ADDR, '-mmds-reply', opts.mmdsReply ?? '404', '-ready-file', ready];
    lines.push(`${mmds.map(shq).join(' ')} &`);
    // sh may be dash (no /dev/tcp): the server writes its ready file once it listens (at most 5 s).
    lines.push(`i=0; while [ ! -e ${shq(ready)} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done`);
    lines.push(`[ -e ${shq(ready)} ] || { echo 'sandbox init: fake MMDS on ${MMDS_ADDR} not ready after 5 s' >&2; exit 1; }`);
  }
  if (mode === 'wrap') {
    lines.push(`exec ${[...probe, '--', ...envd].map(shq).join(' ')}`);
  } else {
    lines.push(`${probe.map(shq).join(' ')} &`);
    // Like a unit ordered after the probe: start envd once the probe's notify socket is up
    // (at most 5 s), so no phase marker is sent into the void.
    lines.push(`i=0; while [ ! -S ${shq(notify)} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done`);
    if (opts.envdDelayMs) lines.push(`sleep ${(opts.envdDelayMs / 1000).toFixed(3)}`);
    lines.push(`NOTIFY_SOCKET=${shq(notify)} ${envd.map(shq).join(' ')} &`);
    lines.push('wait');
  }
  const script = path.join(dir, 'init.sh');
  fs.writeFileSync(script, `${lines.join('\n')}\n`);
  // Killed with this process should it die before stop() (tether.ts): isolated, with its whole
  // namespace; without namespaces only the shell (or the probe it became in wrap mode).
  const argv = isolated
    ? ['unshare', '--net', '--pid', '--fork', '--mount-proc', '--kill-child=SIGKILL', '--', 'sh', script]
    : ['setsid', 'sh', script];
  // A guest's environment, not this process's (GUEST_ENV says why).
  const proc = spawnTethered(argv, { stdio: ['ignore', 'pipe', 'pipe'], env: GUEST_ENV });
  let output = '';
  proc.stdout!.on('data', (d) => (output += d));
  proc.stderr!.on('data', (d) => (output += d));

  const pidsOf = (needle: string) =>
    descendants(proc.pid!).filter((p) => {
      try {
        return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(needle);
      } catch {
        return false;
      }
    });

  const stop = async () => {
    // Everything we started descends from proc: kill the tree by pid, deepest last seen first.
    const pids = [...descendants(proc.pid!), proc.pid!];
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      for (const p of pids) {
        try {
          process.kill(p, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
      await exited;
    }
    await vm.close();
    fs.rmSync(dir, { recursive: true, force: true });
  };

  const notifyProbe = (payload: string) => {
    const r = spawnSync('python3', [
      '-c',
      'import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(sys.argv[2].encode(), sys.argv[1])',
      notify,
      payload,
    ]);
    if (r.status !== 0) throw new Error(`sd_notify to ${notify} failed (${r.status}): ${r.stderr?.toString() ?? ''}`);
  };

  return {
    id: opts.id,
    dir,
    udsPath,
    vm,
    isolated,
    expectPort,
    proc,
    output: () => output,
    pidsOf,
    notifySocket: notify,
    notify: notifyProbe,
    stop,
  };
}
