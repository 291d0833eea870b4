// The built probe with a vsock command port: on these machines vsock is tested listen-only
// (their vsock host is not ours), so the probe dials the collector over a Unix socket and
// we check that it bound its vsock listener and reports the cheap listener source.

import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { ROOT, startCollector, waitForState, type CollectorProcess } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { startSandbox, type Sandbox } from '../harness/sandbox.js';

const addon = createRequire(import.meta.url)(path.join(ROOT, 'guest-probe/dist/vsockdiag.node')) as {
  vsockListen(cid: number, port: number, backlog: number): number;
  closeFd(fd: number): void;
};
const hasVsock = fs.existsSync('/dev/vsock');
const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

it.skipIf(!hasVsock)('binds its command port on vsock (listen only) and reads listeners through sock_diag', async () => {
  const port = 52000 + 100 + Math.floor(Math.random() * 20000);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
  cleanup.push(() => fs.rmSync(root, { recursive: true, force: true }));
  const collector: CollectorProcess = await startCollector();
  cleanup.push(() => collector.stop());
  // vsock sockets belong to no network namespace: the port check below sees the probe's
  // listener wherever it runs.
  const sb: Sandbox = await startSandbox({ id: 'vs', root, envd: [], isolate: false, probeArgs: ['--listen', `vsock:any:${port}`] });
  cleanup.push(() => sb.stop());
  await collector.api('PUT', '/v1/sandboxes/vs', { udsPath: sb.udsPath });
  const d = await waitForState(collector, 'vs', 'ready');
  expect(d.probe.listenerSource).toBe('sock_diag');
  // The probe holds the vsock port: binding it again fails.
  await waitFor('the probe to hold the vsock port', () => {
    try {
      addon.closeFd(addon.vsockListen(0xffffffff, port, 1));
      return false;
    } catch (err) {
      return (err as { code?: string }).code === 'EADDRINUSE';
    }
  });
  expect(sb.output()).not.toMatch(/command port .* disabled/);
});
