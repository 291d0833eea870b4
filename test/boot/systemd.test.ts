// The probe installed by `make rootfs-install` into a real Debian image, booted for real
// with systemd-nspawn: systemd as PID 1, a real journald, E2B's envd.service (envd.service
// here) running the fake envd as /usr/bin/envd, and the unit and drop-in of deploy/guest/
// exactly as installed. The collector runs on this machine; the probe reaches it over a
// Unix socket in a folder bound into the guest (never over vsock: a test drop-in sets
// --connect unix:..., --listen off). Shown:
//   - a healthy boot reaches `ready`;
//   - a hung boot (envd hangs in cgroup-manager, reports no phases over the notify socket,
//     like envd today) reaches `stuck` with the phase lines read from the journal, at the
//     journal's own times;
//   - journalctl restarting loses and repeats no line;
//   - the destructive goroutine dump comes from the journal while systemd restarts envd,
//     and the probe carries on across envd's restarts;
//   - the live goroutine dump, read from envd's memory, leaves envd running.

import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ROOT, allEvents, waitForState } from '../harness/collector.js';
import { GUEST_HOST_DIR, bootSystemd, bootUnavailable, type Guest } from '../harness/guest-image.js';
import { waitFor } from '../support/wait.js';
import { bootBed, type BootBed } from './boot-bed.js';

const unavailable = bootUnavailable();
const UNITS = 'etc/systemd/system';
/** A test-only drop-in may set only what a VM would not need: where the collector is. */
const PROBE_TEST_DROPIN = 'vsockdiag-probe.service.d/zz-boot-test.conf';

let bed: BootBed;

/** What the next boot runs: envd's flags, and the socket (in the bound folder) the probe reports to. */
function configureBoot(socketName: string, envdArgs: string): void {
  const root = bed.ov.root;
  fs.writeFileSync(path.join(root, 'etc/fake-envd.env'), `FAKE_ENVD_ARGS=${envdArgs}\n`);
  fs.mkdirSync(path.join(root, UNITS, path.dirname(PROBE_TEST_DROPIN)), { recursive: true });
  fs.writeFileSync(
    path.join(root, UNITS, PROBE_TEST_DROPIN),
    [
      '# Test only: the collector listens on a Unix socket bound into the guest. Never vsock.',
      '# A container has no kernel log of its own: no /dev/kmsg.',
      '[Service]',
      `Environment=VSOCKDIAG_CONNECT=unix:${GUEST_HOST_DIR}/${socketName}_52000 VSOCKDIAG_LISTEN=off VSOCKDIAG_KMSG=off`,
      '',
    ].join('\n'),
  );
}

async function boot(): Promise<Guest> {
  bed.guest = await bootSystemd(bed.ov);
  return bed.guest;
}

const show = (unit: string, prop: string) => bed.guest!.exec(['systemctl', 'show', unit, '-p', prop, '--value']).trim();

/** The log-derived phases the collector stored: name, status and guest time (ms since boot). */
async function logPhases(id: string): Promise<Array<{ name: string; status: string; t: number }>> {
  const events = await allEvents(bed.collector, id, 'phase');
  return events.filter((e) => e.data.source === 'log').map((e) => ({ name: e.data.name, status: e.data.status, t: e.tGuest }));
}

/** envd's unit entries in this boot's journal, as the probe reads them (message, monotonic µs). */
function journalOfEnvd(): Array<{ message: string; monoUs: number }> {
  return bed
    .guest!.exec(['journalctl', '-b', '-u', 'envd', '-o', 'json', '--output-fields=MESSAGE', '--all', '--no-pager'])
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { MESSAGE: string; __MONOTONIC_TIMESTAMP: string })
    .map((e) => ({ message: e.MESSAGE, monoUs: Number(e.__MONOTONIC_TIMESTAMP) }));
}

/** The journal lines the collector got from the probe, in order. */
async function journalLinesAtCollector(id: string): Promise<string[]> {
  const events = await allEvents(bed.collector, id, 'log.lines');
  return events.filter((e) => e.data.stream === 'journal').flatMap((e) => e.data.lines as string[]);
}

/** Everything useful when a boot test fails: the guest's console and the probe's own log. */
function diagnostics(): string {
  const probeLog = bed.guest?.tryExec(['journalctl', '-b', '-u', 'vsockdiag-probe', '--no-pager']).stdout ?? '';
  return `--- probe journal ---\n${probeLog.slice(-4000)}\n--- console ---\n${bed.guest?.console().slice(-4000) ?? ''}`;
}

describe.skipIf(unavailable !== null)(
  `a systemd guest booted with systemd-nspawn${unavailable ? ` (skipped: ${unavailable})` : ''}`,
  () => {
    bed = bootBed('systemd', ({ root }) => {
      // E2B: /usr/bin/envd under its own envd.service, enabled.
      fs.copyFileSync(path.join(ROOT, 'test/boot/envd.service'), path.join(root, UNITS, 'envd.service'));
      fs.symlinkSync('../envd.service', path.join(root, UNITS, 'multi-user.target.wants/envd.service'));
      // The fake envd takes its flags from the command line: a test drop-in passes them.
      fs.writeFileSync(
        path.join(root, UNITS, 'envd.service.d/zz-boot-test.conf'),
        '# Test only: the fake envd flags for this boot.\n[Service]\nEnvironmentFile=-/etc/fake-envd.env\nExecStart=\nExecStart=/usr/bin/envd $FAKE_ENVD_ARGS\n',
      );
    });

    it('a healthy boot: the probe starts first, envd reports its phases and READY=1, the sandbox is ready', async () => {
      configureBoot('healthy.sock', '');
      await bed.register('healthy', 'healthy.sock');
      await boot();
      try {
        const detail = await waitForState(bed.collector, 'healthy', 'ready', 60_000);
        expect(detail.readiness).toMatchObject({ reportsPhases: true, ready: true });
        expect(detail.target.name).toBe('envd');
        // As installed: envd after the probe, with its notify socket; the probe reads envd's journal.
        expect(show('envd', 'After').split(' ')).toContain('vsockdiag-probe.service');
        expect(show('envd', 'Environment')).toContain('NOTIFY_SOCKET=/run/vsockdiag/notify.sock');
        expect(show('vsockdiag-probe', 'ExecStart')).toContain('--journal-unit envd');
        expect(show('vsockdiag-probe', 'Environment')).toMatch(/VSOCKDIAG_CONNECT=unix:\S+ VSOCKDIAG_LISTEN=off/);
        // The probe ran before envd: it has envd's first line from the journal.
        await waitFor('the first phase line at the collector', async () =>
          (await journalLinesAtCollector('healthy')).includes('envd startup: creating run directory /run/e2b'),
        );
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${diagnostics()}`);
      } finally {
        await bed.guest!.stop();
      }
    }, 120_000);

    describe('a boot where envd hangs in cgroup-manager and reports phases only in its log', () => {
      beforeAll(async () => {
        configureBoot('hung.sock', '-hang-in cgroup-manager -no-notify');
        await bed.register('hung', 'hung.sock');
        await boot();
      }, 120_000);

      it('is stuck, with the phase lines read from the journal at the times the journal gave them', async () => {
        try {
          const detail = await waitForState(bed.collector, 'hung', 'stuck', 60_000);
          expect(detail.reason).toContain(
            'nothing listening on :49983, last phase creating cgroup manager ("envd startup: creating cgroup manager")',
          );
          expect(detail.readiness.reportsPhases).toBe(false);
          const phases = await logPhases('hung');
          const logged = journalOfEnvd().filter((e) => e.message.startsWith('envd startup: '));
          expect(phases.map((p) => p.status)).toEqual(logged.map((e) => e.message));
          expect(phases.at(-1)!.name).toBe('creating cgroup manager');
          // Monotonic µs in the journal, ms since boot at the collector: the same instants.
          phases.forEach((p, i) => expect(Math.abs(p.t - logged[i]!.monoUs / 1000)).toBeLessThan(50));
        } catch (err) {
          throw new Error(`${(err as Error).message}\n${diagnostics()}`);
        }
      }, 90_000);

      it('loses and repeats no line when journalctl restarts, and lines read late keep their journal time', async () => {
        try {
          const probePid = show('vsockdiag-probe', 'MainPID');
          const journalctl = () => {
            const kids = bed
              .guest!.exec(['cat', `/proc/${probePid}/task/${probePid}/children`])
              .trim()
              .split(' ')
              .filter(Boolean);
            return kids.find((k) => bed.guest!.tryExec(['cat', `/proc/${k}/comm`]).stdout.trim() === 'journalctl');
          };
          const before = await waitFor('the probe to run journalctl', journalctl);
          // Kill it, and while the probe waits to start another (1 s), envd starts again and logs.
          bed.guest!.exec(['/bin/sh', '-c', `kill -KILL ${before}`]);
          bed.guest!.exec(['systemctl', 'restart', 'envd']);
          const envdPid = Number(show('envd', 'MainPID'));
          await waitFor(
            'a new journalctl',
            () => {
              const now = journalctl();
              return now !== undefined && now !== before;
            },
            { timeoutMs: 30_000 },
          );
          await waitFor(
            'the restarted envd stuck at the collector',
            async () => {
              const d = (await bed.collector.api('GET', '/v1/sandboxes/hung')).body;
              return d.state === 'stuck' && d.target?.pid === envdPid && d.lastPhase === 'creating cgroup manager';
            },
            { timeoutMs: 60_000 },
          );
          const logged = journalOfEnvd();
          await waitFor(
            'every journal line at the collector',
            async () => (await journalLinesAtCollector('hung')).length >= logged.length,
            { timeoutMs: 30_000 },
          );
          expect(await journalLinesAtCollector('hung')).toEqual(logged.map((e) => e.message));
          // The second envd's phases were read more than a second late, yet carry their journal times.
          const phases = await logPhases('hung');
          const second = logged.filter((e) => e.message.startsWith('envd startup: ')).slice(6);
          expect(phases.slice(6).map((p) => p.status)).toEqual(second.map((e) => e.message));
          phases.slice(6).forEach((p, i) => expect(Math.abs(p.t - second[i]!.monoUs / 1000)).toBeLessThan(50));
        } catch (err) {
          throw new Error(`${(err as Error).message}\n${diagnostics()}`);
        }
      }, 120_000);

      it('takes the destructive goroutine dump from the journal while systemd restarts envd; the probe carries on', async () => {
        try {
          const probePid = show('vsockdiag-probe', 'MainPID');
          const envdPid = show('envd', 'MainPID');
          const restarts = Number(show('envd', 'NRestarts'));
          const generation = (await bed.collector.api('GET', '/v1/sandboxes/hung')).body.generation;
          const r = await bed.collector.api('POST', '/v1/sandboxes/hung/dumps', { mode: 'goroutines', destructive: true });
          expect(r.status, JSON.stringify(r.body)).toBe(201);
          expect(r.body).toMatchObject({ source: 'sigquit', complete: true, pid: Number(envdPid) });
          const dump = (await bed.collector.api('GET', `/v1/sandboxes/hung/dumps/${r.body.id}`)).body;
          expect(dump.text).toContain('SIGQUIT: quit');
          expect(dump.text).toContain('main.createCgroupManager');
          expect(dump.text).toMatch(/^goroutine 1 \[/m);
          // systemd (Restart=always) starts envd again; the probe is the same process throughout.
          await waitFor(
            'systemd to restart envd',
            () => show('envd', 'MainPID') !== envdPid && Number(show('envd', 'NRestarts')) === restarts + 1,
            { timeoutMs: 30_000 },
          );
          const newPid = Number(show('envd', 'MainPID'));
          await waitFor(
            'the new envd stuck again at the collector',
            async () => {
              const d = (await bed.collector.api('GET', '/v1/sandboxes/hung')).body;
              return d.state === 'stuck' && d.target?.pid === newPid && d.lastPhase === 'creating cgroup manager';
            },
            { timeoutMs: 60_000 },
          );
          expect(show('vsockdiag-probe', 'MainPID')).toBe(probePid);
          expect(show('vsockdiag-probe', 'NRestarts')).toBe('0');
          const d = (await bed.collector.api('GET', '/v1/sandboxes/hung')).body;
          expect(d.connected).toBe(true);
          expect(d.generation).toBe(generation);
        } catch (err) {
          throw new Error(`${(err as Error).message}\n${diagnostics()}`);
        }
      }, 120_000);

      it('takes the live goroutine dump from memory without ending envd', async () => {
        try {
          const envdPid = show('envd', 'MainPID');
          const restarts = show('envd', 'NRestarts');
          const r = await bed.collector.api('POST', '/v1/sandboxes/hung/dumps', { mode: 'goroutines' });
          expect(r.status, JSON.stringify(r.body)).toBe(201);
          expect(r.body).toMatchObject({ source: 'memory', complete: true, pid: Number(envdPid) });
          const dump = (await bed.collector.api('GET', `/v1/sandboxes/hung/dumps/${r.body.id}`)).body;
          expect(dump.text).toContain('main.createCgroupManager');
          expect(show('envd', 'MainPID')).toBe(envdPid);
          expect(show('envd', 'NRestarts')).toBe(restarts);
        } catch (err) {
          throw new Error(`${(err as Error).message}\n${diagnostics()}`);
        }
      }, 60_000);
    });
  },
);
