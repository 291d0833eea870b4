// The probe's link to the collector: dial and hello (the hello written on the raw socket,
// dial.ts), replay what the collector has not acked, stream new events, answer commands,
// heartbeat. Any failure (a dial error, a socket error, a protocol error, or silence past
// the idle timeout, which is how a snapshot's transport reset can look) ends the session;
// the next attempt uses a fresh socket after a jittered backoff.

import { EventEmitter } from 'node:events';
import type net from 'node:net';
import {
  Connection,
  HEARTBEAT_INTERVAL_MS,
  IDLE_TIMEOUT_MS,
  MAX_EVENTS_PER_BATCH,
  ProtocolError,
  decodeCollectorMessage,
  encodeMessage,
  type CollectorMessage,
  type CollectorMessageOf,
  type Hello,
  type ProbeMessage,
} from '@vsockdiag/proto';
import { Backoff } from './backoff.js';
import { channelFor, runCommand, type CommandHandler } from './commands.js';
import { collectorDialer, type CollectorDialer } from './dial.js';
import type { EventRing } from './ring.js';

/** What a collector may send: the welcome (its answer to our hello) first, then the rest. */
const ADMITS = {
  'awaiting-hello': ['welcome'],
  open: ['ack', 'command', 'heartbeat'],
} as const;

type Admitted = CollectorMessageOf<(typeof ADMITS)[keyof typeof ADMITS][number]>;
type SessionConnection = Connection<CollectorMessage, ProbeMessage, Admitted['type']>;

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
  /** The owner calls tick() at least every heartbeatMs, and the session keeps no liveness
   *  timer of its own (see Liveness.driven). */
  drivenLiveness?: boolean;
  connectTimeoutMs?: number;
  backoff?: Backoff;
  /** Dial errors that will not go away by retrying soon (e.g. no vsock in this kernel).
   *  They are retried only every FATAL_RETRY_MS, and said loudly once. */
  isFatal?: (err: unknown) => boolean;
  /** An open session was lost: called before lostAtSeq is taken, so what the loss brought
   *  along (a restore's NEW_VMGENID uevent) is in the ring before the mark. */
  onLost?: () => void;
}

export const FATAL_RETRY_MS = 30_000;

export class Link extends EventEmitter {
  /** Sessions opened so far; the current one's number is sent in its hello. */
  generation = 0;
  /** Highest seq the collector has confirmed durable (in any session). */
  acked = 0;
  /** The ring's lastSeq when the last open session was lost (undefined before): the next
   *  hello says it, so the collector files the events made before it under the VM's life
   *  they were made in, should this loss be a restore. */
  lostAtSeq: number | undefined;
  private connection: SessionConnection | null = null;
  private sentUpTo = 0;
  /** The highest seq a waitAcked caller waits for: until it is acked, every batch sent asks
   *  for its ack at once (the collector otherwise acks with its next liveness tick, up to 2 s
   *  later). */
  private awaited = 0;
  private flushQueued = false;
  private waitingDrain = false;
  private stopped = false;
  private wake: (() => void) | null = null;
  /** Settles once the first attempt is over: its hello written, or the attempt failed.
   *  Start-up work that would load node:net waits for it (Probe.start), so that it does not
   *  hold up the first hello. */
  readonly firstAttempt: Promise<void>;
  private attempted!: () => void;
  private readonly dial: CollectorDialer;
  private readonly backoff: Backoff;
  private readonly heartbeatMs: number;
  private readonly idleTimeoutMs: number;

  constructor(private readonly opts: LinkOptions) {
    super();
    this.firstAttempt = new Promise((resolve) => {
      this.attempted = resolve;
    });
    this.dial = collectorDialer(opts.address);
    this.backoff = opts.backoff ?? new Backoff();
    this.heartbeatMs = opts.heartbeatMs ?? HEARTBEAT_INTERVAL_MS;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
  }

  get connected(): boolean {
    return this.connection?.state === 'open';
  }

  start(): void {
    void this.run();
  }

  stop(): void {
    this.stopped = true;
    this.connection?.close('stopped');
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

  /** The owner's liveness tick (drivenLiveness). It runs after what this turn of the event
   *  loop queued for sending (flush's setImmediate comes first), so a heartbeat goes out only
   *  when nothing else did; with nothing queued, at once (a settled probe's usual tick: no
   *  extra turn of the event loop). */
  tick(): void {
    if (this.flushQueued) setImmediate(() => this.connection?.tick());
    else this.connection?.tick();
  }

  /** Resolves true once `seq` is acked, false after `timeoutMs`. */
  waitAcked(seq: number, timeoutMs: number): Promise<boolean> {
    if (this.acked >= seq) return Promise.resolve(true);
    // A batch already sent without asking is acked with the collector's next tick.
    this.awaited = Math.max(this.awaited, seq);
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
        const socket = await this.dial(this.opts.connectTimeoutMs ?? 3000, () => {
          this.generation++;
          return encodeMessage({ type: 'hello', ...this.opts.hello(this.generation) });
        });
        this.attempted();
        if (this.stopped) {
          socket.destroy();
          break;
        }
        await this.session(socket);
      } catch (err) {
        this.attempted();
        const message = `connect ${this.opts.address}: ${describeError(err)}`;
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
      const connection: SessionConnection = new Connection<CollectorMessage, ProbeMessage, Admitted['type']>(socket, {
        peer: 'collector',
        decode: decodeCollectorMessage,
        admits: ADMITS,
        greeted: true,
        liveness: {
          heartbeatMs: this.heartbeatMs,
          idleTimeoutMs: this.idleTimeoutMs,
          heartbeat: () => ({ type: 'heartbeat', sinceBootMs: this.opts.sinceBootMs() }),
          driven: this.opts.drivenLiveness ?? false,
        },
        onMessage: (m) => this.handle(connection, m),
        onDrain: () => {
          this.waitingDrain = false;
          this.sendPending();
        },
        onClose: ({ error, from }) => {
          if (error) {
            const code = error instanceof ProtocolError ? ` (${error.code})` : '';
            this.opts.log('warn', `session ${this.generation}: ${error.message}${code}`);
          }
          this.connection = null;
          this.waitingDrain = false;
          if (from === 'open') {
            this.opts.onLost?.();
            this.lostAtSeq = this.opts.ring.lastSeq;
            this.emit('disconnected');
          }
          resolve();
        },
      });
      this.connection = connection;
    });
  }

  private handle(connection: SessionConnection, m: Admitted): void {
    switch (m.type) {
      case 'welcome':
        connection.open();
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
        if (m.seq > this.acked) {
          this.acked = Math.min(m.seq, this.sentUpTo);
          this.emit('ack', this.acked);
        }
        return;
      case 'command':
        runCommand(this.opts.onCommand, m, channelFor(connection));
        return;
      case 'heartbeat':
        return;
    }
  }

  private sendPending(): void {
    const connection = this.connection;
    if (connection?.state !== 'open') return;
    const ring = this.opts.ring;
    while (!this.waitingDrain && this.sentUpTo < ring.lastSeq) {
      const { gap, events } = ring.after(this.sentUpTo, MAX_EVENTS_PER_BATCH);
      if (gap) {
        connection.send({ type: 'gap', ...gap });
        this.sentUpTo = gap.to;
      }
      if (events.length === 0) break;
      this.sentUpTo = events[events.length - 1]!.seq;
      // Stamped as it is written: the collector maps guest times by the least delayed stamp.
      const ackNow = this.awaited > this.acked || undefined;
      if (!connection.send({ type: 'events', events, sentAt: this.opts.sinceBootMs(), ackNow })) this.waitingDrain = true;
    }
  }
}

/** An error's message with its errno name when the message does not say it: the addon's
 *  say "No such file or directory", net's "connect ENOENT /path". */
function describeError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && !message.includes(code) ? `${message} (${code})` : message;
}
