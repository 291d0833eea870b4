// `vsockdiag tail <id>`: the last events first, then new ones live as they arrive.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { COLLECTOR_BIN, cli, startCollector, waitFor, type CollectorProcess } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';

let collector: CollectorProcess;
let root: string;

beforeAll(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
  collector = await startCollector();
});
afterAll(async () => {
  await collector?.stop();
  fs.rmSync(root, { recursive: true, force: true });
  if (collector) fs.rmSync(collector.dataDir, { recursive: true, force: true });
});

it('prints past events, then live ones, until Ctrl-C', async () => {
  const uds = path.join(root, 'v.sock');
  await collector.api('PUT', '/v1/sandboxes/t1', { udsPath: uds });
  const probe = new ProbeClient({ path: `${uds}_52000`, heartbeatMs: 1000 });
  await probe.connect();
  await probe.waitAcked(probe.events([{ kind: 'phase', name: 'before-tail' }]));

  const child = spawn(process.execPath, [COLLECTOR_BIN, 'tail', 't1'], { env: { ...process.env, VSOCKDIAG_URL: collector.url } });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  try {
    await waitFor('past events', () => out.includes('before-tail'));
    probe.events([{ kind: 'phase', name: 'during-tail', status: 'envd startup: live' }]);
    await waitFor('a live event', () => out.includes('during-tail  envd startup: live'));
    expect(out).toMatch(/\d\d:\d\d:\d\d\.\d{3} g1 phase\s+during-tail/);
  } finally {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGINT');
    await exited;
    probe.close();
  }
  const missing = await cli(collector, ['tail', 'nope']);
  expect(missing.code).toBe(1);
  expect(missing.stderr).toContain('NOT_FOUND');
});
