// Access: who may reach the collector and what a guest's strings can do in a browser. Each
// check runs against a real collector (the built CLI) and is a row of its own.
//
//   - the API beyond loopback without --token: the collector refuses to start;
//   - with a token: 401 without it or with a wrong one, on reads and on dump commands
//     alike; /healthz stays open;
//   - no CORS headers by default, on a request with an Origin and on a preflight;
//   - the data folder 0700, the database and the vsock socket 0600;
//   - guest strings carrying XSS payloads (target name, phase, status, notice, log line,
//     dump text, a `javascript:` URL) stay inert in a real browser (headless Chromium).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { initialStatus, type CollectorMessage } from '@vsockdiag/proto';
import { browserAvailable, launchBrowser } from '../harness/browser.js';
import { startCollector, waitForState } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';
import type { ReliabilityRow, Scenario } from './row.js';

const AREA = 'access';
const COMMAND = 'node test/run-ts.mjs test/reliability/run.ts access';
const XSS = '<img src=x onerror="window.__xss=1">';
const JS_URL = 'javascript:window.__xss=2';

type Check = { scenario: string; run: () => Promise<{ figure: string; held: boolean }> };

async function refusesBeyondLoopback() {
  try {
    const c = await startCollector({ args: ['--http', '0.0.0.0:0'] });
    await c.stop();
    return { figure: 'the collector STARTED on 0.0.0.0 without a token', held: false };
  } catch (err) {
    const said = /without --token/.test(String(err));
    return { figure: `refused to start${said ? ', saying it needs --token' : ` (${String(err).slice(0, 120)})`}`, held: said };
  }
}

async function withToken<T>(fn: (url: string, token: string) => Promise<T>): Promise<T> {
  const token = 'rel-access-s3cret';
  const c = await startCollector({ args: ['--token', token] });
  try {
    return await fn(c.url, token);
  } finally {
    await c.stop();
  }
}

const status = async (url: string, init: RequestInit = {}) => (await fetch(url, init)).status;

async function needsToken() {
  return withToken(async (url, token) => {
    const got = {
      none: await status(`${url}/v1/sandboxes`),
      wrong: await status(`${url}/v1/sandboxes`, { headers: { authorization: 'Bearer nope' } }),
      right: await status(`${url}/v1/sandboxes`, { headers: { authorization: `Bearer ${token}` } }),
      dumpNone: await status(`${url}/v1/sandboxes/x/dumps`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      }),
      dumpWrong: await status(`${url}/v1/sandboxes/x/dumps`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer nope' },
        body: '{}',
      }),
      registerNone: await status(`${url}/v1/sandboxes/x`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: '{"udsPath":"/tmp/x"}',
      }),
      healthz: await status(`${url}/healthz`),
    };
    const held =
      got.none === 401 &&
      got.wrong === 401 &&
      got.right === 200 &&
      got.dumpNone === 401 &&
      got.dumpWrong === 401 &&
      got.registerNone === 401 &&
      got.healthz === 200;
    return {
      figure: `GET /v1/sandboxes: ${got.none} without, ${got.wrong} wrong, ${got.right} right token; POST …/dumps: ${got.dumpNone} without, ${got.dumpWrong} wrong; PUT: ${got.registerNone} without; /healthz ${got.healthz}`,
      held,
    };
  });
}

async function noCors() {
  const c = await startCollector();
  try {
    const origin = { origin: 'http://evil.example' };
    const get = await fetch(`${c.url}/v1/sandboxes`, { headers: origin });
    const pre = await fetch(`${c.url}/v1/sandboxes/x/dumps`, {
      method: 'OPTIONS',
      headers: { ...origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    const cors = [...get.headers.keys(), ...pre.headers.keys()].filter((h) => h.startsWith('access-control-'));
    return {
      figure: `GET with a foreign Origin: ${get.status}, preflight: ${pre.status}; access-control-* headers: ${cors.length ? cors.join(', ') : 'none'}`,
      held: cors.length === 0,
    };
  } finally {
    await c.stop();
  }
}

async function restrictiveFiles() {
  const c = await startCollector();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-acc-'));
  try {
    await c.api('PUT', '/v1/sandboxes/perm', { udsPath: path.join(root, 'v.sock') });
    const mode = (p: string) => (fs.statSync(p).mode & 0o777).toString(8).padStart(4, '0');
    const db = fs.readdirSync(c.dataDir).find((f) => /\.(db|sqlite)$/.test(f));
    const got = {
      data: mode(c.dataDir),
      db: db ? mode(path.join(c.dataDir, db)) : 'missing',
      socket: mode(path.join(root, 'v.sock_52000')),
    };
    return {
      figure: `data folder ${got.data}, database ${got.db}, vsock socket ${got.socket}`,
      held: got.data === '0700' && got.db === '0600' && got.socket === '0600',
    };
  } finally {
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

async function inertInBrowser() {
  if (!browserAvailable()) return { figure: 'no Chromium on this machine: not tried', held: false };
  const c = await startCollector({ args: ['--stall-after', '1s'] });
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-xss-'));
  const { browser, close } = await launchBrowser();
  let probe: ProbeClient | null = null;
  try {
    await c.api('PUT', '/v1/sandboxes/xss', { udsPath: path.join(root, 'v.sock') });
    const text = `goroutine 1 [${XSS}]:\nmain.${XSS}()\n\t/src/${JS_URL}:1 +0x1\n`;
    probe = new ProbeClient({
      path: path.join(root, 'v.sock_52000'),
      heartbeatMs: 1000,
      status: { ...initialStatus(49983), target: { pid: 100, name: XSS.slice(0, 40), startedAt: 1, source: 'name', alive: true } },
      onMessage: (m: CollectorMessage, client) => {
        if (m.type !== 'command' || m.op !== 'dump') return;
        const data = Buffer.from(text);
        client.send({ type: 'dump.chunk', id: m.id, index: 0, data });
        client.send({
          type: 'result',
          id: m.id,
          ok: true,
          dump: { mode: m.mode ?? 'threads', source: 'pprof', complete: true, bytes: data.length, chunks: 1, note: XSS },
        });
      },
    });
    await probe.connect();
    probe.events([
      { kind: 'phase', source: 'notify', name: XSS, status: JS_URL },
      { kind: 'probe.notice', level: 'warn', message: `${XSS} ${JS_URL}` },
      { kind: 'log.lines', stream: 'stdout', lines: [XSS, JS_URL] },
    ]);
    await waitForState(c, 'xss', 'stuck', 30_000);
    const dump = await c.api('POST', '/v1/sandboxes/xss/dumps', { mode: 'goroutines' });
    const p = await browser.newPage();
    let dialogs = 0;
    p.on('dialog', (d) => {
      dialogs++;
      void d.dismiss();
    });
    await p.goto(`${c.url}/`);
    await p.waitForFunction((x) => document.body.innerText.includes(x), XSS.slice(0, 40), { timeout: 15_000 });
    await p.goto(`${c.url}/sandboxes/xss`);
    await p.waitForFunction((x) => document.body.innerText.includes(x), XSS, { timeout: 15_000 });
    const item = p.locator('[data-testid="dump-item"]').first();
    await item.waitFor({ timeout: 15_000 });
    await item.click();
    await p.locator('[data-testid="dump-viewer"]').waitFor({ timeout: 15_000 });
    await p.waitForFunction((x) => document.querySelector('[data-testid="dump-viewer"]')?.textContent?.includes(x), XSS, {
      timeout: 15_000,
    });
    // Click every link there is: a javascript: URL would run now.
    for (const a of await p.locator('a').all()) {
      const href = await a.getAttribute('href');
      if (href?.startsWith('javascript:')) await a.click({ timeout: 2000 }).catch(() => {});
    }
    const ran = await p.evaluate(() => (window as unknown as { __xss?: number }).__xss);
    const imgs = await p.locator('img[src="x"]').count();
    const jsLinks = await p.locator('a[href^="javascript:"]').count();
    await p.close();
    const held = dump.status === 201 && ran === undefined && imgs === 0 && jsLinks === 0 && dialogs === 0;
    return {
      figure: `payloads in the target name, phase, status, notice, log lines, dump text and note shown as text on the fleet, sandbox and dump pages; script ran: ${ran === undefined ? 'no' : 'YES'}, <img src=x>: ${imgs}, javascript: links: ${jsLinks}, dialogs: ${dialogs}`,
      held,
    };
  } finally {
    probe?.close();
    await close();
    await c.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

const CHECKS: Check[] = [
  { scenario: 'API beyond loopback without --token', run: refusesBeyondLoopback },
  { scenario: 'API with --token: reads, registrations and dump commands without it', run: needsToken },
  { scenario: 'CORS by default (foreign Origin, preflight)', run: noCors },
  { scenario: 'permissions of the data folder, database and vsock socket', run: restrictiveFiles },
  { scenario: 'XSS payloads in guest strings, in headless Chromium', run: inertInBrowser },
];

export const run: Scenario = async ({ log }) => {
  const rows: ReliabilityRow[] = [];
  for (const check of CHECKS) {
    let result: { figure: string; held: boolean };
    try {
      result = await check.run();
    } catch (err) {
      result = { figure: `failed: ${String(err).slice(0, 300)}`, held: false };
    }
    log(`access: ${check.scenario}: ${result.held ? 'held' : 'NOT HELD'}: ${result.figure}`);
    rows.push({ area: AREA, scenario: check.scenario, ...result, command: COMMAND });
  }
  return rows;
};
