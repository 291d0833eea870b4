// `make rootfs-install` lays the probe into a VM root filesystem: its own Node, the bundle
// and the addon side by side, a systemd unit started before envd, and envd's NOTIFY_SOCKET.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { ROOT, requireBuilt } from '../harness/collector.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

it('installs a runnable probe with its addon beside it, and the systemd units', () => {
  requireBuilt();
  const rootfs = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-rootfs-'));
  dirs.push(rootfs);
  const r = spawnSync('bash', [path.join(ROOT, 'scripts/rootfs-install.sh'), rootfs], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  const opt = path.join(rootfs, 'opt/vsockdiag');
  expect(fs.readdirSync(opt).sort()).toEqual([
    'node',
    'vsockdiag-probe.bundle.cache',
    'vsockdiag-probe.bundle.js',
    'vsockdiag-probe.js',
    'vsockdiag.node',
  ]);
  const unit = fs.readFileSync(path.join(rootfs, 'etc/systemd/system/vsockdiag-probe.service'), 'utf8');
  expect(unit).toContain('DefaultDependencies=no');
  expect(unit).toContain('Before=envd.service');
  const dropin = fs.readFileSync(path.join(rootfs, 'etc/systemd/system/envd.service.d/vsockdiag.conf'), 'utf8');
  expect(dropin).toContain('Environment=NOTIFY_SOCKET=/run/vsockdiag/notify.sock');
  expect(fs.readlinkSync(path.join(rootfs, 'etc/systemd/system/multi-user.target.wants/vsockdiag-probe.service'))).toBe(
    '../vsockdiag-probe.service',
  );
  // The installed copy runs with the installed Node, with the code cache made for that Node
  // (no package.json there: its .js files load as CommonJS), and finds its addon beside it.
  const v = spawnSync(path.join(opt, 'node'), [path.join(opt, 'vsockdiag-probe.js'), '--version'], {
    encoding: 'utf8',
    env: { ...process.env, VSOCKDIAG_CODE_CACHE: 'report' },
  });
  expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  expect(v.stderr).toContain('code cache accepted');
  const load = spawnSync(
    path.join(opt, 'node'),
    ['-e', `const m = require(${JSON.stringify(path.join(opt, 'vsockdiag.node'))}); process.stdout.write(typeof m.notifyBind)`],
    { encoding: 'utf8' },
  );
  expect(load.stdout).toBe('function');
});

it('refuses an unknown architecture with a clear message', () => {
  const rootfs = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-rootfs-'));
  dirs.push(rootfs);
  const r = spawnSync('bash', [path.join(ROOT, 'scripts/rootfs-install.sh'), rootfs, 'mips'], { encoding: 'utf8' });
  expect(r.status).toBe(2);
  expect(r.stderr).toContain('unknown arch mips');
});
