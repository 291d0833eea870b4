// `make rootfs-install` lays the probe into a VM root filesystem: its own Node (stripped),
// the bundle and the addon side by side, and the service files of deploy/guest/ for the
// image's init. It refuses, before writing anything, a Node or an image it would not run in.
// (test/boot/ boots such images for real.)

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PROBE_ENV, ROOT, requireBuilt } from '../harness/collector.js';

const SCRIPT = path.join(ROOT, 'scripts/rootfs-install.sh');
const DEPLOY = path.join(ROOT, 'deploy/guest');
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function tempDir(prefix = 'vd-rootfs-'): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(d);
  return d;
}

function install(rootfs: string, args: string[] = [], env: NodeJS.ProcessEnv = {}) {
  return spawnSync('bash', [SCRIPT, rootfs, ...args], { encoding: 'utf8', env: { ...process.env, ...env } });
}

const read = (...p: string[]) => fs.readFileSync(path.join(...p), 'utf8');
const mode = (...p: string[]) => fs.statSync(path.join(...p)).mode & 0o777;

/** gcc, for tiny ELF files with chosen dependencies. */
function cc(dir: string, name: string, args: string[], source = 'int x;\n'): string {
  const src = path.join(dir, `${name}.c`);
  fs.writeFileSync(src, source);
  const out = path.join(dir, name);
  const r = spawnSync('gcc', ['-o', out, src, ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`gcc ${name}: ${r.stderr}`);
  return out;
}

describe('rootfs-install', () => {
  it('every guest unit starts the probe with the environment the benchmarks measure (PROBE_ENV)', () => {
    for (const [name, value] of Object.entries(PROBE_ENV)) {
      expect(read(DEPLOY, 'systemd/vsockdiag-probe.service')).toMatch(new RegExp(`^Environment=${name}=${value}$`, 'm'));
      expect(read(DEPLOY, 'runit/vsockdiag-probe/run')).toMatch(new RegExp(`^export ${name}=${value}$`, 'm'));
      expect(read(DEPLOY, 'openrc/vsockdiag-probe')).toMatch(new RegExp(`^supervise_daemon_args=".*--env ${name}=${value}\\b`, 'm'));
    }
  });

  it('installs a runnable, stripped probe with its addon beside it, and the systemd files from deploy/guest', () => {
    requireBuilt();
    const rootfs = tempDir();
    const r = install(rootfs);
    expect(r.status, r.stderr).toBe(0);
    const opt = path.join(rootfs, 'opt/vsockdiag');
    expect(fs.readdirSync(opt).sort()).toEqual([
      'node',
      'vsockdiag-probe.bundle.cache',
      'vsockdiag-probe.bundle.js',
      'vsockdiag-probe.js',
      'vsockdiag.node',
    ]);
    const units = path.join(rootfs, 'etc/systemd/system');
    expect(read(units, 'vsockdiag-probe.service')).toBe(read(DEPLOY, 'systemd/vsockdiag-probe.service'));
    expect(read(units, 'envd.service.d/vsockdiag.conf')).toBe(read(DEPLOY, 'systemd/envd.service.d/vsockdiag.conf'));
    expect(read(units, 'vsockdiag-probe.service')).toMatch(/^ExecStart=.* --journal-unit envd /m);
    expect(fs.readlinkSync(path.join(units, 'multi-user.target.wants/vsockdiag-probe.service'))).toBe('../vsockdiag-probe.service');
    // Stripped: no symbol table left in the copy; the size of what was installed is reported.
    const symtab = spawnSync('readelf', ['-S', '-W', path.join(opt, 'node')], { encoding: 'utf8' }).stdout;
    expect(symtab).not.toMatch(/\.symtab|\.debug_info/);
    expect(r.stdout).toMatch(/\/opt\/vsockdiag: [\d.]+ MiB: node [\d.]+ MiB \(from [\d.]+ MiB\)/);
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

  it('INIT=runit: the run and log/run pair, linked into /etc/service inside the image, never on this machine', () => {
    requireBuilt();
    const rootfs = tempDir();
    // Debian's runit: /etc/service -> runit/runsvdir/current -> /etc/runit/runsvdir/default,
    // an absolute link. Here it names a folder this machine does not have.
    const guestDir = `/srv/vd-test-svdir-${process.pid}-${Date.now()}`;
    fs.mkdirSync(path.join(rootfs, guestDir), { recursive: true });
    fs.mkdirSync(path.join(rootfs, 'etc'));
    fs.symlinkSync(guestDir, path.join(rootfs, 'etc/service'));
    const r = install(rootfs, ['x64', 'runit']);
    expect(r.status, r.stderr).toBe(0);
    const sv = path.join(rootfs, 'etc/sv/vsockdiag-probe');
    expect(read(sv, 'run')).toBe(read(DEPLOY, 'runit/vsockdiag-probe/run'));
    expect(read(sv, 'log/run')).toBe(read(DEPLOY, 'runit/vsockdiag-probe/log/run'));
    expect(mode(sv, 'run')).toBe(0o755);
    expect(mode(sv, 'log/run')).toBe(0o755);
    expect(fs.readlinkSync(path.join(rootfs, guestDir, 'vsockdiag-probe'))).toBe('/etc/sv/vsockdiag-probe');
    expect(fs.existsSync(guestDir)).toBe(false);
    expect(fs.existsSync(path.join(rootfs, 'etc/systemd'))).toBe(false);
    expect(r.stdout).toContain('deploy/guest/runit/envd-run.sh');
  });

  it('INIT=openrc: the init script in the default runlevel', () => {
    requireBuilt();
    const rootfs = tempDir();
    const r = install(rootfs, ['x64', 'openrc']);
    expect(r.status, r.stderr).toBe(0);
    expect(read(rootfs, 'etc/init.d/vsockdiag-probe')).toBe(read(DEPLOY, 'openrc/vsockdiag-probe'));
    expect(mode(rootfs, 'etc/init.d/vsockdiag-probe')).toBe(0o755);
    expect(fs.readlinkSync(path.join(rootfs, 'etc/runlevels/default/vsockdiag-probe'))).toBe('/etc/init.d/vsockdiag-probe');
    expect(r.stdout).toContain('NOTIFY_SOCKET=/run/vsockdiag/notify.sock');
  });

  const haveCross = spawnSync('aarch64-linux-gnu-gcc', ['--version']).status === 0;
  it.skipIf(!haveCross)(
    'ARCH=arm64: checked and stripped with the cross tools, without a code cache',
    () => {
      requireBuilt();
      const built = spawnSync('make', ['--no-print-directory', 'cross-arm64'], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
      expect(built.status, built.stderr).toBe(0);
      // Any aarch64 executable linking only libc stands in for an arm64 Node (which cannot run here).
      const work = tempDir('vd-arm64-node-');
      const src = path.join(work, 'node.c');
      fs.writeFileSync(src, 'int main(void) { return 0; }\n');
      const node = path.join(work, 'node');
      const cc = spawnSync('aarch64-linux-gnu-gcc', ['-g', '-o', node, src], { encoding: 'utf8' });
      expect(cc.status, cc.stderr).toBe(0);
      const rootfs = tempDir();
      const r = install(rootfs, ['arm64'], { NODE_BIN: node });
      expect(r.status, r.stderr).toBe(0);
      const opt = path.join(rootfs, 'opt/vsockdiag');
      expect(fs.readdirSync(opt).sort()).toEqual(['node', 'vsockdiag-probe.bundle.js', 'vsockdiag-probe.js', 'vsockdiag.node']);
      for (const f of ['node', 'vsockdiag.node']) {
        const sections = spawnSync('readelf', ['-S', '-W', path.join(opt, f)], { encoding: 'utf8' }).stdout;
        expect(sections).toContain('.dynsym'); // what the addon links against stays
        expect(sections, f).not.toMatch(/\.symtab|\.debug_info/);
      }
      expect(r.stdout).toContain('ROOTFS has no C library yet');
      expect(r.stdout).toContain('libc.so.6');
    },
    150_000,
  );

  it('refuses a musl (Alpine) image plainly and installs nothing', () => {
    requireBuilt();
    const rootfs = tempDir();
    fs.mkdirSync(path.join(rootfs, 'lib'));
    fs.writeFileSync(path.join(rootfs, 'lib/ld-musl-x86_64.so.1'), '');
    const r = install(rootfs, ['x64', 'openrc']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('ROOTFS is a musl image (/lib/ld-musl-x86_64.so.1');
    expect(r.stderr).toContain('the probe does not run on musl yet');
    expect(fs.readdirSync(rootfs)).toEqual(['lib']);
  });

  it("refuses a Node that links more than the C and C++ runtime (Debian's nodejs: libnode.so)", () => {
    requireBuilt();
    const work = tempDir('vd-fake-node-');
    // A stand-in for Debian's /usr/bin/node: an executable that needs libnode.so.108.
    cc(work, 'libnode.so.108', ['-shared', '-fPIC', '-Wl,-soname,libnode.so.108']);
    const node = cc(work, 'node', [`-L${work}`, '-Wl,--no-as-needed', '-l:libnode.so.108'], 'int main(void) { return 0; }\n');
    const rootfs = tempDir();
    const r = install(rootfs, [], { NODE_BIN: node });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('needs libraries beyond the C and C++ runtime');
    expect(r.stderr).toContain('libnode.so.108');
    expect(r.stderr).toContain("Debian's or Ubuntu's own nodejs package");
    expect(r.stderr).toContain('NODE_BIN=');
    expect(fs.readdirSync(rootfs)).toEqual([]);
  });

  it('refuses an image whose C library is older than the probe needs, naming what is missing', () => {
    requireBuilt();
    const rootfs = tempDir();
    const lib = path.join(rootfs, 'usr/lib/x86_64-linux-gnu');
    fs.mkdirSync(lib, { recursive: true });
    // A libc.so.6 that defines only the oldest symbol version, GLIBC_2.2.5.
    const script = path.join(rootfs, 'old.map');
    fs.writeFileSync(script, 'GLIBC_2.2.5 { global: *; };\n');
    cc(lib, 'libc.so.6', ['-shared', '-fPIC', '-nostdlib', '-Wl,-soname,libc.so.6', `-Wl,--version-script=${script}`]);
    const r = install(rootfs);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/ROOTFS's \/usr\/lib\/x86_64-linux-gnu\/libc\.so\.6 is too old: it lacks GLIBC_2\.\d+/);
    expect(r.stderr).toContain('ROOTFS has no libstdc++.so.6');
    expect(fs.existsSync(path.join(rootfs, 'opt'))).toBe(false);
  });

  it('refuses an unknown architecture or init, a missing ROOTFS, and a Node of another architecture', () => {
    const rootfs = tempDir();
    let r = install(rootfs, ['mips']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('unknown arch mips');
    r = install(rootfs, ['x64', 'upstart']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('unknown init upstart (systemd, runit or openrc)');
    r = install(path.join(rootfs, 'nope'));
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('is not a directory');
    const c = spawnSync('node', [path.join(ROOT, 'scripts/rootfs-tool.mjs'), 'check-libs', rootfs, 'arm64', process.execPath], {
      encoding: 'utf8',
    });
    expect(c.status).toBe(1);
    expect(c.stderr).toContain('is built for Advanced Micro Devices X86-64, not arm64 (AArch64)');
  });
});
