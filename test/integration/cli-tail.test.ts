// `vsockdiag tail <id>`: the last events first, then new ones live as they arrive.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { COLLECTOR_BIN, cli, startCollector, type CollectorProcess } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
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
    expect(out).toMatch(/\d\d:\d\d:\d\d\.\d{3} g1\/s1 phase\s+during-tail/);
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

it('shows the newest N of a long history, oldest of them first', async () => {
  const uds = path.join(root, 'long.sock');
  await collector.api('PUT', '/v1/sandboxes/t2', { udsPath: uds });
  const probe = new ProbeClient({ path: `${uds}_52000`, heartbeatMs: 1000 });
  await probe.connect();
  try {
    // 2,600 phases: more than two pages of the events API.
    let last = 0;
    for (let b = 0; b < 13; b++) {
      last = probe.events(
        Array.from({ length: 200 }, (_, i) => ({ kind: 'phase' as const, source: 'log' as const, name: `p${b * 200 + i}` })),
      );
    }
    await probe.waitAcked(last, 20_000);
    const child = spawn(process.execPath, [COLLECTOR_BIN, 'tail', 't2', '-n', '1205', '--json'], {
      env: { ...process.env, VSOCKDIAG_URL: collector.url },
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    try {
      await waitFor('1,205 past events', () => out.split('\n').length > 1205);
    } finally {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT');
      await exited;
    }
    const names = out
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { data: { name?: string } }).data.name);
    expect(names).toHaveLength(1205);
    expect(names[0]).toBe('p1395');
    expect(names.at(-1)).toBe('p2599');
  } finally {
    probe.close();
  }
});
