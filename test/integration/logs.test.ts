// The collector's stderr is NDJSON and nothing else: every line a log record with a level
// name, Node's own warnings included; --log-level sets the least level; the human start-up
// line is on stdout.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { COLLECTOR_BIN, requireBuilt, startCollector } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';
import { childReaper, waitForOutput } from '../support/children.js';
import { waitFor } from '../support/wait.js';

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];
const reaper = childReaper();
let root: string;
/** Loaded into the collector: on SIGUSR2, a process warning such as Node prints itself. */
let preload: string;

beforeAll(() => {
  requireBuilt();
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-logs-'));
  preload = path.join(root, 'warn-on-usr2.cjs');
  fs.writeFileSync(preload, "process.on('SIGUSR2', () => process.emitWarning('a test warning', 'TestWarning'));\n");
});
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

/** Every line of `stderr` as a record; fails on the first that is not one. */
function records(stderr: string): Array<{ level: string; msg: string; [k: string]: unknown }> {
  return stderr
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const r = JSON.parse(line);
      expect(LEVELS, line).toContain(r.level);
      return r;
    });
}

it('every stderr line is a record with a level name, from start to stop', async () => {
  const c = await startCollector({ env: { NODE_OPTIONS: `--require ${preload}` } });
  try {
    const uds = path.join(root, 'v.sock');
    expect((await c.api('PUT', '/v1/sandboxes/sb1', { udsPath: uds })).status).toBe(201);
    const probe = new ProbeClient({ path: `${uds}_52000`, heartbeatMs: 1000 });
    await probe.connect();
    await probe.waitAcked(probe.events([{ kind: 'phase', name: 'logged' }]), 15_000);
    probe.close();
    // A guest sending garbage: the session is closed with a warning.
    const bad = net.connect(`${uds}_52000`);
    bad.on('error', () => {});
    bad.end(Buffer.from([0, 0, 0, 3, 0xc1, 0xc1, 0xc1]));
    await waitFor('the closing warning', () => c.logs().includes('"msg":"closing probe session"'));
    process.kill(c.proc.pid!, 'SIGUSR2');
    await waitFor("Node's warning as a record", () => c.logs().includes('"msg":"a test warning"'));
  } finally {
    await c.stop();
  }
  // records() fails on Node's own "(node:PID) TestWarning: ..." line, were it printed too.
  const all = records(c.logs());
  expect([...new Set(all.map((r) => r.level))].sort()).toEqual(['info', 'warn']);
  expect(all.find((r) => r.msg === 'a test warning')).toMatchObject({ level: 'warn', warning: { name: 'TestWarning' } });
});

it('--log-level warn leaves out info and debug; the start-up line is on stdout', async () => {
  const data = path.join(root, 'data-warn');
  const child = reaper.track(
    spawn(process.execPath, [COLLECTOR_BIN, 'collector', '--http', '127.0.0.1:0', '--data', data, '--log-level', 'warn'], {
      env: { ...process.env, VSOCKDIAG_LOG_LEVEL: 'debug' },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  await waitForOutput(child, 'stdout', 'collector listening on', 30_000);
  const url = /listening on (http:\/\/\S+) /.exec(stdout)![1]!;
  const uds = path.join(root, 'w.sock');
  const put = await fetch(`${url}/v1/sandboxes/sb2`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ udsPath: uds }),
  });
  expect(put.status).toBe(201);
  await put.arrayBuffer();
  const bad = net.connect(`${uds}_52000`);
  bad.on('error', () => {});
  bad.end(Buffer.from([0, 0, 0, 3, 0xc1, 0xc1, 0xc1]));
  await waitFor('the closing warning', () => stderr.includes('"msg":"closing probe session"'));
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  expect(await exited).toBe(0);
  const all = records(stderr);
  expect(all.length).toBeGreaterThan(0);
  for (const r of all) expect(['warn', 'error', 'fatal']).toContain(r.level);
  expect(stdout).toBe(`vsockdiag collector listening on ${url} (dashboard: ${url}/)\n`);
});
