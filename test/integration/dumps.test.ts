// Issue 5's acceptance: dumps across the VM boundary, automatic and on demand, readable at
// a glance, never from the wrong generation.

import fs from 'node:fs';
import path from 'node:path';
import { initialStatus } from '@vsockdiag/proto';
import { afterEach, describe, expect, it } from 'vitest';
import { allEvents, cli, waitForState } from '../harness/collector.js';
import { waitFor } from '../support/wait.js';
import { testBed } from '../harness/testbed.js';
import { ProbeClient } from '../harness/probe-client.js';

const bed = testBed(['--stall-after', '1500ms']);
const { sandbox } = bed;
const cleanup: Array<() => Promise<void> | void> = [];
// Registered after the bed's hooks, so it runs first: clients go before their sandboxes.
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

const dump = (id: string, body: object) => bed.collector.api('POST', `/v1/sandboxes/${id}/dumps`, body);

describe('dumps', () => {
  it('envd hung on a mutex in cgroup-manager → an automatic goroutine dump from its memory, and the reason says where', async () => {
    await sandbox({ id: 'auto', envd: ['-hang-in', 'cgroup-manager'] });
    await waitForState(bed.collector, 'auto', 'stuck');
    const ev = await waitFor('the automatic dump', async () =>
      (await allEvents(bed.collector, 'auto', 'dump')).find((e) => e.data.trigger === 'auto'),
    );
    expect(ev.data).toMatchObject({ mode: 'goroutines', complete: true, blockedIn: 'main.(*cgroupManager).acquireRoot' });
    const d = (await bed.collector.api('GET', `/v1/sandboxes/auto/dumps/${ev.data.dumpId}`)).body;
    expect(d).toMatchObject({ kind: 'goroutines', trigger: 'auto', source: 'memory', pausedMs: 0 });
    expect(d.note).toMatch(/read from memory: go1\.\d+/);
    const main = d.goroutineGroups.find((g: any) => g.ids.includes(1));
    expect(main.blockedIn.func).toBe('main.(*cgroupManager).acquireRoot');
    // The verdict names it, without anyone pressing a button or killing anything: the API,
    // the readiness answer the orchestrator polls, and vsockdiag status.
    const where = 'main goroutine blocked in main.(*cgroupManager).acquireRoot (semacquire)';
    const sb = await waitFor('the reason to name the blocked frame', async () => {
      const b = (await bed.collector.api('GET', '/v1/sandboxes/auto')).body;
      return b.reason.includes(where) ? b : null;
    });
    expect(sb.state).toBe('stuck');
    expect(sb.reason).toMatch(/last phase cgroup-manager .* ago; main goroutine blocked in/);
    expect(sb.blocked).toMatchObject({ dumpId: ev.data.dumpId, text: where });
    expect(sb.dumps.some((x: any) => x.id === ev.data.dumpId && x.trigger === 'auto')).toBe(true);
    const ready = await bed.collector.api('GET', '/v1/sandboxes/auto/readiness');
    expect(ready.status).toBe(503);
    expect(ready.body.reason).toContain(where);
    const status = await cli(bed.collector, ['status', 'auto']);
    expect(status.stdout).toContain(where);
    // Nothing was killed: envd is still alive, still stuck in the same place.
    expect(sb.target.alive).toBe(true);
    expect((await bed.collector.api('GET', '/v1/sandboxes/auto')).body.target.pid).toBe(sb.target.pid);
  });

  it('threads on demand: every task of envd with its kernel wait', async () => {
    await sandbox({ id: 'threads', envd: ['-hang-in', 'cgroup-manager'] });
    await waitForState(bed.collector, 'threads', ['starting', 'stuck']);
    const made = await dump('threads', { mode: 'threads' });
    expect(made.status).toBe(201);
    const d = (await bed.collector.api('GET', `/v1/sandboxes/threads/dumps/${made.body.id}`)).body;
    expect(d.kind).toBe('threads');
    const top = d.threads.groups[0];
    expect(`${top.blockedIn} ${top.wchan ?? ''} ${top.syscall.name ?? ''}`).toMatch(/futex/);
    expect(d.text).toMatch(/^threads of pid \d+ \(fake-envd\)/);
  });

  it("a goroutines dump (SIGQUIT, wrap mode) names the fake envd's hang function; the CLI summary shows it", async () => {
    await sandbox({ id: 'quit', mode: 'wrap', envd: ['-hang-in', 'cgroup-manager'] });
    await waitForState(bed.collector, 'quit', ['starting', 'stuck']);
    // Without --destructive: read from memory, and envd goes on.
    const live = await dump('quit', { mode: 'goroutines' });
    expect(live.status).toBe(201);
    expect(live.body).toMatchObject({ source: 'memory', complete: true, top: { blockedIn: 'main.(*cgroupManager).acquireRoot' } });
    const out = path.join(bed.root, 'quit.txt');
    const res = await cli(bed.collector, ['dump', 'quit', '--mode', 'goroutines', '--destructive', '--out', out]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/goroutines \(complete, sigquit/);
    expect(res.stdout.split('\n').find((l) => l.includes('blocked in'))).toMatch(/blocked in main\.\(\*cgroupManager\)\.acquireRoot/);
    expect(fs.readFileSync(out, 'utf8')).toMatch(/goroutine 1 .*\[semacquire/);
    const list = (await bed.collector.api('GET', '/v1/sandboxes/quit/dumps')).body.dumps;
    const d = (await bed.collector.api('GET', `/v1/sandboxes/quit/dumps/${list[0].id}`)).body;
    expect(d.goroutineGroups[0].blockedIn.func).toBe('main.(*cgroupManager).acquireRoot');
    expect(d.goroutineGroups[0].count).toBe(1);
    // SIGQUIT ended envd: the probe reports the exit (Go exits with status 2).
    const after = await waitForState(bed.collector, 'quit', 'exited');
    expect(after.target.exitCode).toBe(2);
  });

  it('a harmless goroutines dump from pprof, and a 2,000-goroutine dump arrives whole and grouped', async () => {
    await sandbox({
      id: 'pprof',
      envd: ['-hang-in', 'api', '-pprof', '127.0.0.1:6060', '-idle-goroutines', '2000'],
      probeArgs: ['--pprof-url', 'http://127.0.0.1:6060/debug/pprof/goroutine?debug=2'],
    });
    await waitForState(bed.collector, 'pprof', ['starting', 'stuck']);
    // The target is seen as soon as it runs; its pprof port is bound before its first phase.
    await waitFor('a first phase', async () => (await allEvents(bed.collector, 'pprof', 'phase')).length > 0);
    const made = await dump('pprof', { mode: 'goroutines' });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const d = (await bed.collector.api('GET', `/v1/sandboxes/pprof/dumps/${made.body.id}`)).body;
    expect(d).toMatchObject({ source: 'pprof', complete: true });
    expect(d.goroutines).toBeGreaterThanOrEqual(2000);
    const parked = d.goroutineGroups.find((g: any) => g.blockedIn?.func === 'main.parkedWorker');
    expect(parked.count).toBe(2000);
    // Every header counted was read, and by creator the 2,000 are one row too.
    expect(d.headers).toBe(d.goroutines);
    expect(d.unparsed).toBeUndefined();
    expect(d.creatorGroups.find((c: any) => c.blockedIn[0]?.func === 'main.parkedWorker').count).toBe(2000);
    // Harmless: envd is still alive.
    expect((await bed.collector.api('GET', '/v1/sandboxes/pprof')).body.target.alive).toBe(true);
  });

  it("a dump through Firecracker's host-initiated path while the probe's own session is cut", async () => {
    const sb = await sandbox({ id: 'cut', envd: ['-hang-in', 'cgroup-manager'] });
    await waitForState(bed.collector, 'cut', ['starting', 'stuck']);
    // Cut the session and keep it down: the collector's socket file goes away (the probe's
    // reconnects now fail), then a transport reset ends the live connection.
    fs.rmSync(`${sb.udsPath}_52000`);
    sb.vm.reset();
    await waitForState(bed.collector, 'cut', 'silent');
    const before = sb.vm.stats().hostInitiated;
    const made = await dump('cut', { mode: 'threads' });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    expect(sb.vm.stats().hostInitiated).toBe(before + 1); // one fresh CONNECT, not pooled
    const d = (await bed.collector.api('GET', `/v1/sandboxes/cut/dumps/${made.body.id}`)).body;
    expect(d.threads.groups.length).toBeGreaterThan(0);
    expect(d.generation).toBe(1);
    // A second dump opens another connection.
    expect((await dump('cut', { mode: 'threads' })).status).toBe(201);
    expect(sb.vm.stats().hostInitiated).toBe(before + 2);
  });

  it('a dump request racing a restore never returns the previous generation’s answer', async () => {
    const dir = path.join(bed.root, 'race');
    fs.mkdirSync(dir, { recursive: true });
    const udsPath = path.join(dir, 'v.sock');
    await bed.collector.api('PUT', '/v1/sandboxes/race', { udsPath });
    const memory = { path: `${udsPath}_52000`, instanceId: 'aaaabbbbccccdddd', status: initialStatus(49983), heartbeatMs: 500 };
    const gen1 = new ProbeClient({ ...memory, generation: 1 });
    cleanup.push(() => gen1.close());
    await gen1.connect();
    const pending = dump('race', { mode: 'threads' });
    // Generation 1 receives the command… and the VM is restored before it answers.
    await waitFor('the dump command', () => gen1.received.some((m) => m.type === 'command'), { timeoutMs: 5000 });
    gen1.close();
    // Restored: its wall clock runs from the snapshot moment, an hour ago (a new generation).
    const gen2 = new ProbeClient({ ...memory, generation: 2, wallMs: () => Date.now() - 3_600_000 });
    cleanup.push(() => gen2.close());
    await gen2.connect();
    // Generation 2 answers the retried command with its own dump.
    await waitFor('the retried command', () => gen2.received.some((m) => m.type === 'command'), { timeoutMs: 5000 });
    const cmd = gen2.received.find((m) => m.type === 'command') as { id: number };
    const text =
      'threads of pid 77 (envd) arch=x86_64\ntask 77 (envd) state=S wchan=futex_wait_queue syscall=202 0x0 0x80 0x0 0x0 0x0 0x0\n';
    gen2.send({ type: 'dump.chunk', id: cmd.id, index: 0, data: Buffer.from(text) });
    gen2.send({
      type: 'result',
      id: cmd.id,
      ok: true,
      dump: { mode: 'threads', source: 'proc', complete: true, bytes: Buffer.byteLength(text), chunks: 1, pid: 77 },
    });
    const made = await pending;
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    expect(made.body.generation).toBe(2);
    const d = (await bed.collector.api('GET', `/v1/sandboxes/race/dumps/${made.body.id}`)).body;
    expect(d.text).toBe(text);
  });

  it('bad requests: unknown sandbox, bad mode, a probe that is gone', async () => {
    expect((await dump('nope', { mode: 'threads' })).status).toBe(404);
    const dir = path.join(bed.root, 'gone');
    fs.mkdirSync(dir, { recursive: true });
    await bed.collector.api('PUT', '/v1/sandboxes/gone', { udsPath: path.join(dir, 'v.sock') });
    const bad = await dump('gone', { mode: 'heap' });
    expect(bad.status).toBe(400);
    const unreachable = await dump('gone', { mode: 'threads' });
    expect(unreachable.status).toBe(503);
    expect(unreachable.body.error.code).toBe('PROBE_UNREACHABLE');
  });

  it('the diff of two dumps lists what did not move', async () => {
    await sandbox({ id: 'diff', envd: ['-hang-in', 'cgroup-manager'] });
    await waitForState(bed.collector, 'diff', ['starting', 'stuck']);
    const a = (await dump('diff', { mode: 'threads' })).body;
    const b = (await dump('diff', { mode: 'threads' })).body;
    const diff = (await bed.collector.api('GET', `/v1/sandboxes/diff/dumps/${b.id}/diff`)).body;
    expect(diff).toMatchObject({ older: a.id, newer: b.id, kind: 'threads' });
    expect(diff.stuckCount).toBeGreaterThan(0);
    const raw = await fetch(`${bed.collector.url}/v1/sandboxes/diff/dumps/${b.id}/raw`);
    expect(raw.headers.get('content-type')).toMatch(/text\/plain/);
    expect(await raw.text()).toMatch(/^threads of pid/);
  });
});

describe('parse-dump', () => {
  it('groups a Go traceback offline, as text and as JSON', async () => {
    const fixture = path.join(
      path.dirname(new URL(import.meta.url).pathname),
      '../../host-collector/test/fixtures/dumps/fake-envd-go1.19-sigquit-cgroup-hang.txt',
    );
    const text = await cli(bed.collector, ['parse-dump', fixture]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/blocked in main\.\(\*cgroupManager\)\.acquireRoot/);
    const json = JSON.parse((await cli(bed.collector, ['parse-dump', fixture, '--json'])).stdout);
    expect(json.kind).toBe('goroutines');
    expect(json.goroutineGroups[0]).toMatchObject({ count: 1 });
    expect(json.goroutineGroups[0].blockedIn.func).toBe('main.(*cgroupManager).acquireRoot');
    const garbage = await cli(bed.collector, ['parse-dump', '/etc/hostname']);
    expect(garbage.code).toBe(1);
  });

  it('reads Go 1.27 labels and flags, says which headers it did not understand, then lists creators', async () => {
    const file = path.join(bed.root, 'go127.txt');
    const block = (id: number, header: string) =>
      `goroutine ${id} gp=0xc0001${id}00 m=nil ${header}:\nmain.poll()\n\t/src/envd/mmds.go:29 +0x1\ncreated by main.startMMDSPoller in goroutine 1\n\t/src/envd/phases.go:201 +0x2\n`;
    fs.writeFileSync(
      file,
      [
        'SIGQUIT: quit\n',
        'goroutine 1 gp=0xc000002380 m=nil [sync.Mutex.Lock]:\nmain.(*cgroupManager).acquireRoot()\n\t/src/envd/phases.go:252 +0x33\n',
        ...Array.from({ length: 30 }, (_, i) => block(10 + i, `[select${i % 3 ? '' : ' (leaked)'}] {worker: mmds, n: "${i}"}`)),
        block(50, '[select] {worker: "mmds}'),
      ].join('\n'),
    );
    const text = await cli(bed.collector, ['parse-dump', file]);
    expect(text.code, text.stderr).toBe(0);
    const lines = text.stdout.split('\n');
    expect(lines[0]).toBe('32 goroutines in 4 groups');
    expect(lines[1]).toMatch(/^warning: 1 goroutine header not understood \(kept as state "\?"; line \d+\)$/);
    expect(text.stdout).toMatch(/20 +select +- +blocked in main\.poll \(mmds\.go:29\) +labels \{worker: mmds, n: 1\} ×1, \+19 more sets/);
    expect(text.stdout).toMatch(/10 +select \(leaked\)/);
    expect(text.stdout).toMatch(
      /\nby creator \(2 creators\):\n31 +created by main\.startMMDSPoller \(phases\.go:201\) +3 stacks +20 select, 10 select \(leaked\), 1 \?/,
    );
    const json = JSON.parse((await cli(bed.collector, ['parse-dump', file, '--json'])).stdout);
    expect(json).toMatchObject({ kind: 'goroutines', goroutines: 32, headers: 32, unparsed: 1 });
    expect(json.creatorGroups[0]).toMatchObject({ count: 31, stackGroups: 3, unparsed: 1 });
  });
});
