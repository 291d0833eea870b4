// The probe's link to the collector: dial, hello, replay what the collector has not
// acked, stream new events, answer commands, heartbeat. Any failure (a dial error, a
// socket error, a protocol error, or silence past the idle timeout, which is how a
// snapshot's transport reset can look) ends the session; the next attempt uses a fresh
// socket after a jittered backoff.

import { EventEmitter } from 'node:events';
import type net from 'node:net';
import {
  FrameDecoder,
  HEARTBEAT_INTERVAL_MS,
  IDLE_TIMEOUT_MS,
  MAX_EVENTS_PER_BATCH,
  ProtocolError,
  decodeCollectorMessage,
  dial,
  encodeMessage,
  type CollectorMessage,
  type Hello,
  type ProbeMessage,
} from '@vsockdiag/proto';
import { Backoff } from './backoff.js';
import { channelFor, runCommand, type CommandHandler } from './commands.js';
import type { EventRing } from './ring.js';

export interface LinkOptions {
  address: string;
  ring: EventRing;
  /** Builds the hello for a new session (it carries the current status keyframe). */
  hello: (generation: number) => Omit<Hello, 'type'>;
  onCommand: CommandHandler;
  sinceBootMs: () => number;
  log: (level: 'info' | 'warn', message: string) => void;
  heartbeatMs?: number;
  idleTimeoutMs?: number;
  connectTimeoutMs?: number;
  backoff?: Backoff;
  /** Dial errors that will not go away by retrying soon (e.g. no vsock in this kernel).
   *  They are retried only every FATAL_RETRY_MS, and said loudly once. */
  isFatal?: (err: unknown) => boolean;
}

export const FATAL_RETRY_MS = 30_000;

export class Link extends EventEmitter {
  /** Sessions opened so far; the current one's number is sent in its hello. */
  generation = 0;
  /** Highest seq the collector has confirmed durable (in any session). */
  acked = 0;
  private socket: net.Socket | null = null;
  private welcomed = false;
  private sentUpTo = 0;
  private flushQueued = false;
  private waitingDrain = false;
  private stopped = false;
  private wake: (() => void) | null = null;
  private lastTx = 0;
  private readonly backoff: Backoff;
  private readonly heartbeatMs: number;
  private readonly idleTimeoutMs: number;

  constructor(private readonly opts: LinkOptions) {
    super();
    this.backoff = opts.backoff ?? new Backoff();
    this.heartbeatMs = opts.heartbeatMs ?? HEARTBEAT_INTERVAL_MS;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
  }

  get connected(): boolean {
    return this.welcomed;
  }

  start(): void {
    void this.run();
  }

  stop(): void {
    this.stopped = true;
    this.socket?.destroy();
    this.wake?.();
  }

  /** New events are in the ring: send them soon (coalesced per turn of the event loop). */
  flush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    setImmediate(() => {
      this.flushQueued = false;
      this.sendPending();
    });
  }

  /** Resolves true once `seq` is acked, false after `timeoutMs`. */
  waitAcked(seq: number, timeoutMs: number): Promise<boolean> {
    if (this.acked >= seq) return Promise.resolve(true);
    return new Promise((resolve) => {
      const onAck = () => {
        if (this.acked < seq) return;
        cleanup();
        resolve(true);
      };
      const timer = setTimeout(() => {
        cleanup();
        resolve(false);
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.removeListener('ack', onAck);
      };
      this.on('ack', onAck);
    });
  }

  private async run(): Promise<void> {
    let fatalSaid = '';
    while (!this.stopped) {
      let delay: number | null = null;
      try {
        const socket = await dial(this.opts.address, { timeoutMs: this.opts.connectTimeoutMs ?? 3000 });
        if (this.stopped) {
          socket.destroy();
          break;
        }
        this.generation++;
        await this.session(socket);
      } catch (err) {
        const message = `connect ${this.opts.address}: ${(err as Error).message}`;
        if (this.opts.isFatal?.(err)) {
          if (message !== fatalSaid) this.opts.log('warn', `${message} (not a passing error; retrying every ${FATAL_RETRY_MS / 1000} s)`);
          fatalSaid = message;
          delay = FATAL_RETRY_MS;
        } else {
          fatalSaid = '';
          this.opts.log('warn', message);
        }
      }
      if (!this.stopped) await this.sleep(delay ?? this.backoff.next());
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  private session(socket: net.Socket): Promise<void> {
    return new Promise((resolve) => {
      this.socket = socket;
      this.welcomed = false;
      let lastRx = Date.now();
      const decoder = new FrameDecoder((body) => this.handle(decodeCollectorMessage(body)));
      const fail = (err: Error) => {
        const code = err instanceof ProtocolError ? ` (${err.code})` : '';
        this.opts.log('warn', `session ${this.generation}: ${err.message}${code}`);
        socket.destroy();
      };
      socket.setNoDelay?.(true);
      socket.on('data', (chunk: Buffer) => {
        lastRx = Date.now();
        try {
          decoder.push(chunk);
        } catch (err) {
          fail(err as Error);
        }
      });
      socket.on('end', () => socket.end());
      socket.on('error', (err) => this.opts.log('warn', `session ${this.generation}: ${err.message}`));
      socket.on('drain', () => {
        this.waitingDrain = false;
        this.sendPending();
      });
      const heartbeat = setInterval(() => {
        if (Date.now() - lastRx > this.idleTimeoutMs) {
          fail(new ProtocolError('ERR_IDLE', `no word from the collector for ${this.idleTimeoutMs} ms`));
          return;
        }
        // Any frame proves liveness: a heartbeat only when nothing else went out.
        if (Date.now() - this.lastTx >= this.heartbeatMs - 50) this.write({ type: 'heartbeat', sinceBootMs: this.opts.sinceBootMs() });
      }, this.heartbeatMs);
      socket.once('close', () => {
        clearInterval(heartbeat);
        this.socket = null;
        if (this.welcomed) this.emit('disconnected');
        this.welcomed = false;
        this.waitingDrain = false;
        resolve();
      });
      this.write({ type: 'hello', ...this.opts.hello(this.generation) });
    });
  }

  private handle(m: CollectorMessage): void {
    switch (m.type) {
      case 'welcome':
        if (this.welcomed) throw new ProtocolError('ERR_UNEXPECTED', 'second welcome');
        this.welcomed = true;
        this.backoff.reset();
        // The collector's word replaces ours: it may be a different collector (a clone's,
        // or a restarted one that lost what it had not committed).
        this.sentUpTo = Math.min(m.ack, this.opts.ring.lastSeq);
        this.acked = this.sentUpTo;
        this.emit('ack', this.acked);
        this.emit('connected', this.generation);
        this.sendPending();
        return;
      case 'ack':
        if (!this.welcomed) throw new ProtocolError('ERR_UNEXPECTED', 'ack before welcome');
        if (m.seq > this.acked) {
          this.acked = Math.min(m.seq, this.sentUpTo);
          this.emit('ack', this.acked);
        }
        return;
      case 'command':
        if (this.socket) runCommand(this.opts.onCommand, m, channelFor(this.socket));
        return;
      case 'heartbeat':
        return;
    }
  }

  private sendPending(): void {
    if (!this.welcomed || !this.socket) return;
    const ring = this.opts.ring;
    while (!this.waitingDrain && this.sentUpTo < ring.lastSeq) {
      const { gap, events } = ring.after(this.sentUpTo, MAX_EVENTS_PER_BATCH);
      if (gap) {
        this.write({ type: 'gap', ...gap });
        this.sentUpTo = gap.to;
      }
      if (events.length === 0) break;
      this.sentUpTo = events[events.length - 1]!.seq;
      if (!this.write({ type: 'events', events })) this.waitingDrain = true;
    }
  }

  private write(m: ProbeMessage): boolean {
    if (!this.socket || this.socket.destroyed) return false;
    this.lastTx = Date.now();
    return this.socket.write(encodeMessage(m));
  }
}
