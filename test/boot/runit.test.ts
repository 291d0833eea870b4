// The probe installed by `make rootfs-install INIT=runit` into a real Debian image, run
// under runit's runsvdir as PID 1 of its own PID, network and mount namespaces (chrooted
// into the image), next to an envd service in AgentENV's shape: deploy/guest/runit/envd-run.sh
// as envd's `run`, stderr to /var/log/agentenv/envd.stderr.log, which the probe follows.
// The collector runs on this machine; the probe reaches it over a Unix socket in a folder
// bound into the namespace (never over vsock: ./conf sets --connect unix:..., --listen off).
// Shown: a healthy start reaches `ready`; a hung one reaches `stuck` with the phase lines
// read from the file; the destructive goroutine dump comes from the file while runsv
// restarts envd, and the probe carries on.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, allEvents, waitForState } from '../harness/collector.js';
import { GUEST_HOST_DIR, bootUnavailable, runInNamespace, type Guest } from '../harness/guest-image.js';
import { waitFor } from '../support/wait.js';
import { bootBed, type BootBed } from './boot-bed.js';

const unavailable = bootUnavailable();
const ENVD_RUN = path.join(ROOT, 'deploy/guest/runit/envd-run.sh');

let bed: BootBed;

/** A path of the image, as this machine sees it (Debian's /etc/service links to
 *  /etc/runit/runsvdir/default, absolutely). */
const inImage = (p: string) =>
  spawnSync('node', [path.join(ROOT, 'scripts/rootfs-tool.mjs'), 'resolve', bed.ov.root, p], { encoding: 'utf8' }).stdout.trim();

/** What the next start runs: envd's flags, and the socket the probe reports to. */
function configure(socketName: string, envdArgs: string): void {
  // envd's run as shipped, with the fake envd's flags on its exec line (the real envd takes none).
  const run = fs.readFileSync(ENVD_RUN, 'utf8');
  if (!run.includes('\nexec /usr/bin/envd\n')) throw new Error(`${ENVD_RUN} no longer ends in "exec /usr/bin/envd"`);
  fs.writeFileSync(inImage('/etc/sv/envd/run'), run.replace('\nexec /usr/bin/envd\n', `\nexec /usr/bin/envd ${envdArgs}\n`), {
    mode: 0o755,
  });
  fs.writeFileSync(
    inImage('/etc/sv/vsockdiag-probe/conf'),
    [
      '# Test only: the collector listens on a Unix socket bound into the guest. Never vsock.',
      `VSOCKDIAG_CONNECT=unix:${GUEST_HOST_DIR}/${socketName}_52000`,
      'VSOCKDIAG_LISTEN=off',
      '# No kernel log of its own in a namespace.',
      'VSOCKDIAG_KMSG=off',
      '',
    ].join('\n'),
  );
  // Supervision state of an earlier run (runsv recreates it).
  for (const sv of ['envd', 'vsockdiag-probe', 'vsockdiag-probe/log'])
    fs.rmSync(inImage(`/etc/sv/${sv}/supervise`), { recursive: true, force: true });
}

async function start(id: string, socketName: string, envdArgs: string): Promise<Guest> {
  configure(socketName, envdArgs);
  await bed.register(id, socketName);
  bed.guest = await runInNamespace(bed.ov, ['runsvdir', '-P', '/etc/service']);
  return bed.guest;
}

/** A service's pid as runsv records it ('' while down). */
const svPid = (sv: string) => {
  try {
    return fs.readFileSync(inImage(`/etc/sv/${sv}/supervise/pid`), 'utf8').trim();
  } catch {
    return '';
  }
};

function diagnostics(): string {
  const read = (p: string) => {
    try {
      return fs.readFileSync(inImage(p), 'utf8').slice(-4000);
    } catch (err) {
      return `(${(err as Error).message})`;
    }
  };
  return `--- probe log ---\n${read('/var/log/vsockdiag-probe/current')}\n--- envd stderr ---\n${read('/var/log/agentenv/envd.stderr.log')}\n--- runsvdir ---\n${bed.guest?.console().slice(-2000) ?? ''}`;
}

describe.skipIf(unavailable !== null)(`a runit guest (runsvdir in a namespace)${unavailable ? ` (skipped: ${unavailable})` : ''}`, () => {
  bed = bootBed('runit', (_ov, installed) => {
    expect(installed).toContain('linked into /etc/service');
    fs.mkdirSync(inImage('/etc/sv/envd'), { recursive: true });
    fs.symlinkSync('/etc/sv/envd', inImage('/etc/service/envd'));
  });

  it('a healthy start: envd waits for the probe, reports phases and READY=1, the sandbox is ready', async () => {
    await start('runit-healthy', 'healthy.sock', '');
    try {
      const detail = await waitForState(bed.collector, 'runit-healthy', 'ready', 60_000);
      expect(detail.readiness).toMatchObject({ reportsPhases: true, ready: true });
      expect(String(detail.target.pid)).toBe(svPid('envd'));
      // The probe followed envd's stderr file from the start of this envd.
      await waitFor('the first phase line at the collector', async () =>
        (await allEvents(bed.collector, 'runit-healthy', 'log.lines'))
          .filter((e) => e.data.stream === 'file')
          .some((e) => e.data.lines.includes('envd startup: creating run directory /run/e2b')),
      );
    } catch (err) {
      throw new Error(`${(err as Error).message}\n${diagnostics()}`);
    } finally {
      await bed.guest!.stop();
    }
  }, 120_000);

  it('a hung start is stuck with the phase lines from the file; the destructive dump comes from the file while runsv restarts envd', async () => {
    await start('runit-hung', 'hung.sock', '-hang-in cgroup-manager -no-notify');
    try {
      const detail = await waitForState(bed.collector, 'runit-hung', 'stuck', 60_000);
      expect(detail.reason).toContain('last phase creating cgroup manager ("envd startup: creating cgroup manager")');
      const probePid = svPid('vsockdiag-probe');
      const envdPid = svPid('envd');
      const r = await bed.collector.api('POST', '/v1/sandboxes/runit-hung/dumps', { mode: 'goroutines', destructive: true });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      expect(r.body).toMatchObject({ source: 'sigquit', complete: true, pid: Number(envdPid) });
      const dump = (await bed.collector.api('GET', `/v1/sandboxes/runit-hung/dumps/${r.body.id}`)).body;
      expect(dump.text).toContain('main.createCgroupManager');
      await waitFor('runsv to restart envd', () => svPid('envd') !== '' && svPid('envd') !== envdPid, { timeoutMs: 30_000 });
      const newPid = Number(svPid('envd'));
      await waitFor(
        'the new envd stuck again at the collector',
        async () => {
          const d = (await bed.collector.api('GET', '/v1/sandboxes/runit-hung')).body;
          return d.state === 'stuck' && d.target?.pid === newPid && d.lastPhase === 'creating cgroup manager';
        },
        { timeoutMs: 60_000 },
      );
      expect(svPid('vsockdiag-probe')).toBe(probePid);
    } catch (err) {
      throw new Error(`${(err as Error).message}\n${diagnostics()}`);
    }
  }, 120_000);
});
