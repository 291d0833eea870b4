// Probe start-up: from exec of the bundled probe (guest-probe/dist) to the first frame (its
// hello) arriving on the collector's socket, next to `node -e 0` run alternately in the
// same loop. A tiny Unix server in this process stands in for the collector (it only times
// the first byte and the first whole frame); the probe runs with everything optional off
// (--listen off --notify-socket off --kmsg off) and a target that never exists, and is
// killed by pid as soon as its hello is in. A third series, `probe --version`, times what
// loading the bundle alone costs (exec → exit), so the difference says what the probe's own
// start-up work before the hello costs. All three run in a guest's environment (GUEST_ENV),
// not this process's, whose NODE_EXTRA_CA_CERTS alone doubles Node's start-up here.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { FrameDecoder } from '@vsockdiag/proto';
import { GUEST_ENV, PROBE_BIN, PROBE_ENV, ROOT, requireBuilt, soloProbeArgs } from '../harness/collector.js';
import { helloNote } from '../harness/hello-note.js';
import { digestProfiles, profilesIn, type ProfileDigest } from './cpu-profile.js';
import { childrenCpuMs } from './proc.js';
import { summarize } from './stats.js';

const EACH_TIMEOUT_MS = 10_000;

/** The probe's environment in a guest: init's, and its unit's (deploy/guest/). */
const PROBE_GUEST_ENV = { ...GUEST_ENV, ...PROBE_ENV };

/** The probe's flags for a start-up run, timed and profiled alike: its collector is `sock`,
 *  everything optional is off, and the target never appears. */
const startupArgs = (sock: string) => [...soloProbeArgs(sock), '--target', 'vd-bench-no-such-target'];

type Stat = ReturnType<typeof summarize>;
export interface ProbeStartup {
  rounds: number;
  firstByte: Stat;
  firstFrame: Stat;
  nodeExit: Stat;
  versionExit: Stat;
  helloBytes: number;
  /** Mean CPU per exec (ms, user + system, until exit or until killed after the first frame). */
  cpuMs: { probe: number; node: number; version: number };
}

/** exec → exit of `node ARGS` in a guest's environment (`env`), in ms. */
function timeExit(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const p = spawn(process.execPath, args, { stdio: 'ignore', env });
    const timer = setTimeout(() => p.kill('SIGKILL'), EACH_TIMEOUT_MS);
    p.once('error', reject);
    p.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(performance.now() - t0);
      else reject(new Error(`node ${args.join(' ')} exited with ${code}`));
    });
  });
}

export async function measureProbeStartup(rounds: number, progress: (m: string) => void): Promise<ProbeStartup> {
  requireBuilt();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-ps-'));
  const sock = path.join(dir, 'c.sock');
  // The current attempt's timing, filled by the server.
  let pending: { t0: number; firstByte?: number; done: (frameAt: number, bytes: number) => void } | null = null;
  const server = net.createServer((s) => {
    const mine = pending;
    const decoder = new FrameDecoder((body) => {
      if (mine && pending === mine) {
        pending = null;
        mine.done(performance.now(), body.length + 4);
      }
    });
    s.on('data', (d: Buffer) => {
      if (mine && mine.firstByte === undefined) mine.firstByte = performance.now();
      try {
        decoder.push(d);
      } catch {
        s.destroy();
      }
    });
    s.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(sock, r));
  const probeArgs = [PROBE_BIN, ...startupArgs(sock)];

  // exec → first frame; resolves once the killed probe has exited (and was waited for, so
  // its CPU is in this process's cutime/cstime).
  const probeOnce = () =>
    new Promise<{ firstByte: number; firstFrame: number; bytes: number }>((resolve, reject) => {
      const t0 = performance.now();
      let result: { firstByte: number; firstFrame: number; bytes: number } | null = null;
      const attempt: NonNullable<typeof pending> = {
        t0,
        done: (frameAt, bytes) => {
          result = { firstByte: attempt.firstByte! - t0, firstFrame: frameAt - t0, bytes };
          p.kill('SIGKILL');
        },
      };
      pending = attempt;
      const p = spawn(process.execPath, probeArgs, { stdio: 'ignore', env: PROBE_GUEST_ENV });
      const timer = setTimeout(() => {
        pending = null;
        p.kill('SIGKILL');
      }, EACH_TIMEOUT_MS);
      p.once('exit', () => {
        clearTimeout(timer);
        if (pending === attempt) pending = null;
        if (result) resolve(result);
        else reject(new Error(`the probe sent no frame (it exited, or ${EACH_TIMEOUT_MS} ms passed)`));
      });
    });

  const firstByte: number[] = [];
  const firstFrame: number[] = [];
  const nodeExit: number[] = [];
  const versionExit: number[] = [];
  let helloBytes = 0;
  const cpu = { probe: 0, node: 0, version: 0 };
  const withCpu = async <T>(key: keyof typeof cpu, fn: () => Promise<T>): Promise<T> => {
    const c0 = childrenCpuMs();
    const r = await fn();
    cpu[key] += childrenCpuMs() - c0;
    return r;
  };
  try {
    // One warm-up of each (page cache, first exec of the bundle), not counted.
    await timeExit(['-e', '0'], GUEST_ENV);
    await probeOnce();
    await timeExit([PROBE_BIN, '--version'], PROBE_GUEST_ENV);
    for (let i = 0; i < rounds; i++) {
      // Rotate the order so no series always runs right after another one.
      const steps = [
        async () => nodeExit.push(await withCpu('node', () => timeExit(['-e', '0'], GUEST_ENV))),
        async () => {
          const r = await withCpu('probe', probeOnce);
          firstByte.push(r.firstByte);
          firstFrame.push(r.firstFrame);
          helloBytes = r.bytes;
        },
        async () => versionExit.push(await withCpu('version', () => timeExit([PROBE_BIN, '--version'], PROBE_GUEST_ENV))),
      ];
      for (let k = 0; k < steps.length; k++) await steps[(i + k) % steps.length]!();
      if ((i + 1) % 10 === 0) progress(`probe start-up: ${i + 1}/${rounds} rounds`);
    }
  } finally {
    await new Promise((r) => server.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return {
    rounds,
    firstByte: summarize(firstByte),
    firstFrame: summarize(firstFrame),
    nodeExit: summarize(nodeExit),
    versionExit: summarize(versionExit),
    helloBytes,
    cpuMs: { probe: cpu.probe / rounds, node: cpu.node / rounds, version: cpu.version / rounds },
  };
}

// ---------------------------------------------------------------- where the time goes

export interface ProbeStartupProfile {
  runs: number;
  /** exec → first frame of the unminified, profiled build (for scale; the profiler costs too). */
  firstFrame: Stat;
  digest: ProfileDigest;
  /** Node's own modules the probe had loaded when it wrote its hello that `node -e 0` does not load. */
  builtinsBeforeHello: string[];
  bundleBytes: { shipped: number; profiled: number };
}

/** Builds the probe as shipped (launcher, bundle, code cache, addon) but unminified, so the
 *  profile names functions. Returns the launcher. */
function buildUnminified(dir: string): string {
  const r = spawnSync(process.execPath, [path.join(ROOT, 'guest-probe/build.mjs'), '--out', dir, '--no-minify'], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (r.status !== 0) throw new Error(`the unminified probe build failed (${r.status})`);
  return path.join(dir, 'vsockdiag-probe.js');
}

/**
 * Runs an unminified build of the probe `runs` times under the sampling profiler (node
 * --cpu-prof, 1 ms), each until its first frame arrives (then SIGTERM: the probe exits
 * cleanly and the profile is written), and digests the profiles up to each hello's write.
 */
export async function profileProbeStartup(runs: number, progress: (m: string) => void): Promise<ProbeStartupProfile> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-pp-'));
  const profDir = path.join(dir, 'prof');
  const sock = path.join(dir, 'c.sock');
  try {
    const launcher = buildUnminified(path.join(dir, 'probe'));
    const bundle = path.join(dir, 'probe', 'vsockdiag-probe.bundle.js');
    const note = helloNote(path.join(dir, 'hello-note'));
    const atNode = spawnSync(process.execPath, [...note.args, '-e', '0'], { env: { ...GUEST_ENV, ...note.env } }).pid;
    const probePids: number[] = [];
    let onFrame: (() => void) | null = null;
    const server = net.createServer((s) => {
      const decoder = new FrameDecoder(() => {
        onFrame?.();
        onFrame = null;
      });
      s.on('data', (d: Buffer) => {
        try {
          decoder.push(d);
        } catch {
          s.destroy();
        }
      });
      s.on('error', () => {});
    });
    await new Promise<void>((r) => server.listen(sock, r));
    const frames: number[] = [];
    try {
      for (let i = 0; i < runs; i++) {
        const t0 = performance.now();
        const p = spawn(
          process.execPath,
          ['--cpu-prof', '--cpu-prof-interval', '1000', '--cpu-prof-dir', profDir, ...note.args, launcher, ...startupArgs(sock)],
          { stdio: 'ignore', env: { ...PROBE_GUEST_ENV, ...note.env } },
        );
        if (p.pid) probePids.push(p.pid);
        const exited = new Promise<void>((r) => p.once('exit', () => r()));
        const killer = setTimeout(() => p.kill('SIGKILL'), EACH_TIMEOUT_MS);
        await new Promise<void>((resolve) => {
          onFrame = () => {
            frames.push(performance.now() - t0);
            p.kill('SIGTERM');
            resolve();
          };
          void exited.then(() => resolve());
        });
        await exited;
        clearTimeout(killer);
      }
    } finally {
      await new Promise((r) => server.close(r));
    }
    const files = profilesIn(profDir);
    progress(`probe start-up: ${files.length} profiles`);
    const notes = note.notes();
    const nodeLoaded = new Set(notes.get(atNode)?.loaded ?? []);
    const lastProbe = notes.get(probePids[probePids.length - 1] ?? -1);
    const shippedBundle = path.join(path.dirname(PROBE_BIN), 'vsockdiag-probe.bundle.js');
    return {
      runs: files.length,
      firstFrame: summarize(frames),
      // Each profile up to its hello's write (the probe runs on until the server has the
      // frame and stops it); a run whose write was not seen counts whole.
      digest: digestProfiles(files, {
        bundle,
        range: (file) => {
          const p = JSON.parse(fs.readFileSync(file, 'utf8')) as { startTime: number; endTime: number };
          const pid = Number(/\.(\d+)\.\d+\.\d+\.cpuprofile$/.exec(file)?.[1]);
          const n = notes.get(pid);
          const hello = n?.at === 'hello' ? n.us : undefined;
          return { fromUs: p.startTime, toUs: hello !== undefined && hello > p.startTime && hello < p.endTime ? hello : p.endTime };
        },
      }),
      builtinsBeforeHello: (lastProbe?.loaded ?? []).filter((m) => !nodeLoaded.has(m)).sort(),
      bundleBytes: { shipped: fs.statSync(shippedBundle).size, profiled: fs.statSync(bundle).size },
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
