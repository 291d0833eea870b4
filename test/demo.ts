// `make demo`: a collector and a handful of simulated sandboxes with mixed fates, on this
// machine. Prints the dashboard URL and CLI commands to try; Ctrl-C stops everything.
// VSOCKDIAG_DEMO_SECONDS=N stops by itself after N seconds (used by a smoke test).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT, startCollector, type CollectorProcess } from './harness/collector.js';
import { namespacesAvailable, startSandbox, type Sandbox } from './harness/sandbox.js';

interface Fate {
  id: string;
  what: string;
  envd: string[];
  mode?: 'wrap';
  probeArgs?: string[];
  /** Needs a network namespace (a fake MMDS on the sandbox's own 169.254.169.254). */
  mmds?: boolean;
}

const HEALTH = ['--health-url', 'http://127.0.0.1:{port}/health'];

const FATES: Fate[] = [
  { id: 'healthy-1', what: 'boots normally', envd: [] },
  { id: 'healthy-2', what: 'boots normally', envd: ['-slow', '20ms'] },
  { id: 'slow-1', what: 'boots slowly (1.5 s per phase)', envd: ['-slow', '1500ms'] },
  { id: 'hung-cgroup', what: 'hangs in cgroup-manager (the seed 002 failure)', envd: ['-hang-in', 'cgroup-manager'] },
  { id: 'listen-first', what: 'binds first, then hangs before READY=1', envd: ['-listen-first', '-hang-in', 'api'] },
  { id: 'crash-api', what: 'crashes in phase api', envd: ['-crash-in', 'api'], mode: 'wrap' },
  { id: 'no-accept', what: 'binds :49983 but never accepts', envd: ['-no-accept'], probeArgs: HEALTH },
  {
    id: 'mmds-storm',
    what: 'storms a fake MMDS (seed 000: a socket-storm condition)',
    envd: ['-mmds-addr', '169.254.169.254:80', '-mmds-storm', '20'],
    mmds: true,
  },
];

async function main(): Promise<void> {
  const isolated = namespacesAvailable();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-demo-'));
  const dataDir = path.join(root, 'data');
  let collector: CollectorProcess | null = null;
  const sandboxes: Sandbox[] = [];
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    process.stdout.write('\nstopping…\n');
    await Promise.all(sandboxes.map((s) => s.stop()));
    await collector?.stop();
    fs.rmSync(root, { recursive: true, force: true });
    process.exit(0);
  };
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());

  const port = Number(process.env.VSOCKDIAG_DEMO_PORT ?? 7070);
  const args = ['--stall-after', '5s', '--storm-threshold', '300'];
  collector = await startCollector({ dataDir, port, args }).catch(() =>
    // 7070 taken: any free port will do.
    startCollector({ dataDir, args }),
  );
  if (!isolated) {
    process.stdout.write(
      'note: not root (or no unshare): sandboxes run as plain processes, each envd on its own port, without namespaces (and without the MMDS storm)\n',
    );
  }
  for (const fate of FATES) {
    if (fate.mmds && !isolated) continue;
    const sb = await startSandbox({
      id: fate.id,
      root,
      envd: fate.envd,
      ...(fate.mode ? { mode: fate.mode } : {}),
      ...(fate.probeArgs ? { probeArgs: fate.probeArgs } : {}),
      ...(fate.mmds ? { mmds: true } : {}),
    });
    sandboxes.push(sb);
    await collector.api('PUT', `/v1/sandboxes/${fate.id}`, { udsPath: sb.udsPath });
    process.stdout.write(`  ${fate.id.padEnd(13)} ${fate.what}\n`);
  }
  const cli = path.relative(process.cwd(), path.join(ROOT, 'bin/vsockdiag')) || 'bin/vsockdiag';
  const env = collector.url === 'http://127.0.0.1:7070' ? '' : `VSOCKDIAG_URL=${collector.url} `;
  process.stdout.write(`
vsockdiag demo: ${sandboxes.length} simulated sandboxes${isolated ? ', each in its own network and PID namespace' : ''}

  dashboard   ${collector.url}/
  try         ${env}${cli} ls
              ${env}${cli} status hung-cgroup
              ${env}${cli} wait-ready slow-1 --timeout 30s
              ${env}${cli} wait-ready crash-api; echo "exit $?"
              curl -s '${collector.url}/v1/sandboxes/listen-first/readiness?wait=1000'
              curl -s ${collector.url}/metrics | grep condition

Ctrl-C stops everything.
`);
  const seconds = Number(process.env.VSOCKDIAG_DEMO_SECONDS ?? 0);
  if (seconds > 0) setTimeout(() => void stop(), seconds * 1000);
}

await main();
