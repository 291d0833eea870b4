// The dashboard in a real browser (Debian's headless Chromium via playwright-core), against
// a real collector with simulated sandboxes. Screenshots go to test/results/screenshots/.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, startCollector, waitForState, type CollectorProcess } from '../harness/collector.js';
import { browserAvailable, launchBrowser } from '../harness/browser.js';
import { DUMP_CHUNK_BYTES, type CollectorMessage } from '@vsockdiag/proto';
import { ProbeClient } from '../harness/probe-client.js';
import { waitFor } from '../support/wait.js';
import { startSandbox, type Sandbox } from '../harness/sandbox.js';

const SHOTS = path.join(ROOT, 'test/results/screenshots');
const XSS = '<img src=x onerror="window.__xss=1">';
let collector: CollectorProcess;
let root: string;
let browser: Browser;
let closeBrowser: () => Promise<void>;
const sandboxes: Sandbox[] = [];
/** What the collector's Content-Security-Policy blocked on any page: must stay empty. */
const cspViolations: string[] = [];

async function sandbox(id: string, envd: string[], probeArgs: string[] = []): Promise<Sandbox> {
  const sb = await startSandbox({ id, root, envd, probeArgs });
  sandboxes.push(sb);
  await collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: sb.udsPath });
  return sb;
}

async function page(): Promise<Page> {
  const p = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  p.on('dialog', (d) => void d.accept());
  p.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
  });
  return p;
}

describe.skipIf(!browserAvailable())('dashboard in a browser', () => {
  beforeAll(async () => {
    fs.mkdirSync(SHOTS, { recursive: true });
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
    collector = await startCollector({ args: ['--stall-after', '1500ms'] });
    ({ browser, close: closeBrowser } = await launchBrowser());
    await sandbox('healthy', []);
    await sandbox(
      'hung',
      ['-hang-in', 'cgroup-manager', '-pprof', '127.0.0.1:6060'],
      ['--pprof-url', 'http://127.0.0.1:6060/debug/pprof/goroutine?debug=2'],
    );
    await waitForState(collector, 'hung', 'stuck');
    await waitForState(collector, 'healthy', 'ready');
  }, 120_000);

  afterAll(async () => {
    // Every page of every test ran under the collector's CSP (script-src 'self', no framing).
    expect(cspViolations).toEqual([]);
    await closeBrowser?.();
    await Promise.all(sandboxes.map((s) => s.stop()));
    await collector?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('shows a stuck sandbox with its reason, trouble first', async () => {
    const p = await page();
    await p.goto(`${collector.url}/`);
    const row = p.locator('[data-testid="sandbox-row"][data-id="hung"]');
    await row.waitFor({ timeout: 10_000 });
    expect(await row.getAttribute('data-state')).toBe('stuck');
    expect(await row.locator('[data-testid="reason"]').innerText()).toContain('last phase cgroup-manager');
    const ids = await p.locator('[data-testid="sandbox-row"]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id')));
    expect(ids.indexOf('hung')).toBeLessThan(ids.indexOf('healthy'));
    await p.screenshot({ path: path.join(SHOTS, 'fleet.png') });
    await p.close();
  });

  it('captures a dump with a click and shows the frame envd is blocked in', async () => {
    const p = await page();
    await p.goto(`${collector.url}/sandboxes/hung`);
    await p.locator('[data-testid="dump-mode"]').selectOption('goroutines');
    await p.locator('[data-testid="capture-dump"]').click();
    const blocked = p.locator('[data-testid="dump-viewer"] [data-testid="blocked-in"]').first();
    await blocked.waitFor({ timeout: 30_000 });
    expect(await blocked.innerText()).toContain('main.(*cgroupManager).acquireRoot');
    await p.screenshot({ path: path.join(SHOTS, 'sandbox.png'), fullPage: true });
    // The same goroutines by creator, and back.
    const viewer = p.locator('[data-testid="dump-viewer"]');
    await viewer.locator('[data-testid="view-by-creator"]').click();
    const creators = viewer.locator('[data-testid="creator-group"]');
    await creators.first().waitFor({ timeout: 10_000 });
    const names = await viewer.locator('[data-testid="creator"]').allInnerTexts();
    expect(names.some((n) => n.includes('no creator'))).toBe(true); // the main goroutine
    expect(names.some((n) => n.includes('net/http.'))).toBe(true); // the pprof server's own
    const counts = await creators.evaluateAll((rows) => rows.map((r) => Number(r.children[1]?.textContent)));
    expect(counts.reduce((a, b) => a + b, 0)).toBeGreaterThan(1);
    expect(await viewer.locator('[data-testid="goroutine-groups"]').count()).toBe(0);
    await p.screenshot({ path: path.join(SHOTS, 'sandbox-by-creator.png'), fullPage: true });
    await viewer.locator('[data-testid="view-by-stack"]').click();
    await viewer.locator('[data-testid="goroutine-groups"]').waitFor({ timeout: 10_000 });
    // The destructive dump asks first, with the focus on Cancel: Enter must not kill envd.
    await p.locator('[data-testid="dump-destructive"]').check();
    await p.locator('[data-testid="capture-dump"]').click();
    await p.locator('[data-testid="confirm-destructive"]').waitFor({ timeout: 10_000 });
    expect(await p.evaluate(() => document.activeElement?.getAttribute('data-testid'))).toBe('confirm-destructive-cancel');
    await p.keyboard.press('Enter');
    expect(await p.locator('[data-testid="confirm-destructive"]').count()).toBe(0);
    await p.close();
  });

  it('shows a Go 1.27 dump: labels, the leaked flag, and a header it did not understand', async () => {
    // A simulated probe answers the dump with text as Go 1.27 prints it under SIGQUIT.
    await collector.api('PUT', '/v1/sandboxes/go127', { udsPath: path.join(root, 'go127.sock') });
    const probe = new ProbeClient({ path: path.join(root, 'go127.sock_52000'), heartbeatMs: 1000 });
    await probe.connect();
    try {
      const text = [
        'SIGQUIT: quit',
        '',
        'goroutine 1 gp=0xc000002380 m=nil [sync.Mutex.Lock, 2 minutes]:',
        'main.(*cgroupManager).acquireRoot(0xc0000a6000)',
        '\t/src/envd/phases.go:252 +0x33',
        '',
        ...[18, 19, 20].flatMap((id) => [
          `goroutine ${id} gp=0xc0001${id}00 m=nil [chan receive (leaked)] {route: "POST /init", tag: "${XSS.replaceAll('"', '\\"')}"}:`,
          'main.(*handler).init(0xc0001a6000)',
          '\t/src/envd/init.go:61 +0x1d2',
          'created by net/http.(*Server).Serve in goroutine 12',
          '\t/usr/local/go/src/net/http/server.go:3360 +0x485',
          '',
        ]),
        'goroutine 21 gp=0xc000102380 m=nil [select] {route: "never closed}:',
        'main.(*handler).init(0xc0001a6000)',
        '\t/src/envd/init.go:61 +0x1d2',
        'created by net/http.(*Server).Serve in goroutine 12',
        '\t/usr/local/go/src/net/http/server.go:3360 +0x485',
        '',
      ].join('\n');
      const bytes = Buffer.from(text);
      const made = collector.api('POST', '/v1/sandboxes/go127/dumps', { mode: 'goroutines' });
      const isCommand = (m: CollectorMessage): m is Extract<CollectorMessage, { type: 'command' }> => m.type === 'command';
      await waitFor('the dump command', () => probe.received.some(isCommand), { timeoutMs: 10_000 });
      const id = probe.received.filter(isCommand)[0]!.id;
      probe.send({ type: 'dump.chunk', id, index: 0, data: bytes.subarray(0, DUMP_CHUNK_BYTES) });
      probe.send({
        type: 'result',
        id,
        ok: true,
        dump: { mode: 'goroutines', source: 'sigquit', complete: true, bytes: bytes.length, chunks: 1 },
      });
      expect((await made).status).toBe(201);

      const p = await page();
      await p.goto(`${collector.url}/sandboxes/go127`);
      const viewer = p.locator('[data-testid="dump-viewer"]');
      const note = viewer.locator('[data-testid="dump-unparsed"]');
      await note.waitFor({ timeout: 10_000 });
      expect(await note.getAttribute('data-count')).toBe('1');
      expect(await note.innerText()).toContain('line 25');
      const leaked = viewer.locator('[data-testid="goroutine-group"]', { has: p.locator('[data-testid="flag-leaked"]') });
      expect(await leaked.count()).toBe(1);
      expect(await leaked.locator('td').nth(1).innerText()).toBe('3');
      const labels = await leaked.locator('[data-testid="group-labels"]').innerText();
      expect(labels).toContain('route: "POST /init"');
      expect(labels).toContain(JSON.stringify(XSS)); // as text, quoted as Go quotes it
      expect(await viewer.locator('[data-testid="flag-unparsed"]').count()).toBe(1);
      await leaked.locator('[data-testid="expand-stack"]').click();
      expect(await viewer.locator('[data-testid="label-sets"]').innerText()).toContain('route: "POST /init"');
      await p.screenshot({ path: path.join(SHOTS, 'dump-go127.png'), fullPage: true });
      // By creator, the leaked handlers and the one whose header was not understood are one row.
      await viewer.locator('[data-testid="view-by-creator"]').click();
      const serve = viewer.locator('[data-testid="creator-group"]', { hasText: 'net/http.(*Server).Serve' });
      await serve.waitFor({ timeout: 10_000 });
      expect(await serve.locator('td').nth(1).innerText()).toBe('4');
      expect(await serve.locator('[data-testid="creator-states"]').innerText()).toMatch(/3 chan receive \(leaked\)\s*1 \?/);
      expect(await p.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined();
      expect(await p.locator('img[src="x"]').count()).toBe(0);
      await p.screenshot({ path: path.join(SHOTS, 'dump-go127-by-creator.png'), fullPage: true });
      await p.close();
    } finally {
      probe.close();
    }
  });

  it('shows a state change without a reload', async () => {
    const p = await page();
    await p.goto(`${collector.url}/`);
    await sandbox('latecomer', ['-slow', '300ms']);
    const row = p.locator('[data-testid="sandbox-row"][data-id="latecomer"]');
    await row.waitFor({ timeout: 10_000 });
    await p.waitForFunction(
      () => document.querySelector('[data-testid="sandbox-row"][data-id="latecomer"]')?.getAttribute('data-state') === 'ready',
      undefined,
      { timeout: 20_000 },
    );
    await p.close();
  });

  it('opens a sandbox with a long history on what happened last', async () => {
    // A light probe with 2,400 log batches behind it: more than two pages of the events API.
    await collector.api('PUT', '/v1/sandboxes/longlived', { udsPath: path.join(root, 'longlived.sock') });
    const probe = new ProbeClient({ path: path.join(root, 'longlived.sock_52000'), heartbeatMs: 1000 });
    await probe.connect();
    try {
      let last = 0;
      for (let b = 0; b < 12; b++) {
        last = probe.events(
          Array.from({ length: 200 }, (_, i) => ({
            kind: 'log.lines' as const,
            stream: 'stderr' as const,
            lines: [`line ${b * 200 + i}`],
          })),
        );
      }
      await probe.waitAcked(last, 20_000);
      const p = await page();
      const asked: string[] = [];
      p.on('request', (r) => {
        if (r.url().includes('/events?')) asked.push(r.url());
      });
      await p.goto(`${collector.url}/sandboxes/longlived`);
      const lines = p.locator('[data-testid="log-line"]');
      await lines.last().waitFor({ timeout: 10_000 });
      await p.waitForFunction(() => document.querySelectorAll('[data-testid="log-line"]').length > 0);
      expect(await lines.last().innerText()).toContain('line 2399');
      // History is read newest first, one request per kind shown, not page by page from its
      // start. (A catch-up after the live stream connects reads forward from the newest id.)
      const history = asked.filter((u) => u.includes('kind='));
      expect(history.length).toBeGreaterThan(0);
      expect(history.every((u) => u.includes('order=desc'))).toBe(true);
      expect(history.filter((u) => u.includes('kind=log.lines'))).toHaveLength(1);
      await p.close();
    } finally {
      probe.close();
    }
  });

  it('shows events as the stream brings them, while it is live', async () => {
    // The stream's events carry the ids the history lists them by: a page that dropped them
    // (as it once did, for want of an id) would show this line only after a reload.
    await collector.api('PUT', '/v1/sandboxes/streamed', { udsPath: path.join(root, 'streamed.sock') });
    const probe = new ProbeClient({ path: path.join(root, 'streamed.sock_52000'), heartbeatMs: 1000 });
    await probe.connect();
    try {
      await probe.waitAcked(probe.events([{ kind: 'log.lines', stream: 'stderr', lines: ['read from the history'] }]));
      const p = await page();
      await p.goto(`${collector.url}/sandboxes/streamed`);
      // The history is loaded and the stream live: what comes next can only come over the stream.
      await p.waitForFunction(() => document.body.innerText.includes('read from the history'), undefined, { timeout: 10_000 });
      await p.waitForFunction(() => document.querySelector('[data-testid="live-status"]')?.textContent?.includes('live'), undefined, {
        timeout: 10_000,
      });
      probe.events([{ kind: 'log.lines', stream: 'stderr', lines: ['arrived over the stream'] }]);
      await p.waitForFunction(() => document.body.innerText.includes('arrived over the stream'), undefined, { timeout: 10_000 });
      await p.close();
    } finally {
      probe.close();
    }
  });

  it('renders guest-supplied HTML as inert text', async () => {
    const sb = await sandbox('xss', ['-hang-in', 'api', '-no-notify']);
    await waitForState(collector, 'xss', ['starting', 'stuck']);
    sb.notify(`PHASE=${XSS}\nSTATUS=${XSS}`);
    const p = await page();
    await p.goto(`${collector.url}/`);
    await p.locator('[data-testid="sandbox-row"][data-id="xss"]').waitFor();
    await p.waitForFunction((x) => document.body.innerText.includes(x), XSS, { timeout: 10_000 });
    await p.goto(`${collector.url}/sandboxes/xss`);
    await p.waitForFunction((x) => document.body.innerText.includes(x), XSS, { timeout: 10_000 });
    expect(await p.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined();
    expect(await p.locator('img[src="x"]').count()).toBe(0);
    await p.close();
  });

  it('asks once for the API token and keeps it for the session', async () => {
    const secured = await startCollector({ args: ['--token', 'dash-s3cret'] });
    try {
      const context = await browser.newContext();
      const p = await context.newPage();
      await p.goto(`${secured.url}/`);
      await p.locator('[data-testid="token-prompt"]').waitFor({ timeout: 10_000 });
      await p.locator('[data-testid="token-input"]').fill('dash-s3cret');
      await p.locator('[data-testid="token-submit"]').click();
      await p.locator('[data-testid="state-counts"]').waitFor({ timeout: 10_000 });
      await p.waitForFunction(() => document.querySelector('[data-testid="live-status"]')?.textContent?.includes('live'), undefined, {
        timeout: 10_000,
      });
      // A reload in the same session does not ask again.
      await p.reload();
      await p.locator('[data-testid="state-counts"]').waitFor({ timeout: 10_000 });
      expect(await p.locator('[data-testid="token-prompt"]').count()).toBe(0);
      await context.close();
    } finally {
      await secured.stop();
    }
  });
});
