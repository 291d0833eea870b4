// The Go client (clients/go) against a real collector process: `go vet` over the client and
// its example, then the client's own `go test`, whose collector test this file serves. The
// sandbox is played here with the real protocol: once the Go test has registered it, a probe
// connects reporting envd alive and not listening (readiness answers 503 with a reason), and
// when the Go test asks for a dump the probe answers it and reports the listener bound
// (readiness turns 200). Go builds offline, with its caches under test/.build.

import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { DEFAULTS, type CollectorMessage } from '@vsockdiag/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, startCollector, type CollectorProcess } from '../harness/collector.js';
import { ProbeClient, answerThreadsDump } from '../harness/probe-client.js';
import { waitFor } from '../support/wait.js';

const run = promisify(execFile);
const CLIENT_DIR = path.join(ROOT, 'clients/go');
const TOKEN = 'go-client-s3cret';
const ID = 'go-client-vm';

/** Go's environment: no network, no toolchain download, caches in test/.build (root on a fresh machine has no usable $HOME cache). */
function goEnv(): NodeJS.ProcessEnv {
  const cache = path.join(ROOT, 'test/.build/go');
  fs.mkdirSync(cache, { recursive: true });
  return {
    ...process.env,
    GOTOOLCHAIN: 'local',
    GOPROXY: 'off',
    GOFLAGS: '',
    CGO_ENABLED: '0',
    GOCACHE: path.join(cache, 'cache'),
    GOPATH: path.join(cache, 'gopath'),
  };
}

async function go(args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  try {
    const { stdout, stderr } = await run(process.env.GO || 'go', args, {
      cwd: CLIENT_DIR,
      env: { ...goEnv(), ...env },
      timeout: 240_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    return stdout + stderr;
  } catch (err) {
    const e = err as Error & { stdout?: string; stderr?: string };
    throw new Error(`go ${args.join(' ')} failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}

let collector: CollectorProcess;
let dir: string;
const probes: ProbeClient[] = [];

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-go-'));
  // The verdict clock slowed down: "starting" must not turn "stuck" while the Go test is slow.
  collector = await startCollector({
    args: ['--token', TOKEN, '--stall-after', '120s', '--start-deadline', '300s', '--readiness-http', '127.0.0.1:0'],
  });
});

afterAll(async () => {
  for (const p of probes) p.socket?.destroy();
  await collector?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('the Go client', () => {
  it('vets clean, with its example', { timeout: 300_000 }, async () => {
    await go(['vet', './...']);
    const out = path.join(dir, 'init-example');
    await go(['build', '-o', out, './example']);
    expect(fs.statSync(out).isFile()).toBe(true);
  });

  it('registers, waits through a 503 to ready, dumps and unregisters against a real collector', { timeout: 300_000 }, async () => {
    const udsPath = path.join(dir, 'vm.sock');
    const authed = { authorization: `Bearer ${TOKEN}` };
    let goDone = false;
    const registered = () =>
      fetch(`${collector.url}/v1/sandboxes/${ID}`, { headers: authed }).then(
        (r) => r.status === 200,
        () => false,
      );

    // The fake sandbox: wakes up when the Go test has registered it (or gives up when it ended).
    const sandbox = (async () => {
      await waitFor('the Go test registering the sandbox', async () => goDone || (await registered()), {
        timeoutMs: 240_000,
        intervalMs: 50,
      });
      if (goDone) return;
      const onMessage = (m: CollectorMessage, c: ProbeClient) => {
        if (!answerThreadsDump(m, c)) return;
        c.events([{ kind: 'listener.bound', port: DEFAULTS.expectPort, address: '0.0.0.0', inode: 7, pid: 42 }]);
      };
      const probe = new ProbeClient({
        path: `${udsPath}_52000`,
        heartbeatMs: 1000,
        onMessage,
        status: {
          target: { pid: 42, name: DEFAULTS.target, startedAt: 500, source: 'name', alive: true },
          listener: { port: DEFAULTS.expectPort, bound: false },
          phases: { reported: false, ready: false },
        },
      });
      probes.push(probe);
      await probe.connect();
    })().then(
      () => null,
      (err: unknown) => err,
    );

    const goTest = go(['test', '-count=1', '-v', '-run', 'TestAgainstACollector|TestTypes', './...'], {
      VSOCKDIAG_TEST_COLLECTOR: collector.url,
      VSOCKDIAG_TEST_READINESS: collector.readinessUrl!,
      VSOCKDIAG_TEST_SANDBOX: ID,
      VSOCKDIAG_TEST_UDS: udsPath,
      VSOCKDIAG_TEST_TOKEN: TOKEN,
    });
    const out = await goTest.catch(async (err: Error) => {
      goDone = true;
      const failed = await sandbox;
      throw failed ? new Error(`${err.message}\nthe fake sandbox failed too: ${String(failed)}`) : err;
    });
    goDone = true;
    const failed = await sandbox;
    if (failed) throw failed;
    expect(out).toMatch(/--- PASS: TestAgainstACollector/);
    expect(out).toMatch(/--- PASS: TestTypesMatchTheOpenAPIDocument/);
    expect(out).not.toMatch(/SKIP/);
  });
});
