// Probe memory, A/B: builds of the probe side by side, each in a loaded sandbox of its own
// (probe-cost.ts's startLoadedSandbox), next to an idle Node, and their RssAnon by kind every
// 30 s. For trying what might shrink the probe without the whole `make bench`; how the
// figures in FINDINGS.md on the probe's memory were taken.
//
//   VARIANTS='[{"name":"now"},{"name":"other","head":["/usr/bin/node","--some-flag","/tmp/other/vsockdiag-probe.js"],"hung":true}]' \
//     node test/run-ts.mjs test/bench/probe-memory-ab.ts [SECONDS] [PROCESSES] [CONNECTIONS]
//
// `head` is the probe's command up to its flags (default: this tree's build); `hung` makes the
// sandbox's envd hang before binding, so that probe stays at the boot rate (HOLD_BOOT_RATE);
// `env` adds to the probe's environment, over that. Defaults: 300 s,
// the probe benchmark's load (500 processes, 5,000 connections) in each sandbox.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { GUEST_ENV, startCollector, waitForState } from '../harness/collector.js';
import { HOLD_BOOT_RATE, LOAD, startLoadedSandbox, type LoadedSandbox } from './probe-cost.js';
import { anonBreakdown, cpuMs, statusFields } from './proc.js';

interface Variant {
  name: string;
  head?: string[];
  hung?: boolean;
  env?: Record<string, string>;
}

const variants = JSON.parse(process.env.VARIANTS ?? '[{"name":"now"},{"name":"now","hung":true}]') as Variant[];
const seconds = Number(process.argv[2] ?? 300);
const load = { processes: Number(process.argv[3] ?? LOAD.processes), connections: Number(process.argv[4] ?? LOAD.connections) };

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-ab-'));
const collector = await startCollector({ args: ['--stall-after', '3h', '--start-deadline', '3h'] });
const idle = spawn(process.execPath, ['-e', 'setInterval(()=>{},1000); setTimeout(()=>process.exit(0), 3_600_000)'], {
  stdio: 'ignore',
  env: GUEST_ENV,
});
const running: Array<{ label: string; sandbox: LoadedSandbox; pid: number; cpu0: number }> = [];
try {
  for (const [i, v] of variants.entries()) {
    const id = `ab${i}`;
    const sandbox = await startLoadedSandbox(root, id, v.hung ? ['-hang-in', 'cgroup-manager'] : [], load, v.head, {
      ...(v.hung ? HOLD_BOOT_RATE : {}),
      ...v.env,
    });
    running.push({ label: `${v.name}${v.hung ? ' (hung)' : ''}`, sandbox, pid: 0, cpu0: 0 });
    await collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: sandbox.udsPath });
    await waitForState(collector, id, v.hung ? 'starting' : 'ready', 120_000);
    const pid = sandbox.probePid();
    if (pid === null) throw new Error(`${id}: no probe process`);
    Object.assign(running[running.length - 1]!, { pid, cpu0: cpuMs(pid) });
  }
  const idleCpu0 = cpuMs(idle.pid!);
  const t0 = Date.now();
  const mib = (kb: number) => (kb / 1024).toFixed(2).padStart(6);
  const row = (label: string, pid: number, cpuUsedMs: number, elapsedS: number) => {
    const s = statusFields(pid, ['RssAnon'] as const);
    const a = anonBreakdown(pid);
    const cpu = elapsedS > 0 ? `${(cpuUsedMs / 10 / elapsedS).toFixed(3)} %` : '-';
    return `${label.padEnd(24)} RssAnon ${mib(s.RssAnon)}  V8 pages ${mib(a.v8PagesKb)} (${a.v8Pages})  malloc ${mib(a.brkKb)}  other ${mib(a.otherKb)}  CPU ${cpu}`;
  };
  for (;;) {
    const elapsedS = (Date.now() - t0) / 1000;
    console.log(`--- ${elapsedS.toFixed(0)} s (MiB)`);
    for (const r of running) console.log(row(r.label, r.pid, cpuMs(r.pid) - r.cpu0, elapsedS));
    console.log(row('idle node', idle.pid!, cpuMs(idle.pid!) - idleCpu0, elapsedS));
    if (elapsedS >= seconds) break;
    await new Promise((r) => setTimeout(r, Math.min(30_000, (seconds - elapsedS) * 1000)));
  }
} finally {
  idle.kill('SIGKILL');
  for (const r of running) await r.sandbox.stop();
  await collector.stop();
  fs.rmSync(root, { recursive: true, force: true });
}
