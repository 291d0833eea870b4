// A light, in-process probe speaking the real protocol over a Unix socket: no /proc, no
// sampling. Tests use it where they need exact control of what a "guest" says (clones that
// share one memory, hostile peers), and benchmarks use it to simulate thousands of probes.

import net from 'node:net';
import {
  FrameDecoder,
  decodeCollectorMessage,
  encodeMessage,
  type CollectorMessage,
  type EventBody,
  type Hello,
  type ProbeEvent,
  type ProbeMessage,
} from '@vsockdiag/proto';
import { helloMessage } from '../support/hello.js';

export interface ProbeClientOptions {
  path: string;
  instanceId?: string;
  generation?: number;
  lastSeq?: number;
  status?: Hello['status'];
  sinceBootMs?: () => number;
  /** The guest's wall clock (default: the host's). */
  wallMs?: () => number;
  bootId?: string;
  /** Said in the hello: the seq at which this probe's previous link was lost. */
  lostAtSeq?: number;
  /** Send a heartbeat at the end of every heartbeatMs in which nothing else was sent, as the
   *  probe's link does (the collector closes a session silent for 5 s). */
  heartbeatMs?: number;
  /** Let the collector ack each batch with its next liveness tick, as it does the probe's
   *  (default: every batch asks for its ack at once, so that a test waiting for an ack waits
   *  for the commit, not for a tick up to 2 s away). */
  deferAcks?: boolean;
  /** Called on each message from the collector (to answer its commands, say). */
  onMessage?: (m: CollectorMessage, client: ProbeClient) => void;
}

export class ProbeClient {
  socket: net.Socket | null = null;
  acked = 0;
  welcomeAck: number | null = null;
  received: CollectorMessage[] = [];
  closed: Promise<void> = Promise.resolve();
  seq: number;
  private waiters: Array<() => void> = [];
  /** Whether a frame went out since the last heartbeat tick. */
  private sentSinceTick = false;

  constructor(private readonly opts: ProbeClientOptions) {
    this.seq = opts.lastSeq ?? 0;
  }

  private get sinceBoot(): number {
    return this.opts.sinceBootMs?.() ?? performance.now();
  }

  /** Connects and says hello; resolves with the collector's welcome ack. */
  async connect(): Promise<number> {
    const socket = net.connect({ path: this.opts.path });
    this.socket = socket;
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    this.closed = new Promise((r) => socket.once('close', () => r()));
    const decoder = new FrameDecoder((body) => {
      const m = decodeCollectorMessage(body);
      this.received.push(m);
      if (m.type === 'welcome') this.welcomeAck = this.acked = m.ack;
      if (m.type === 'ack') this.acked = Math.max(this.acked, m.seq);
      this.opts.onMessage?.(m, this);
      for (const w of this.waiters.splice(0)) w();
    });
    socket.on('data', (d: Buffer) => decoder.push(d));
    socket.on('error', () => {});
    if (this.opts.heartbeatMs) {
      const timer = setInterval(() => {
        if (!this.sentSinceTick) this.heartbeat();
        this.sentSinceTick = false;
      }, this.opts.heartbeatMs);
      socket.once('close', () => clearInterval(timer));
    }
    const hello = helloMessage({
      probeVersion: 'test-client',
      instanceId: this.opts.instanceId,
      generation: this.opts.generation,
      clocks: { wallMs: this.opts.wallMs?.() ?? Date.now(), sinceBootMs: this.sinceBoot },
      bootId: this.opts.bootId,
      lastSeq: this.seq,
      lostAtSeq: this.opts.lostAtSeq,
      status: this.opts.status,
    });
    this.send(hello);
    await this.until(() => this.welcomeAck !== null, 5000, 'welcome');
    return this.welcomeAck!;
  }

  send(m: ProbeMessage): boolean {
    this.sentSinceTick = true;
    return this.socket!.write(encodeMessage(m));
  }

  /** Numbers and sends events; returns the last seq used. */
  events(bodies: EventBody[], firstSeq = this.seq + 1): number {
    const t = this.sinceBoot;
    const events = bodies.map((b, i) => ({ ...b, seq: firstSeq + i, t }) as ProbeEvent);
    this.seq = firstSeq + bodies.length - 1;
    // Stamped as the probe's link stamps a batch: a clock sample for the collector.
    this.send({ type: 'events', events, sentAt: t, ackNow: this.opts.deferAcks ? undefined : true });
    return this.seq;
  }

  heartbeat(): void {
    this.send({ type: 'heartbeat', sinceBootMs: this.sinceBoot });
  }

  waitAcked(seq: number, timeoutMs = 5000): Promise<void> {
    return this.until(() => this.acked >= seq, timeoutMs, `ack ${seq}`);
  }

  /** Resolves once `cond` holds after a message; fails after `timeoutMs` or on a close first. */
  private until(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
    if (cond()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${what} within ${timeoutMs} ms`)), timeoutMs);
      const check = () => {
        if (cond()) {
          clearTimeout(timer);
          resolve();
        } else this.waiters.push(check);
      };
      this.waiters.push(check);
      this.socket?.once('close', () => {
        if (!cond()) {
          clearTimeout(timer);
          reject(new Error(`connection closed before ${what}`));
        }
      });
    });
  }

  close(): void {
    this.socket?.destroy();
  }
}

/** A small threads dump of "envd" (pid 42), as a probe without /proc can give one. */
const THREADS_DUMP = Buffer.from('threads of envd (pid 42)\ntask 42 S futex_wait_queue\n');

/** Answers a collector's dump command with THREADS_DUMP in one chunk; true if `m` was one. */
export function answerThreadsDump(m: CollectorMessage, c: ProbeClient): boolean {
  if (m.type !== 'command' || m.op !== 'dump') return false;
  c.send({ type: 'dump.chunk', id: m.id, index: 0, data: THREADS_DUMP });
  const dump = { mode: m.mode ?? 'threads', source: 'proc' as const, complete: true, bytes: THREADS_DUMP.length, chunks: 1, pid: 42 };
  c.send({ type: 'result', id: m.id, ok: true, dump });
  return true;
}
