// A guest that answers its dump with hostile text (issue 11, hole 2): megabytes of lines
// shaped to make the dump parsers backtrack, lines over the parsers' cap, invalid UTF-8.
// Before the fix, 110 KB of "goroutine 1 a=[[[…" froze the collector's event loop (/healthz
// took 8.2 s) and cut a well-behaved sandbox off with ERR_IDLE. Now the collector keeps
// answering /healthz promptly and the good sandbox stays connected while such a dump is
// stored, read back and diffed; the dump keeps the bytes that arrived, counted as such; and
// a dump over the analysis time limit is still stored with its text, marked as not analysed.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DUMP_CHUNK_BYTES, type CollectorMessage } from '@vsockdiag/proto';
import { afterEach, describe, expect, it } from 'vitest';
import { startCollector, type CollectorProcess } from '../harness/collector.js';
import { ProbeClient } from '../harness/probe-client.js';
import { waitFor } from '../support/wait.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

/** About 4 MB: a real goroutine, then hostile lines (three just under the 64 Ki cap, one of 1 MB over it) and invalid UTF-8. */
function hostileDump(): Buffer {
  const under = 60_000;
  const lines = [
    `goroutine 1 a=${'['.repeat(under)}`,
    `${'\t'.repeat(under)}x`,
    `\t${'a:1x'.repeat(under / 4)}`,
    `goroutine 2 a=${'['.repeat(1_000_000)}`,
  ];
  const parts = [Buffer.from('goroutine 1 [running]:\nmain.main()\n\t/x/main.go:1 +0x1\n')];
  let size = parts[0]!.length;
  for (let i = 0; size < 4_000_000; i++) {
    const b = Buffer.concat([Buffer.from(`${lines[i % lines.length]}\n`), Buffer.from([0xff, 0xfe, 0xc0, 0x0a])]);
    parts.push(b);
    size += b.length;
  }
  return Buffer.concat(parts);
}

interface Setup {
  collector: CollectorProcess;
  good: ProbeClient;
  evil: ProbeClient;
}

async function setup(args: string[] = []): Promise<Setup> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
  cleanup.push(() => fs.rmSync(root, { recursive: true, force: true }));
  const collector = await startCollector({ args });
  cleanup.push(() => collector.stop());
  const clients: Record<string, ProbeClient> = {};
  for (const id of ['good', 'evil']) {
    fs.mkdirSync(path.join(root, id));
    await collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: path.join(root, id, 'v.sock') });
    const c = new ProbeClient({ path: path.join(root, id, 'v.sock_52000'), heartbeatMs: 1000 });
    cleanup.push(() => c.close());
    await c.connect();
    clients[id] = c;
  }
  return { collector, good: clients.good!, evil: clients.evil! };
}

const commands = (p: ProbeClient) => p.received.filter((m): m is Extract<CollectorMessage, { type: 'command' }> => m.type === 'command');

/** Asks for a dump of "evil" and answers it with `bytes`, in chunks as a probe sends them; resolves with the API's answer. */
async function hostileAnswer(s: Setup, bytes: Buffer): Promise<{ status: number; body: any }> {
  const seen = commands(s.evil).length;
  const made = s.collector.api('POST', '/v1/sandboxes/evil/dumps', { mode: 'goroutines' });
  await waitFor('the dump command', () => commands(s.evil).length > seen, { timeoutMs: 10_000 });
  const id = commands(s.evil)[seen]!.id;
  let index = 0;
  for (let at = 0; at < bytes.length; at += DUMP_CHUNK_BYTES) {
    s.evil.send({ type: 'dump.chunk', id, index: index++, data: bytes.subarray(at, at + DUMP_CHUNK_BYTES) });
  }
  s.evil.send({
    type: 'result',
    id,
    ok: true,
    dump: { mode: 'goroutines', source: 'pprof', complete: true, bytes: bytes.length, chunks: index },
  });
  return made;
}

/** Runs `work` while asking /healthz every 50 ms; resolves with its result and the slowest /healthz answer (ms). */
async function whileWatchingHealthz<T>(url: string, work: () => Promise<T>): Promise<{ result: T; worstMs: number }> {
  let done = false;
  let worstMs = 0;
  const watch = (async () => {
    while (!done) {
      const t0 = performance.now();
      const r = await fetch(`${url}/healthz`);
      expect(r.status).toBe(200);
      await r.arrayBuffer();
      worstMs = Math.max(worstMs, performance.now() - t0);
      await new Promise((res) => setTimeout(res, 50));
    }
  })();
  try {
    return { result: await work(), worstMs };
  } finally {
    done = true;
    await watch;
  }
}

// Quadratic parsing of this dump on the main thread would block it for minutes; the bound is
// generous for a loaded 2-core machine.
const PROMPT_MS = 2000;

async function goodStillConnected(s: Setup): Promise<void> {
  expect(s.good.socket?.destroyed).toBe(false);
  await s.good.waitAcked(s.good.events([{ kind: 'phase', name: `alive-${s.good.seq + 1}` }]));
  expect(s.collector.logs()).not.toContain('"code":"ERR_IDLE"');
}

/** The dump answered twice; the second read back (its detail and raw bytes) and diffed, by
 *  default or `against` the first by id. */
async function storedTwice(s: Setup, bytes: Buffer, { against = false } = {}) {
  const first = await hostileAnswer(s, bytes);
  const second = await hostileAnswer(s, bytes);
  const at = `/v1/sandboxes/evil/dumps/${second.body.id}`;
  const detail = await s.collector.api('GET', at);
  const raw = Buffer.from(await (await fetch(`${s.collector.url}${at}/raw`)).arrayBuffer());
  const diff = await s.collector.api('GET', `${at}/diff${against ? `?against=${first.body.id}` : ''}`);
  return { first, second, detail, raw, diff };
}

describe('a hostile dump', () => {
  it('is stored, read back and diffed while /healthz stays prompt and a good sandbox stays connected', async () => {
    const s = await setup();
    const bytes = hostileDump();
    const { result, worstMs } = await whileWatchingHealthz(s.collector.url, () => storedTwice(s, bytes));
    console.log(
      `two ${(bytes.length / 1e6).toFixed(1)} MB hostile dumps stored, read and diffed; slowest /healthz ${worstMs.toFixed(0)} ms`,
    );
    expect(worstMs).toBeLessThan(PROMPT_MS);
    await goodStillConnected(s);

    const { first, second, detail, raw, diff } = result;
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    expect(second.status, JSON.stringify(second.body)).toBe(201);
    // The bytes that arrived, counted and kept as they were (not re-encoded U+FFFD).
    expect(second.body.bytes).toBe(bytes.length);
    expect(raw.equals(bytes)).toBe(true);
    expect(detail.body).toMatchObject({ kind: 'goroutines', complete: true, note: null });
    expect(detail.body.longLines).toBeGreaterThan(0);
    expect(detail.body.goroutineGroups.length).toBeGreaterThan(0);
    expect(diff.status, JSON.stringify(diff.body)).toBe(200);
    expect(diff.body).toMatchObject({ older: first.body.id, newer: second.body.id, kind: 'goroutines' });
  });

  it('over the analysis time limit is stored with its text, not analysed; its diff fails with ANALYSIS_TIMEOUT', async () => {
    const s = await setup(['--dump-analysis-limit', '1ms']);
    const bytes = hostileDump();
    const { result, worstMs } = await whileWatchingHealthz(s.collector.url, () => storedTwice(s, bytes, { against: true }));
    expect(worstMs).toBeLessThan(PROMPT_MS);
    await goodStillConnected(s);

    const { second, detail, raw, diff } = result;
    expect(second.status, JSON.stringify(second.body)).toBe(201);
    expect(second.body).toMatchObject({
      kind: 'unknown',
      top: null,
      bytes: bytes.length,
      note: 'not analysed: the analysis took longer than 1ms',
    });
    expect(detail.body.text).toBe(bytes.toString('utf8'));
    expect(raw.equals(bytes)).toBe(true);
    expect(diff.status).toBe(504);
    expect(diff.body.error).toEqual({ code: 'ANALYSIS_TIMEOUT', message: 'the diff took longer than 1ms' });
    expect(s.collector.logs()).toContain('dump worker over its time limit');
  });
});
