// A guest is untrusted, and so is how much it sends: these tests make the attacks on the
// collector's storage and reads through a real session, and check that they cost the guest
// only its own history, never the collector's record of it, nor an operator's dumps.

import path from 'node:path';
import { initialStatus, type CollectorMessage, type EventBody, type Hello } from '@vsockdiag/proto';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { ProbeClient, answerThreadsDump } from '../../test/harness/probe-client.js';
import { waitFor } from '../../test/support/wait.js';
import type { CollectorOptions } from '../src/collector/collector.js';
import { AUTO_DUMP_SETS } from '../src/collector/dump-service.js';
import { MAX_EVENT_DATA_BYTES } from '../src/collector/event-size.js';
import { MAX_EVENTS_RESPONSE_BYTES } from '../src/http/routes/sandboxes.js';
import { inProcessCollectors } from './support/collector.js';
import { REAL_WORKER, bundleWorker } from './support/workers.js';

const MiB = 1024 * 1024;

const collectors = inProcessCollectors('vd-retention-');
const probes: ProbeClient[] = [];

// Registered after the collectors' hooks, so it runs first: probes go before the collector.
afterEach(() => {
  for (const p of probes.splice(0)) p.close();
});

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** A collector with one sandbox, "vm", registered; returns the socket its probe dials. */
async function start(over: Partial<CollectorOptions> = {}): Promise<{ url: string; socket: string }> {
  const { url } = await collectors.start(over);
  const udsPath = path.join(collectors.dir, 'vm.sock');
  const r = await fetch(`${url}/v1/sandboxes/vm`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ udsPath }),
  });
  expect(r.status).toBe(201);
  return { url, socket: `${udsPath}_52000` };
}

async function get(url: string, route: string): Promise<{ json: Json; bytes: number }> {
  const res = await fetch(url + route);
  expect(res.status).toBe(200);
  const text = await res.text();
  return { json: JSON.parse(text) as Json, bytes: Buffer.byteLength(text) };
}

/** Every event matching `query`, paged on `more`. */
async function allEvents(url: string, query = ''): Promise<Json[]> {
  const out: Json[] = [];
  for (let after = 0; ; ) {
    const page = (await get(url, `/v1/sandboxes/vm/events?limit=1000&after=${after}${query}`)).json;
    out.push(...page.events);
    if (!page.more) return out;
    after = page.next;
  }
}

function connectProbe(
  socket: string,
  over: { generation?: number; bootId?: string; status?: Hello['status']; onMessage?: (m: CollectorMessage, c: ProbeClient) => void } = {},
) {
  const p = new ProbeClient({ path: socket, heartbeatMs: 1000, sinceBootMs: () => 10_000 + performance.now(), ...over });
  probes.push(p);
  return p;
}

/** Sends bodies in frames of `perFrame` and waits for the last ack. */
async function send(p: ProbeClient, bodies: EventBody[], perFrame: number): Promise<void> {
  let last = p.seq;
  for (let i = 0; i < bodies.length; i += perFrame) last = p.events(bodies.slice(i, i + perFrame));
  await p.waitAcked(last, 30_000);
}

/** A log batch of about 400 KB, the largest kind a well-behaved probe sends. */
const bigLog = (n: number): EventBody => ({
  kind: 'log.lines',
  stream: 'stderr',
  lines: Array.from({ length: 200 }, (_, i) => `${n}.${i} `.padEnd(2000, 'x')),
});

/** Answers every dump command with a small threads dump, as a probe would. */

describe('a guest flooding the history', () => {
  it('many tiny events never erase the state and dump events', async () => {
    // Retention, not the rate limit, is under test: a budget that lets the 21,504 events in
    // at once (the default would pace them at 1,000/s past a 10,000 burst, by design).
    const { url, socket } = await start({ budget: { burstEvents: 50_000 } });
    const p = connectProbe(socket, { onMessage: answerThreadsDump });
    await p.connect();
    const dump = await fetch(`${url}/v1/sandboxes/vm/dumps`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(dump.status).toBe(201);
    const before = await allEvents(url);
    const collectorKinds = before.filter((e) => e.seq === null).map((e) => e.kind);
    expect(collectorKinds).toEqual(expect.arrayContaining(['session.open', 'state', 'dump']));

    // The attack: 84 full batches of tiny events, past the 20,000 kept.
    await send(
      p,
      Array.from({ length: 21_504 }, () => ({ kind: 'probe.notice', level: 'info', message: '.' })),
      256,
    );

    const after = await allEvents(url);
    expect(after.filter((e) => e.seq === null).map((e) => e.kind)).toEqual(collectorKinds);
    const guest = after.filter((e) => e.seq !== null);
    expect(guest.length).toBeLessThanOrEqual(20_000);
    expect(guest[guest.length - 1]!.seq).toBe(21_504);
  });

  it('big events hit the byte quota: the oldest probe events are pruned by bytes', async () => {
    const { url, socket } = await start({ retention: { sandboxBytes: 2 * MiB } });
    const p = connectProbe(socket);
    await p.connect();
    await send(
      p,
      Array.from({ length: 12 }, (_, i) => bigLog(i)),
      2,
    );
    const events = await allEvents(url);
    const bytes = events.reduce((n, e) => n + Buffer.byteLength(JSON.stringify(e.data)), 0);
    expect(bytes).toBeLessThanOrEqual(2 * MiB);
    const kept = events.filter((e) => e.kind === 'log.lines').map((e) => e.seq);
    // The newest survive, without holes; the collector's own events all do.
    expect(kept.length).toBeGreaterThanOrEqual(3);
    expect(kept).toEqual(Array.from({ length: kept.length }, (_, i) => 12 - kept.length + 1 + i));
    expect(events.filter((e) => e.seq === null).map((e) => e.kind)).toEqual(expect.arrayContaining(['session.open', 'state']));
  });

  it('an oversize event is stored cut and marked, and the session carries on', async () => {
    const { url, socket } = await start();
    const p = connectProbe(socket);
    await p.connect();
    // Within every protocol bound (a 410 KB frame), but \u0001 escapes to six bytes of JSON.
    const lines = Array.from({ length: 200 }, () => '\u0001'.repeat(2048));
    await send(p, [{ kind: 'log.lines', stream: 'stdout', lines }], 1);
    await send(p, [{ kind: 'probe.notice', level: 'info', message: 'still here' }], 1);
    const [stored] = (await get(url, '/v1/sandboxes/vm/events?kind=log.lines')).json.events;
    expect(stored.data.truncated).toMatchObject({ limit: MAX_EVENT_DATA_BYTES, cut: { lines: 200 } });
    expect(stored.data.truncated.bytes).toBeGreaterThan(2 * MiB);
    expect(stored.data.lines.length).toBeGreaterThan(0);
    expect(Buffer.byteLength(JSON.stringify(stored.data))).toBeLessThanOrEqual(MAX_EVENT_DATA_BYTES);
    expect((await get(url, '/v1/sandboxes/vm')).json.connected).toBe(true);
  });
});

describe('reading a history of large events', () => {
  it('events?limit=1000 stays within the byte budget, and paging on `more` returns everything', async () => {
    const { url, socket } = await start();
    const p = connectProbe(socket);
    await p.connect();
    // About 4.9 MB of events: more than one page holds.
    await send(
      p,
      Array.from({ length: 12 }, (_, i) => bigLog(i)),
      2,
    );

    const first = await get(url, '/v1/sandboxes/vm/events?limit=1000');
    expect(first.bytes).toBeLessThanOrEqual(MAX_EVENTS_RESPONSE_BYTES);
    expect(first.json.more).toBe(true);
    expect(first.json.next).toBe(first.json.events[first.json.events.length - 1].id);

    const all = await allEvents(url);
    expect(first.json.events.length).toBeLessThan(all.length);
    expect(all.filter((e) => e.kind === 'log.lines').map((e) => e.seq)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    const ids = all.map((e) => e.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);

    // Newest first, paged back on `before`: the same events, in reverse, each page in budget.
    const back: number[] = [];
    for (let before = ''; ; ) {
      const page = await get(url, `/v1/sandboxes/vm/events?order=desc&limit=1000${before}`);
      expect(page.bytes).toBeLessThanOrEqual(MAX_EVENTS_RESPONSE_BYTES);
      back.push(...page.json.events.map((e: Json) => e.id));
      if (!page.json.more) break;
      before = `&before=${page.json.next}`;
    }
    expect(back).toEqual([...ids].reverse());
  });

  it("a sandbox's detail lists its phases within a byte budget, and says when there are more", async () => {
    const { url, socket } = await start();
    const p = connectProbe(socket, {
      status: { ...initialStatus(49983), target: { pid: 42, name: 'envd', startedAt: 1000, source: 'name', alive: true } },
    });
    await p.connect();
    // Eight phase markers of 260 KB each: every field at its bound.
    const fields = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'v'.repeat(4096)]));
    await send(
      p,
      Array.from({ length: 8 }, (_, i) => ({ kind: 'phase', name: `p${i}`, fields })),
      1,
    );
    const d = await get(url, '/v1/sandboxes/vm');
    expect(d.bytes).toBeLessThan(1.5 * MiB);
    expect(d.json.morePhases).toBe(true);
    // The first ones, in order.
    const names = d.json.phases.map((ph: Json) => ph.name);
    expect(names.length).toBeGreaterThan(0);
    expect(names.length).toBeLessThan(8);
    expect(names).toEqual(Array.from({ length: names.length }, (_, i) => `p${i}`));
    // All of them are still in the history.
    expect((await allEvents(url, '&kind=phase')).map((e) => e.data.name)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7']);
  });
});

describe('automatic dumps', () => {
  /** A target that started long ago and is not ready: stuck from the hello on. */
  const hung: Hello['status'] = {
    ...initialStatus(49983),
    target: { pid: 42, name: 'envd', startedAt: 1000, source: 'name', alive: true },
  };

  it('a reboot storm takes at most AUTO_DUMP_SETS sets, records the skip once, and keeps the operator dump', async () => {
    const { url, socket } = await start({ startDeadlineMs: 100 });
    const autoDumps = async () => (await get(url, '/v1/sandboxes/vm/dumps')).json.dumps.filter((d: Json) => d.trigger === 'auto');
    const storm = AUTO_DUMP_SETS + 3;
    let operatorDump: number | null = null;
    for (let g = 1; g <= storm; g++) {
      const commands: CollectorMessage[] = [];
      // Each connection a new boot (a reconnect alone is the same life, the same episode).
      const p = connectProbe(socket, {
        generation: g,
        bootId: `boot-${g}`,
        status: hung,
        onMessage: (m, c) => {
          if (m.type === 'command') commands.push(m);
          answerThreadsDump(m, c);
        },
      });
      await p.connect();
      await waitFor('stuck', async () => {
        const d = (await get(url, '/v1/sandboxes/vm')).json;
        return d.state === 'stuck' && d.generation === g && d.connected;
      });
      if (g <= AUTO_DUMP_SETS) {
        await waitFor(`automatic dump ${g}`, async () => (await autoDumps()).length === g);
      } else {
        // Skipped at once, on the state change: this session was never asked for a dump.
        await waitFor('the skip in the history', async () =>
          (await get(url, '/v1/sandboxes/vm/events?kind=dump')).json.events.some((e: Json) => e.data.error?.startsWith('skipped')),
        );
        expect(commands).toEqual([]);
      }
      if (g === 1) {
        const r = await fetch(`${url}/v1/sandboxes/vm/dumps`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{}',
        });
        expect(r.status).toBe(201);
        operatorDump = ((await r.json()) as Json).id;
      }
      p.close();
      await waitFor('disconnected', async () => !(await get(url, '/v1/sandboxes/vm')).json.connected);
    }

    expect(await autoDumps()).toHaveLength(AUTO_DUMP_SETS);
    const listed = (await get(url, '/v1/sandboxes/vm/dumps')).json.dumps;
    expect(listed.filter((d: Json) => d.trigger === 'api').map((d: Json) => d.id)).toEqual([operatorDump]);
    const records = (await get(url, '/v1/sandboxes/vm/events?kind=dump')).json.events.map((e: Json) => e.data);
    // One record of the pause, however many episodes fell in it; it says until when.
    const skips = records.filter((d: Json) => d.error?.startsWith('skipped'));
    expect(skips).toHaveLength(1);
    expect(skips[0]).toMatchObject({ trigger: 'auto', complete: false });
    expect(skips[0].error).toMatch(/none until \d{4}-\d\d-\d\dT/);
    expect(records.filter((d: Json) => d.dumpId !== undefined)).toHaveLength(AUTO_DUMP_SETS + 1);
  });

  /** A probe whose answers to dump commands `answer` decides; records what it was asked. */
  async function stuckProbe(
    socket: string,
    answer: (m: Extract<CollectorMessage, { type: 'command' }>) => { ok: boolean; text?: string; error?: string; source?: string },
  ) {
    const commands: Array<{ mode?: string; destructive?: boolean }> = [];
    const p = connectProbe(socket, {
      status: hung,
      onMessage: (m, c) => {
        if (m.type !== 'command' || m.op !== 'dump') return;
        commands.push({ mode: m.mode, destructive: m.destructive });
        const a = answer(m);
        const data = Buffer.from(a.text ?? '');
        if (data.length) c.send({ type: 'dump.chunk', id: m.id, index: 0, data });
        c.send({
          type: 'result',
          id: m.id,
          ok: a.ok,
          ...(a.error ? { error: a.error } : {}),
          dump: {
            mode: m.mode ?? 'threads',
            source: (a.source ?? 'proc') as 'proc',
            complete: a.ok,
            bytes: data.length,
            chunks: data.length ? 1 : 0,
            pid: 42,
          },
        });
      },
    });
    await p.connect();
    return commands;
  }

  it('asks for the harmless goroutine dump first, and threads when that fails (not a Go target)', async () => {
    const { url, socket } = await start({ startDeadlineMs: 100 });
    const commands = await stuckProbe(socket, (m) =>
      m.mode === 'goroutines'
        ? { ok: false, error: '/proc/42/exe is not a Go executable' }
        : { ok: true, text: 'threads of pid 42 (envd)\ntask 42 (envd) state=S wchan=futex_wait_queue\n' },
    );
    await waitFor('the threads fallback', async () => (await get(url, '/v1/sandboxes/vm/dumps')).json.dumps.length === 1);
    expect(commands).toEqual([
      { mode: 'goroutines', destructive: false },
      { mode: 'threads', destructive: false },
    ]);
    const records = (await get(url, '/v1/sandboxes/vm/events?kind=dump')).json.events.map((e: Json) => e.data);
    expect(records[0]).toMatchObject({
      mode: 'goroutines',
      trigger: 'auto',
      complete: false,
      error: expect.stringContaining('not a Go executable'),
    });
    expect((await get(url, '/v1/sandboxes/vm')).json.reason).not.toContain('blocked in');
  });

  it('names where the goroutine dump found main blocked in the stuck reason; --on-stuck quit still sends SIGQUIT', async () => {
    // The blocked frame comes from the dump's analysis: the real worker, built from source.
    const worker = await bundleWorker(REAL_WORKER);
    onTestFinished(worker.remove); // after the collector using it has stopped
    const { url, socket } = await start({ startDeadlineMs: 100, onStuck: 'quit', dumpWorkerUrl: worker.url });
    const traceback =
      'goroutine 1 [sync.Mutex.Lock]:\nsync.runtime_SemacquireMutex(0x1?, 0x0?, 0x1?)\n\t/usr/local/go/src/runtime/sema.go:95 +0x25\n' +
      'main.(*cgroupManager).acquireRoot(...)\n\t/build/envd/cgroups.go:52 +0x33\nmain.main()\n\t/build/envd/main.go:190 +0x185\n';
    const commands = await stuckProbe(socket, (m) =>
      m.destructive ? { ok: true, text: traceback, source: 'sigquit' } : { ok: true, text: traceback, source: 'memory' },
    );
    const d = await waitFor('the blocked frame in the reason', async () => {
      const v = (await get(url, '/v1/sandboxes/vm')).json;
      return v.reason.includes('blocked in') ? v : null;
    });
    expect(d.reason).toMatch(/; main goroutine blocked in main\.\(\*cgroupManager\)\.acquireRoot \(sync\.Mutex\.Lock\)$/);
    expect(d.blocked).toMatchObject({ pid: 42 });
    const readiness = await fetch(`${url}/v1/sandboxes/vm/readiness`);
    expect(readiness.status).toBe(503);
    expect(((await readiness.json()) as Json).reason).toContain('main goroutine blocked in main.(*cgroupManager).acquireRoot');
    await waitFor('both dumps', async () => commands.length === 2);
    expect(commands).toEqual([
      { mode: 'goroutines', destructive: false },
      { mode: 'goroutines', destructive: true },
    ]);
  });
});
