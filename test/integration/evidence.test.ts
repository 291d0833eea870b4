// Issue 4's acceptance, in simulated sandboxes: the probe shows why envd is not serving,
// from outside envd.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { allEvents, waitForState } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { testBed } from '../harness/testbed.js';
import { namespacesAvailable } from '../harness/sandbox.js';

const bed = testBed(['--stall-after', '1500ms', '--start-deadline', '30s', '--storm-threshold', '300', '--metrics-per-sandbox']);
const { sandbox } = bed;

const get = async (id: string) => (await bed.collector.api('GET', `/v1/sandboxes/${id}`)).body;

describe.skipIf(!namespacesAvailable())('evidence', () => {
  it('an MMDS poll storm raises socket-storm naming 169.254.169.254:80 (reason, API, /metrics)', async () => {
    await sandbox({ id: 'storm', mmds: true, envd: ['-mmds-addr', '169.254.169.254:80', '-mmds-storm', '50'] });
    const d = await waitFor(
      'socket-storm',
      async () => {
        const s = await get('storm');
        return s.conditions?.some((c: any) => c.name === 'socket-storm') ? s : null;
      },
      { timeoutMs: 20_000 },
    );
    const storm = d.conditions.find((c: any) => c.name === 'socket-storm');
    expect(storm.subject).toBe('169.254.169.254:80');
    expect(storm.count).toBeGreaterThanOrEqual(300);
    expect(d.reason).toMatch(/socket-storm: [\d,]+ sockets to 169\.254\.169\.254:80/);
    expect(d.sockets.top[0]).toMatchObject({ address: '169.254.169.254', port: 80 });
    const metrics = await (await fetch(`${bed.collector.url}/metrics`)).text();
    expect(metrics).toMatch(/vsockdiag_sandbox_condition\{sandbox="storm",condition="socket-storm",subject="169\.254\.169\.254:80"\} \d+/);
    const raised = await allEvents(bed.collector, 'storm', 'condition');
    expect(raised.some((e) => e.data.name === 'socket-storm' && e.data.raised)).toBe(true);
  });

  it('a fake envd that binds but never accepts is reported as not accepting', async () => {
    const sb = await sandbox({ id: 'noaccept', envd: ['-no-accept'], probeArgs: ['--health-url', 'http://127.0.0.1:49983/health'] });
    await waitForState(bed.collector, 'noaccept', 'stuck', 20_000);
    // The first health check may find the port before it listens (refused): the reason says
    // so until the probe's next socket census sees the accept queue.
    const d = await waitFor('the not-accepting reason', async () => {
      const now = await get('noaccept');
      return now.reason.includes(`listening on :${sb.expectPort} but not accepting (`) ? now : undefined;
    });
    expect(d.reason).toMatch(/connections? waiting in the accept queue/);
    expect(d.listener.acceptQueue).toBeGreaterThanOrEqual(1);
    // The health check's own request sits in that queue until it times out.
    await waitFor('the health check to time out', async () => /ETIMEDOUT/.test((await get('noaccept')).health?.error ?? ''));
  });

  it('envd binding first and hanging before READY=1 is stuck: listening, start-up never finished', async () => {
    const sb = await sandbox({
      id: 'listenfirst',
      envd: ['-listen-first', '-hang-in', 'api'],
      probeArgs: ['--health-url', 'http://127.0.0.1:49983/health'],
    });
    const d = await waitForState(bed.collector, 'listenfirst', 'stuck', 20_000);
    expect(d.reason).toContain(`listening on :${sb.expectPort} but start-up never finished (no READY=1)`);
    expect(d.reason).toContain('last phase api');
    // The listener answers its health check: "listening but init incomplete", not "not answering".
    expect(d.health).toMatchObject({ ok: true, status: 204 });
  });

  it("a wrapped envd's phases come from its log lines, and its exit status arrives", async () => {
    await sandbox({ id: 'wrapped', mode: 'wrap', envd: ['-no-notify', '-crash-in', 'api'] });
    const d = await waitForState(bed.collector, 'wrapped', 'exited', 20_000);
    expect(d.target.exitCode).toBe(1);
    const phases = (await allEvents(bed.collector, 'wrapped', 'phase')).map((e) => e.data);
    expect(phases.every((p) => p.source === 'log')).toBe(true);
    expect(phases.map((p) => p.name)).toContain('creating cgroup manager');
    expect(phases.at(-1).name).toBe('creating API store');
    const lines = (await allEvents(bed.collector, 'wrapped', 'log.lines')).flatMap((e) => e.data.lines);
    expect(lines).toContain('envd startup: creating API store');
    expect(d.reason).toContain('exited with status 1');
  });

  it('an OOM kill in the kernel log reaches the sandbox events and conditions', async () => {
    const kmsg = path.join(bed.root, 'kmsg.txt');
    fs.writeFileSync(kmsg, '6,1,1000,-;Linux version 6.1\n');
    const sb = await sandbox({ id: 'oom', envd: ['-hang-in', 'api'], probeArgs: ['--kmsg', kmsg] });
    await waitForState(bed.collector, 'oom', ['starting', 'stuck']);
    const [envdPid] = sb.pidsOf(path.join('fake-envd', 'fake-envd'));
    // Stamped like the kernel would stamp it now (µs since boot): the collector dates kernel
    // messages by that stamp, and only those during the target's life raise a condition.
    const nowUs = Math.round(Number.parseFloat(fs.readFileSync('/proc/uptime', 'utf8')) * 1e6);
    fs.appendFileSync(kmsg, `3,2,${nowUs},-;Out of memory: Killed process ${envdPid} (fake-envd) total-vm:1000kB, anon-rss:900kB\n`);
    const e = await waitFor('kernel event', async () => (await allEvents(bed.collector, 'oom', 'kernel'))[0]);
    expect(e.data).toMatchObject({ what: 'oom', process: 'fake-envd' });
    expect((await get('oom')).conditions.some((c: any) => c.name === 'oom')).toBe(true);
  });

  it("phases reported with Debian's systemd-notify arrive", async () => {
    const sb = await sandbox({ id: 'sdnotify', envd: ['-hang-in', 'api', '-no-notify'] });
    await waitForState(bed.collector, 'sdnotify', ['starting', 'stuck']);
    const r = spawnSync('systemd-notify', ['--status=envd startup: from systemd-notify', 'PHASE=sd-notify-phase'], {
      env: { ...process.env, NOTIFY_SOCKET: sb.notifySocket },
      encoding: 'utf8',
    });
    expect(r.status, r.stderr).toBe(0);
    const p = await waitFor('the phase', async () =>
      (await allEvents(bed.collector, 'sdnotify', 'phase')).find((e) => e.data.name === 'sd-notify-phase'),
    );
    expect(p.data).toMatchObject({ status: 'envd startup: from systemd-notify', source: 'notify' });
  });

  it('attach mode: phase lines appended to a followed log file arrive', async () => {
    const log = path.join(bed.root, 'envd.stderr.log');
    fs.writeFileSync(log, 'envd startup: from a previous boot\n');
    await sandbox({ id: 'attach', envd: ['-hang-in', 'api', '-no-notify'], probeArgs: ['--log-file', log] });
    await waitForState(bed.collector, 'attach', ['starting', 'stuck']);
    fs.appendFileSync(log, 'noise\nenvd startup: opening cgroup manager\n');
    const p = await waitFor('the phase', async () =>
      (await allEvents(bed.collector, 'attach', 'phase')).find((e) => e.data.source === 'log'),
    );
    expect(p.data.name).toBe('opening cgroup manager');
    const all = (await allEvents(bed.collector, 'attach', 'phase')).map((e) => e.data.name);
    expect(all).not.toContain('from a previous boot');
  });

  it('system facts and clock skew are in the sandbox view', async () => {
    await sandbox({ id: 'facts', envd: [] });
    const d = await waitFor('system facts', async () => {
      const s = await get('facts');
      return s.system ? s : null;
    });
    expect(d.system.memTotalKb).toBeGreaterThan(0);
    expect(d.system.bootId).toMatch(/[0-9a-f-]{36}/);
    expect(Math.abs(d.clockSkewMs)).toBeLessThan(1000);
  });
});
