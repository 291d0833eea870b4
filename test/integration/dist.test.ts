// The package `make dist` builds (scripts/make-dist.mjs), installed as an operator would:
// `npm install -g` into a temporary prefix with no registry reachable, then run from a folder
// far from the repo, configured by VSOCKDIAG_* variables and a token file. A probe reports
// over a Unix socket; the API, the installed CLI and the dashboard answer; every stderr line
// is a log record. The systemd unit is verified against the installed binary, and the Nomad
// job's HCL is parsed where terraform (HashiCorp's HCL parser) is installed.

import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, requireBuilt } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';
import { childReaper, waitForOutput } from '../support/children.js';
import { waitFor } from '../support/wait.js';

const run = promisify(execFile);
const version = JSON.parse(fs.readFileSync(path.join(ROOT, 'host-collector/package.json'), 'utf8')).version as string;
const has = (tool: string) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;
const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal']);
const TOKEN = 'dist-test-token';

const reaper = childReaper({ after: 'all' });
let root: string;
let prefix: string;
let bin: string;
/** PATH without the repo's folders (node_modules/.bin): the install must stand alone. */
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  requireBuilt();
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-dist-'));
  prefix = path.join(root, 'prefix');
  bin = path.join(prefix, 'bin/vsockdiag');
  const PATH = (process.env.PATH ?? '')
    .split(':')
    .filter((d) => d && !path.resolve(d).startsWith(ROOT))
    .join(':');
  env = { PATH, HOME: root, LANG: 'C.UTF-8' };
  const { stdout } = await run(process.execPath, [path.join(ROOT, 'scripts/make-dist.mjs'), path.join(root, 'out')], {
    timeout: 300_000,
  });
  const tgz = stdout.trim();
  expect(path.basename(tgz)).toBe(`vsockdiag-${version}.tgz`);
  fs.writeFileSync(path.join(root, 'npmrc'), '');
  // An unreachable registry and no retries: any fetch would fail the install.
  await run(
    'npm',
    ['install', '-g', '--prefix', prefix, tgz, '--no-audit', '--no-fund', '--fetch-retries=0', '--registry=http://127.0.0.1:9/'],
    {
      cwd: root,
      env: { ...env, npm_config_cache: path.join(root, 'npm-cache'), npm_config_userconfig: path.join(root, 'npmrc') },
      timeout: 300_000,
    },
  );
}, 660_000);

afterAll(async () => {
  await reaper.reap();
  if (root) fs.rmSync(root, { recursive: true, force: true });
});

describe('the installed package', () => {
  it('holds real files only, nothing pointing back into the repo', async () => {
    const pkg = path.join(prefix, 'lib/node_modules/vsockdiag');
    const outside = fs
      .readdirSync(pkg, { recursive: true, withFileTypes: true })
      .filter((e) => e.isSymbolicLink())
      .map((e) => fs.realpathSync(path.join(e.parentPath, e.name)))
      .filter((target) => !target.startsWith(pkg + path.sep));
    expect(outside).toEqual([]);
    expect(fs.existsSync(path.join(pkg, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node'))).toBe(true);
    expect(fs.existsSync(path.join(pkg, 'web-ui/dist/index.html'))).toBe(true);
    const { stdout } = await run(bin, ['--version'], { cwd: root, env });
    expect(stdout.trim()).toBe(version);
  });

  it('runs from anywhere: a sandbox over a Unix socket, the API, the CLI and the dashboard', { timeout: 180_000 }, async () => {
    const elsewhere = path.join(root, 'elsewhere');
    fs.mkdirSync(elsewhere);
    const tokenFile = path.join(root, 'token');
    fs.writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    const collector: ChildProcess = reaper.track(
      spawn(bin, ['collector'], {
        cwd: elsewhere,
        env: {
          ...env,
          VSOCKDIAG_HTTP: '127.0.0.1:0',
          // The readiness thread too: its bundle must find the packaged dependencies.
          VSOCKDIAG_READINESS_HTTP: '127.0.0.1:0',
          VSOCKDIAG_DATA: path.join(root, 'data'),
          VSOCKDIAG_TOKEN_FILE: tokenFile,
          VSOCKDIAG_LOG_LEVEL: 'debug',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    let stdout = '';
    let stderr = '';
    collector.stdout!.on('data', (d) => (stdout += d));
    collector.stderr!.on('data', (d) => (stderr += d));
    await waitForOutput(collector, 'stdout', 'collector listening on', 60_000);
    const url = /listening on (http:\/\/\S+) /.exec(stdout)![1]!;
    const readinessUrl = /; readiness: (http:\/\/[^)\s]+)\)/.exec(stdout)![1]!;
    expect(fs.existsSync(path.join(root, 'data'))).toBe(true);

    // The SQLite addon in use is the packaged one.
    const maps = fs.readFileSync(`/proc/${collector.pid}/maps`, 'utf8');
    const addon = maps.split('\n').find((l) => l.endsWith('better_sqlite3.node'));
    expect(addon).toContain(path.join(prefix, 'lib/node_modules/vsockdiag/node_modules/better-sqlite3/'));

    const cli = (args: string[]) =>
      run(bin, args, { cwd: elsewhere, env: { ...env, VSOCKDIAG_URL: url, VSOCKDIAG_TOKEN_FILE: tokenFile }, timeout: 60_000 });
    const uds = path.join(root, 'v.sock');
    expect((await cli(['register', 'sb1', '--uds', uds])).stdout).toContain('registered sb1');
    const probe = new ProbeClient({ path: `${uds}_52000`, heartbeatMs: 1000 });
    await probe.connect();
    try {
      await probe.waitAcked(probe.events([{ kind: 'phase', name: 'from-the-installed-package' }]), 15_000);
      const auth = { authorization: `Bearer ${TOKEN}` };
      const detail = await waitFor('the probe to be connected', async () => {
        const r = await fetch(`${url}/v1/sandboxes/sb1`, { headers: auth });
        const body = (await r.json()) as { connected: boolean; phases: Array<{ name?: string }> };
        return r.status === 200 && body.connected ? body : null;
      });
      expect(detail.phases.map((p) => p.name)).toContain('from-the-installed-package');
      const readiness = await fetch(`${readinessUrl}/v1/sandboxes/sb1/readiness`, { headers: auth });
      expect(readiness.status).toBe(503);
      expect(await readiness.json()).toMatchObject({ ready: false, state: 'booting', session: 1 });
      const anonymous = await fetch(`${url}/v1/sandboxes/sb1`);
      expect(anonymous.status).toBe(401);
      await anonymous.arrayBuffer();
      const status = JSON.parse((await cli(['status', 'sb1', '--json'])).stdout) as { id: string; connected: boolean };
      expect(status).toMatchObject({ id: 'sb1', connected: true });
      // A token on the command line beats the file named in the environment.
      await expect(cli(['ls', '--token', 'wrong'])).rejects.toMatchObject({
        stderr: expect.stringContaining('UNAUTHORIZED'),
      });

      const page = await fetch(`${url}/`);
      expect(page.status).toBe(200);
      const html = await page.text();
      const asset = /(?:src|href)="(\/assets\/[^"]+)"/.exec(html)?.[1];
      expect(asset, html).toBeDefined();
      // Read to the end: a response left unread holds the collector's shutdown.
      const script = await fetch(`${url}${asset}`);
      expect(script.status).toBe(200);
      expect((await script.arrayBuffer()).byteLength).toBeGreaterThan(1000);
    } finally {
      probe.close();
    }

    const exited = new Promise<number | null>((r) => collector.once('exit', (code) => r(code)));
    collector.kill('SIGTERM');
    expect(await exited).toBe(0);
    const lines = stderr.split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThan(3);
    for (const line of lines) {
      const record = JSON.parse(line) as { level: unknown };
      expect(LEVELS.has(record.level as string), line).toBe(true);
    }
  });
});

describe('deploy/host', () => {
  it.skipIf(!has('systemd-analyze'))('the systemd unit verifies against the installed binary, hardened', async () => {
    const unit = fs
      .readFileSync(path.join(ROOT, 'deploy/host/systemd/vsockdiag-collector.service'), 'utf8')
      .replaceAll('/usr/local/bin/vsockdiag', bin);
    expect(unit).toContain(`ExecStart=${bin} collector `);
    expect(unit).toMatch(/ --discover '\/run\/fc\/\*\/v\.sock' /);
    expect(unit).toContain('--token-file %d/token');
    const file = path.join(root, 'vsockdiag-collector.service');
    fs.writeFileSync(file, unit);
    // Unknown keys are only warned about (exit 0): any output fails the check.
    const verify = spawnSync('systemd-analyze', ['verify', '--man=no', file], { encoding: 'utf8', timeout: 60_000 });
    expect(verify.status, verify.stderr).toBe(0);
    expect(`${verify.stdout}${verify.stderr}`.trim()).toBe('');
    // systemd's own exposure score (0–100 here, 1.x shown): at most "OK" (under 2.5).
    const security = spawnSync('systemd-analyze', ['security', '--offline=yes', '--threshold=25', file], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(security.status, security.stdout).toBe(0);
  });

  it.skipIf(!has('terraform'))('the Nomad job is well-formed HCL (terraform fmt parses it; Nomad itself is not here)', () => {
    const job = fs.readFileSync(path.join(ROOT, 'deploy/host/nomad/vsockdiag.nomad.hcl'), 'utf8');
    expect(job).toMatch(/type\s+= "system"/);
    expect(job).toContain('"--discover", "/run/fc/*/v.sock"');
    expect(job).toMatch(/"--token-file", "\$\{NOMAD_SECRETS_DIR\}\/token"/);
    const dir = path.join(root, 'hcl');
    fs.mkdirSync(dir);
    // terraform fmt reads only .tf files; -check fails on a syntax error or a layout it would change.
    fs.writeFileSync(path.join(dir, 'job.tf'), job);
    const fmt = spawnSync('terraform', ['fmt', '-check', '-diff', '-no-color', path.join(dir, 'job.tf')], {
      encoding: 'utf8',
      env: { ...process.env, TF_CLI_CONFIG_FILE: '/dev/null' },
      timeout: 60_000,
    });
    expect(fmt.status, `${fmt.stdout}${fmt.stderr}`).toBe(0);
  });
});
