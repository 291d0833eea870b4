// Firecracker faults: the vsock bugs of the releases E2B runs (1.10–1.14) and of the ones
// after them, reproduced by the emulator (test/harness/firecracker.ts, each fault's source
// is there), with a real collector process and real probes in simulated sandboxes. Each
// row says how the probe and the collector came through: the link back, nothing the guest
// said during the fault lost or stored twice, and an on-demand dump that neither hangs nor
// gives up while the session can answer it.
//
// To take a probe's session down for a while (so that a dump must go through Firecracker's
// host-initiated path), the probe is frozen (SIGSTOP, as envd's hierarchy freezer does to a
// probe in its own unit) and the link reset; thawing it brings the session back.

import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DIAL_DEADLINE_MS } from '../../host-collector/src/collector/probe-dial.js';
import { SESSION_FALLBACK_WAIT_MS } from '../../host-collector/src/collector/dump-service.js';
import { allEvents, startCollector, type CollectorProcess } from '../harness/collector.js';
import { FC_MAX_CONNECTIONS, hostPortPath } from '../harness/firecracker.js';
import { startSandbox, type Sandbox } from '../harness/sandbox.js';
import { waitFor } from '../support/wait.js';
import { checkSeqs, secs, type SeqCheck } from './check.js';
import type { ReliabilityRow, ScenarioOptions } from './row.js';

const AREA = 'Firecracker faults';
const COMMAND = 'node test/run-ts.mjs test/reliability/run.ts faults';
/** A dump that falls back must be answered within the dial deadline and the session wait, plus slack for a loaded machine. */
const FALLBACK_BOUND_MS = DIAL_DEADLINE_MS + SESSION_FALLBACK_WAIT_MS + 4000;

interface Ctx {
  collector: CollectorProcess;
  root: string;
  log: (line: string) => void;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function sandbox(ctx: Ctx, id: string): Promise<Sandbox> {
  const sb = await startSandbox({ id, root: ctx.root });
  try {
    const r = await ctx.collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: sb.udsPath });
    if (r.status >= 300) throw new Error(`register ${id}: ${r.status} ${JSON.stringify(r.body)}`);
    await waitState(ctx, id, (s) => s === 'ready', 30_000);
  } catch (err) {
    await sb.stop();
    throw err;
  }
  return sb;
}

async function waitState(ctx: Ctx, id: string, ok: (state: string) => boolean, timeoutMs = 20_000): Promise<string> {
  return waitFor(
    `sandbox ${id} state`,
    async () => {
      const r = await ctx.collector.api('GET', `/v1/sandboxes/${id}`);
      return r.status === 200 && ok(r.body.state) ? (r.body.state as string) : null;
    },
    { timeoutMs },
  );
}

function probePid(sb: Sandbox): number {
  const [pid] = sb.pidsOf('vsockdiag-probe');
  if (!pid) throw new Error(`${sb.id}: no probe process`);
  return pid;
}

/** Freezes the probe and resets the link: the collector sees the sandbox go silent. */
async function takeSessionDown(ctx: Ctx, sb: Sandbox): Promise<number> {
  const pid = probePid(sb);
  process.kill(pid, 'SIGSTOP');
  sb.vm.reset();
  await waitState(ctx, sb.id, (s) => s === 'silent');
  return pid;
}

async function dump(ctx: Ctx, id: string): Promise<{ status: number; code: string | null; ms: number }> {
  const t0 = Date.now();
  const r = await ctx.collector.api('POST', `/v1/sandboxes/${id}/dumps`, { mode: 'threads' });
  return { status: r.status, code: r.body?.error?.code ?? null, ms: Date.now() - t0 };
}

/** Markers the guest sends during a fault (sd_notify STATUS=…), to check they all arrive once. */
function mark(sb: Sandbox, tag: string, n: number): string[] {
  const sent: string[] = [];
  for (let i = 0; i < n; i++) {
    const status = `${tag}-${i}`;
    sb.notify(`STATUS=${status}`);
    sent.push(status);
  }
  return sent;
}

interface Delivery extends SeqCheck {
  /** Markers sent during the fault that are not stored exactly once. */
  markersMissing: number;
  markersTwice: number;
}

/** Waits until every marker is stored, then checks every numbered event of the sandbox. */
async function delivered(ctx: Ctx, id: string, markers: string[]): Promise<Delivery> {
  const count = (events: any[]) => {
    const n = new Map<string, number>();
    for (const e of events)
      if (e.kind === 'phase' && typeof e.data.status === 'string') n.set(e.data.status, (n.get(e.data.status) ?? 0) + 1);
    return n;
  };
  await waitFor(
    `${id}: the markers stored`,
    async () => {
      const n = count(await allEvents(ctx.collector, id));
      return markers.every((m) => n.has(m));
    },
    { timeoutMs: 20_000 },
  ).catch(() => undefined);
  const events = await allEvents(ctx.collector, id);
  const seqs = events.filter((e) => e.seq !== null).map((e) => e.seq as number);
  // What the probe numbered: at least what its last hello said, and what was stored.
  const hellos = events.filter((e) => e.kind === 'session.open').map((e) => e.data.lastSeq as number);
  const sent = Math.max(0, ...seqs, ...hellos);
  const n = count(events);
  return {
    ...checkSeqs(sent, seqs),
    markersMissing: markers.filter((m) => !n.has(m)).length,
    markersTwice: markers.filter((m) => (n.get(m) ?? 0) > 1).length,
  };
}

const intact = (d: Delivery) => d.lost === 0 && d.duplicated === 0 && d.unexpected === 0 && d.markersMissing === 0 && d.markersTwice === 0;
const deliveryText = (d: Delivery) => `${d.sent} events, ${d.lost + d.markersMissing} lost, ${d.duplicated + d.markersTwice} duplicated`;

/** #6100: host CONNECTs hang forever after a bare pause/resume, while the session is down. */
async function hungConnect(ctx: Ctx, round: number): Promise<{ ok: boolean; text: string }> {
  const sb = await sandbox(ctx, `hung${round}`);
  try {
    const pid = await takeSessionDown(ctx, sb);
    sb.vm.bareResume();
    const answered = sb.vm.stats().hostInitiated;
    const pending = dump(ctx, sb.id);
    // The probe thaws while the collector's CONNECT hangs; its own link comes back.
    await sleep(1000);
    process.kill(pid, 'SIGCONT');
    const d = await pending;
    const ok = d.status === 201 && d.ms < FALLBACK_BOUND_MS && sb.vm.stats().hostInitiated === answered;
    return { ok, text: `${d.status} in ${secs(d.ms)}` };
  } finally {
    await sb.stop();
  }
}

/** #5958: after a restore with a TX descriptor in flight, nothing the guest sends arrives. */
async function txStall(ctx: Ctx, round: number, stallMs: number): Promise<{ ok: boolean; dump: string; backMs: number; d: Delivery }> {
  const sb = await sandbox(ctx, `stall${round}`);
  try {
    sb.vm.reset();
    sb.vm.txStall(true);
    await waitState(ctx, sb.id, (s) => s === 'silent');
    const t0 = Date.now();
    const markers = mark(sb, `stall${round}`, 5);
    // The command port's CONNECT gets EOF after Firecracker's request timeout, and no
    // session comes: a clear 503, not a dump that waits out its whole time limit.
    const d = await dump(ctx, sb.id);
    await sleep(Math.max(0, stallMs - (Date.now() - t0)));
    sb.vm.txStall(false); // a Firecracker with the fix (1.16.1)
    const fixed = Date.now();
    await waitState(ctx, sb.id, (s) => s !== 'silent', 20_000);
    const backMs = Date.now() - fixed;
    const delivery = await delivered(ctx, sb.id, markers);
    const ok = d.status === 503 && d.code === 'PROBE_UNREACHABLE' && d.ms < FALLBACK_BOUND_MS && intact(delivery);
    return { ok, dump: `${d.status} in ${secs(d.ms)}`, backMs, d: delivery };
  } finally {
    await sb.stop();
  }
}

/** 1.16 (#5882): RX held back until the guest acks the reset; `holdMs` before it does. */
async function rxGate(ctx: Ctx, round: number, holdMs: number): Promise<{ ok: boolean; backMs: number; d: Delivery }> {
  const sb = await sandbox(ctx, `gate${round}-${holdMs}`);
  try {
    sb.vm.reset({ holdRx: true });
    const markers = mark(sb, `gate${round}`, 5);
    await sleep(holdMs);
    sb.vm.ackTransportReset();
    const acked = Date.now();
    // Back: the welcome got through and the markers sent meanwhile are stored.
    const delivery = await delivered(ctx, sb.id, markers);
    const backMs = Date.now() - acked;
    await waitState(ctx, sb.id, (s) => s !== 'silent');
    return { ok: intact(delivery), backMs, d: delivery };
  } finally {
    await sb.stop();
  }
}

/** CONNECT answered by EOF while the session is down: the dump waits for the session instead. */
async function connectEof(ctx: Ctx, round: number): Promise<{ ok: boolean; text: string }> {
  const sb = await sandbox(ctx, `eof${round}`);
  try {
    const pid = await takeSessionDown(ctx, sb);
    sb.vm.connectEof(true);
    const pending = dump(ctx, sb.id);
    await sleep(1000);
    process.kill(pid, 'SIGCONT');
    const d = await pending;
    return { ok: d.status === 201 && d.ms < SESSION_FALLBACK_WAIT_MS + 4000, text: `${d.status} in ${secs(d.ms)}` };
  } finally {
    await sb.stop();
  }
}

/** The connection table full (1,023): another guest program holds every slot. */
async function connectionLimit(
  ctx: Ctx,
  round: number,
): Promise<{ ok: boolean; refused: number; fullMs: number; dump: string; backMs: number; d: Delivery }> {
  const sb = await sandbox(ctx, `full${round}`);
  const held: net.Socket[] = [];
  const hogs: net.Socket[] = [];
  const hostSide = net.createServer((s) => {
    s.on('error', () => undefined);
    held.push(s);
  });
  try {
    // A host service on another port that keeps whatever connects (a log shipper, say).
    await new Promise<void>((r) => hostSide.listen(hostPortPath(sb.udsPath, 52099), r));
    const hogPath = await sb.vm.exposeHostPort(52099);
    const pid = await takeSessionDown(ctx, sb);
    // One at a time: a burst would overflow the listen backlog before the table.
    for (let i = 0; i < FC_MAX_CONNECTIONS; i++) {
      const s = net.connect({ path: hogPath });
      s.on('error', () => undefined);
      hogs.push(s);
      await new Promise<void>((r) => {
        s.once('connect', () => r());
        s.once('close', () => r());
      });
    }
    await waitFor('the connection table full', () => sb.vm.stats().live === FC_MAX_CONNECTIONS, { timeoutMs: 30_000 });
    let refused = 0;
    const onRefused = (r: { initiator: string; reason: string }) => {
      if (r.initiator === 'guest' && r.reason === 'connection-limit') refused++;
    };
    sb.vm.on('refused', onRefused);
    process.kill(pid, 'SIGCONT');
    const full0 = Date.now();
    const markers = mark(sb, `full${round}`, 5);
    const d = await dump(ctx, sb.id);
    const fullMs = Date.now() - full0;
    sb.vm.off('refused', onRefused);
    for (const s of hogs) s.destroy();
    for (const s of held) s.destroy();
    const freed = Date.now();
    await waitState(ctx, sb.id, (s) => s !== 'silent', 20_000);
    const backMs = Date.now() - freed;
    const delivery = await delivered(ctx, sb.id, markers);
    // The probe kept trying, but with its backoff (capped at 2 s), not in a loop.
    const ok = d.status === 503 && d.ms < FALLBACK_BOUND_MS && refused >= 1 && refused <= fullMs / 10 && intact(delivery);
    return { ok, refused, fullMs, dump: `${d.status} in ${secs(d.ms)}`, backMs, d: delivery };
  } finally {
    for (const s of hogs) s.destroy();
    for (const s of held) s.destroy();
    await new Promise<void>((r) => hostSide.close(() => r()));
    await sb.stop();
  }
}

export async function run(opts: ScenarioOptions): Promise<ReliabilityRow[]> {
  const rounds = opts.full ? 3 : 1;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-f-'));
  const collector = await startCollector({ args: ['--stall-after', '60s'] });
  const ctx: Ctx = { collector, root, log: opts.log };
  const rows: ReliabilityRow[] = [];
  const row = (scenario: string, figure: string, held: boolean) => {
    rows.push({ area: AREA, scenario, figure, held, command: COMMAND });
    opts.log(`${held ? 'held' : 'FAILED'}: ${scenario}: ${figure}`);
  };
  try {
    {
      const r = [];
      for (let i = 0; i < rounds; i++) r.push(await hungConnect(ctx, i));
      row(
        `host CONNECT hung after a bare pause/resume (firecracker#6100), session down ×${rounds}`,
        `dump answered over the session after the ${secs(DIAL_DEADLINE_MS)} dial deadline: ${r.map((x) => x.text).join(', ')}; 0 CONNECTs answered`,
        r.every((x) => x.ok),
      );
    }
    {
      const r = [];
      for (let i = 0; i < rounds; i++) r.push(await txStall(ctx, i, opts.full ? 15_000 : 3000));
      const d = r.map((x) => x.d);
      row(
        `guest→host stalled after a restore with a write in flight (firecracker#5958) ×${rounds}`,
        `dump refused in ${r.map((x) => x.dump).join(', ')} (not at its 15 s limit); link back ${r.map((x) => secs(x.backMs)).join(', ')} after the fix; ${d.map(deliveryText).join('; ')}`,
        r.every((x) => x.ok),
      );
    }
    for (const holdMs of [1500, 8000]) {
      const r = [];
      for (let i = 0; i < rounds; i++) r.push(await rxGate(ctx, i, holdMs));
      row(
        `RX held until the guest acks the transport reset (1.16, #5882), ack after ${secs(holdMs)} ×${rounds}`,
        `events flowing ${r.map((x) => secs(x.backMs)).join(', ')} after the ack; ${r.map((x) => deliveryText(x.d)).join('; ')}`,
        r.every((x) => x.ok),
      );
    }
    {
      const r = [];
      for (let i = 0; i < rounds; i++) r.push(await connectEof(ctx, i));
      row(
        `CONNECT answered by EOF, session down ×${rounds}`,
        `dump answered over the session once it was back: ${r.map((x) => x.text).join(', ')}`,
        r.every((x) => x.ok),
      );
    }
    {
      const r = [];
      for (let i = 0; i < rounds; i++) r.push(await connectionLimit(ctx, i));
      row(
        `connection table full (${FC_MAX_CONNECTIONS} held by another guest program) ×${rounds}`,
        r
          .map(
            (x) =>
              `${x.refused} probe reconnects refused in ${secs(x.fullMs)}, dump ${x.dump}, link back ${secs(x.backMs)} after the slots freed, ${deliveryText(x.d)}`,
          )
          .join('; '),
        r.every((x) => x.ok),
      );
    }
  } finally {
    await collector.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return rows;
}
