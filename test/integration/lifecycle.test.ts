// The foundation's acceptance, end to end with real processes: the built probe inside a
// simulated sandbox (own network + PID namespace) talks through an emulated Firecracker
// vsock device to a real collector; verdicts are read from the API and the CLI.

import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, startCollector, waitForState } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { testBed } from '../harness/testbed.js';
import { FAKE_ENVD_PHASES } from '../harness/fake-envd.js';

// With the readiness thread, as the shipped unit runs it: wait-ready may ask either port.
const bed = testBed(['--stall-after', '1500ms', '--start-deadline', '20s', '--readiness-http', '127.0.0.1:0']);
const readinessUrl = () => {
  const url = bed.collector.readinessUrl;
  if (!url) throw new Error('the collector reported no readiness URL');
  return url;
};
const { sandbox } = bed;

describe('a sandbox through its life', () => {
  it('healthy envd → ready, and wait-ready exits 0', async () => {
    const sb = await sandbox({ id: 'healthy', envd: [] });
    const res = await cli(bed.collector, ['wait-ready', 'healthy', '--timeout', '20s']);
    expect(res.code, res.stderr + sb.output()).toBe(0);
    const viaThread = await cli(bed.collector, ['wait-ready', 'healthy', '--timeout', '5s', '--readiness-url', readinessUrl(), '--json']);
    expect(viaThread.code, viaThread.stderr).toBe(0);
    expect(JSON.parse(viaThread.stdout)).toMatchObject({ ready: true, state: 'ready', timedOut: false });
    const d = (await bed.collector.api('GET', '/v1/sandboxes/healthy')).body;
    expect(d.state).toBe('ready');
    expect(d.reason).toMatch(/fake-envd \(pid \d+\) listening on :\d+ since .* READY=1/);
    expect(d.listener.bound).toBe(true);
    expect(d.listener.pid).toBe(d.target.pid);
    expect(d.readiness).toMatchObject({ reportsPhases: true, ready: true });
    // Every phase envd walked arrived, in order, and READY=1 last.
    const names = d.phases.filter((p: any) => p.name).map((p: any) => p.name);
    expect(names).toEqual([...FAKE_ENVD_PHASES]);
    expect(d.phases.at(-1).ready).toBe(true);
    if (sb.isolated) expect(sb.expectPort).toBe(49983);
  });

  it('envd hung in phase cgroup-manager → stuck, naming the target, the port and the phase; wait-ready exits 3', async () => {
    const sb = await sandbox({ id: 'hung', envd: ['-hang-in', 'cgroup-manager'] });
    // From the readiness thread: the same exit, and the state change printed as it came.
    const res = await cli(bed.collector, ['wait-ready', 'hung', '--timeout', '20s', '--readiness-url', readinessUrl()]);
    expect(res.code, res.stderr + sb.output()).toBe(3);
    expect(res.stderr).toMatch(/hung: .*stuck.* — fake-envd alive/);
    expect((await cli(bed.collector, ['wait-ready', 'hung', '--timeout', '5s'])).code).toBe(3);
    const d = await waitForState(bed.collector, 'hung', 'stuck');
    expect(d.reason).toContain('fake-envd alive');
    expect(d.reason).toContain(`nothing listening on :${sb.expectPort}`);
    expect(d.reason).toContain('last phase cgroup-manager');
    expect(d.target.alive).toBe(true);
    // The verdict came from the stall timer, shortly after the 1.5 s stall threshold.
    const events = (await bed.collector.api('GET', '/v1/sandboxes/hung/events?kind=state')).body.events;
    const stuck = events.find((e: any) => e.data.state === 'stuck');
    const phases = (await bed.collector.api('GET', '/v1/sandboxes/hung/events?kind=phase')).body.events;
    const lastPhase = phases.at(-1);
    const lag = Date.parse(stuck.at) - Date.parse(lastPhase.at);
    expect(lag).toBeGreaterThanOrEqual(1400);
    expect(lag).toBeLessThan(4000);
  });

  it('envd crashing in a phase → exited with its exit status', async () => {
    await sandbox({ id: 'crash', envd: ['-crash-in', 'api'], mode: 'wrap' });
    const d = await waitForState(bed.collector, 'crash', 'exited');
    expect(d.target.exitCode).toBe(1);
    expect(d.reason).toMatch(/exited with status 1, last phase api/);
    const res = await cli(bed.collector, ['wait-ready', 'crash', '--timeout', '5s']);
    expect(res.code).toBe(3);
  });

  it('a killed probe → silent', async () => {
    const sb = await sandbox({ id: 'killed', envd: ['-hang-in', 'api'] });
    await waitForState(bed.collector, 'killed', ['starting', 'stuck']);
    const [probePid] = sb.pidsOf('vsockdiag-probe');
    expect(probePid).toBeGreaterThan(0);
    process.kill(probePid!, 'SIGKILL');
    const d = await waitForState(bed.collector, 'killed', 'silent');
    expect(d.reason).toMatch(/probe silent since/);
    expect(d.connected).toBe(false);
  });

  it('ls and status show the fleet from the CLI', async () => {
    await sandbox({ id: 'cli-a', envd: [] });
    await waitForState(bed.collector, 'cli-a', 'ready');
    const ls = await cli(bed.collector, ['ls', '--json']);
    expect(ls.code).toBe(0);
    const list = JSON.parse(ls.stdout);
    expect(list.find((s: any) => s.id === 'cli-a').state).toBe('ready');
    const st = await cli(bed.collector, ['status', 'cli-a']);
    expect(st.stdout).toMatch(/cli-a\s+ready/);
    expect(st.stdout).toContain('READY=1');
    const filtered = JSON.parse((await cli(bed.collector, ['ls', '--state', 'ready', '--json'])).stdout);
    expect(filtered.every((s: any) => s.state === 'ready')).toBe(true);
    // A readiness URL nothing answers on: said, with the flag it came from.
    const away = await cli(bed.collector, ['wait-ready', 'cli-a', '--readiness-url', 'http://127.0.0.1:1']);
    expect(away.code).toBe(1);
    expect(away.stderr).toContain('cannot reach the collector at http://127.0.0.1:1');
    expect(away.stderr).toContain('--readiness-url / VSOCKDIAG_READINESS_URL');
    expect((await cli(bed.collector, ['wait-ready', 'cli-a', '--readiness-url', 'ftp://x'])).stderr).toContain('must be http://');
    const missing = await cli(bed.collector, ['status', 'nope']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('NOT_FOUND');
  });

  it('registration through the CLI, and unregistration', async () => {
    const dir = fs.mkdtempSync(path.join(bed.root, 'reg-'));
    const reg = await cli(bed.collector, ['register', 'via-cli', '--uds', path.join(dir, 'v.sock')]);
    expect(reg.code, reg.stderr).toBe(0);
    expect(fs.existsSync(path.join(dir, 'v.sock_52000'))).toBe(true);
    await waitFor('registered state', async () => (await bed.collector.api('GET', '/v1/sandboxes/via-cli')).body.state === 'registered');
    const un = await cli(bed.collector, ['unregister', 'via-cli']);
    expect(un.code).toBe(0);
    expect(fs.existsSync(path.join(dir, 'v.sock_52000'))).toBe(false);
    expect((await bed.collector.api('GET', '/v1/sandboxes/via-cli')).status).toBe(404);
  });
});

describe('a collector with a token', () => {
  it('refuses the API without it, and the CLI passes it along', async () => {
    const secured = await startCollector({ args: ['--token', 's3cret'] });
    try {
      expect((await secured.api('GET', '/v1/sandboxes')).status).toBe(401);
      const ok = await fetch(`${secured.url}/v1/sandboxes`, { headers: { authorization: 'Bearer s3cret' } });
      expect(ok.status).toBe(200);
      expect((await secured.api('GET', '/healthz')).status).toBe(200);
      const denied = await cli(secured, ['ls']);
      expect(denied.code).toBe(1);
      expect(denied.stderr).toContain('UNAUTHORIZED');
      const allowed = await cli(secured, ['--token', 's3cret', 'ls', '--json']);
      expect(allowed.code, allowed.stderr).toBe(0);
    } finally {
      await secured.stop();
    }
  });
});
