// The integrations as an operator turns them on: the built collector process with
// --webhook, --webhook-secret-file (a key file ending in a newline, as editors leave it),
// --otlp-endpoint and --metrics-per-sandbox, one sandbox whose envd exited, and one local
// receiver for the webhook and OTLP/HTTP. The notice is signed with the file's key, the boot
// is exported as a span and a log record, and the scrape passes promtool.

import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startCollector, type CollectorProcess } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';
import { waitFor } from '../support/wait.js';

let tmp = '';
let collector: CollectorProcess | null = null;
let receiver: http.Server | null = null;
let probe: ProbeClient | null = null;

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-integrations-'));
});
afterEach(async () => {
  probe?.close();
  await collector?.stop();
  receiver?.closeAllConnections();
  await new Promise((r) => (receiver ? receiver.close(r) : r(null)));
  collector = null;
  receiver = null;
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('integrations of the collector process', () => {
  it('--webhook with a secret file, --otlp-endpoint and --metrics-per-sandbox', async () => {
    const got: { url: string; headers: http.IncomingHttpHeaders; body: string }[] = [];
    receiver = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        got.push({ url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => receiver!.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(receiver.address() as net.AddressInfo).port}`;
    const keyFile = path.join(tmp, 'webhook.key');
    fs.writeFileSync(keyFile, 'integration-key\n', { mode: 0o600 });

    collector = await startCollector({
      args: ['--webhook', `${base}/hook`, '--webhook-secret-file', keyFile, '--otlp-endpoint', base, '--metrics-per-sandbox'],
    });
    const udsPath = path.join(tmp, 'vm.sock');
    expect((await collector.api('PUT', '/v1/sandboxes/crash-1', { udsPath })).status).toBe(201);
    probe = new ProbeClient({
      path: `${udsPath}_52000`,
      status: {
        target: { pid: 7, name: 'envd', source: 'name', startedAt: 10, alive: false, exitCode: 1 },
        listener: { port: 49983, bound: false },
        phases: { reported: false, ready: false },
      },
    });
    await probe.connect();

    const hook = await waitFor('the webhook', () => got.find((g) => g.url === '/hook'));
    const expected = `sha256=${crypto.createHmac('sha256', 'integration-key').update(hook.body).digest('hex')}`;
    expect(hook.headers['x-vsockdiag-signature-256']).toBe(expected);
    expect(JSON.parse(hook.body)).toMatchObject({
      id: 'crash-1',
      state: 'exited',
      links: { api: `${collector.url}/v1/sandboxes/crash-1` },
    });

    const spans = await waitFor('the boot span', () => {
      const t = got.find((g) => g.url === '/v1/traces' && g.body.includes('"boot"'));
      return t ? JSON.parse(t.body).resourceSpans.flatMap((r: any) => r.scopeSpans.flatMap((s: any) => s.spans)) : null;
    });
    expect(spans.find((s: any) => s.name === 'boot').status.code).toBe(2);
    await waitFor('the log record', () => got.some((g) => g.url === '/v1/logs' && g.body.includes('crash-1: ')));

    const text = await (await fetch(`${collector.url}/metrics`)).text();
    expect(text).toContain('vsockdiag_sandbox_state{sandbox="crash-1",state="exited"} 1');
    expect(text).toMatch(/^vsockdiag_webhook_deliveries_total\{outcome="delivered"\} 1$/m);
    const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect(`${lint.stdout}${lint.stderr}`.trim()).toBe('');
  });
});
