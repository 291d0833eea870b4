// One probe connection, from accept to close: the collector's role on a Connection
// (proto/src/connection.ts), which does the framing, limits, liveness and states. The guest
// on the other end is untrusted: every frame is size-checked before decoding,
// schema-validated after, and charged to the sandbox's budget (shared by all its
// connections); anything wrong closes this session with a stable error code and touches
// nothing else. Acks go out only after the store has committed the events, and then with
// the connection's next liveness tick (at most HEARTBEAT_INTERVAL_MS later), where one ack
// covers every batch committed meanwhile and stands in for the tick's heartbeat: a probe
// sending a batch a second then reads one frame every two seconds instead of one a second.
// A batch the probe waits on (`ackNow`: its exit flush) is acked at once.
//
// Lifecycle: accept → hello (within HELLO_TIMEOUT_MS, in a frame of at most
// MAX_HELLO_FRAME_BYTES) → welcome{ack} → events/gap/heartbeat … (frames up to
// MAX_FRAME_BYTES) → close (socket end/error, protocol error, budget, idle timeout, superseded).
// Over budget, the session first stops reading for a while (budget.ts), and is cut off only
// when that goes on.

import type net from 'node:net';
import {
  Connection,
  HEARTBEAT_INTERVAL_MS,
  IDLE_TIMEOUT_MS,
  PROTOCOL_VERSION,
  ProtocolError,
  decodeProbeMessage,
  type Closed,
  type CollectorMessage,
  type Hello,
  type ProbeEvent,
  type ProbeMessage,
  type ProtocolErrorCode,
  type ProbeMessageOf,
} from '@vsockdiag/proto';
import type { Budget } from './budget.js';
import { RequestError, Requests, type Answer, type ProbeCommand } from './requests.js';
import type { Logger } from './logger.js';

/** An honest probe sends its hello the moment it connects; a connection that has not said
 *  hello holds one of the sandbox's few pending slots, so it does not get to hold it long. */
export const HELLO_TIMEOUT_MS = 2000;

/** What a probe may send: its hello first, then the rest. */
const ADMITS = {
  'awaiting-hello': ['hello'],
  open: ['events', 'gap', 'heartbeat', 'dump.chunk', 'result'],
} as const;

type Admitted = ProbeMessageOf<(typeof ADMITS)[keyof typeof ADMITS][number]>;

export interface SessionHost {
  /** A valid hello arrived: returns the ack floor (highest seq already stored). */
  onHello(session: Session, hello: Hello): number;
  /** Validated, in-order events; `done` must be called once they are durable. */
  onEvents(session: Session, events: ProbeEvent[], sentAt: number | undefined, done: (err: Error | null) => void): void;
  onGap(session: Session, from: number, to: number): void;
  onHeartbeat(session: Session, sinceBootMs: number): void;
  onClose(session: Session, reason: string, code: ProtocolErrorCode | null): void;
}

export class Session {
  /** The collector's number for this connection (counted per sandbox), set when its hello
   *  is accepted; 0 before. */
  number = 0;
  hello: Hello | null = null;
  private lastSeq = 0;
  /** The highest committed seq not acked yet (0: none), for the next liveness tick. */
  private owedAck = 0;
  /** Commands asked for while the hello is being accepted (the sandbox's verdict can start a
   *  dump from inside onHello): they go out right after the welcome, never before it. */
  private early: CollectorMessage[] | null = null;
  private readonly requests = new Requests();
  private readonly connection: Connection<ProbeMessage, CollectorMessage, Admitted['type']>;

  constructor(
    socket: net.Socket,
    private readonly host: SessionHost,
    private readonly log: Logger,
    /** The sandbox's budget, not this connection's: a reconnect does not refill it. */
    private readonly budget: Budget,
  ) {
    this.connection = new Connection(socket, {
      peer: 'probe',
      decode: decodeProbeMessage,
      admits: ADMITS,
      helloTimeoutMs: HELLO_TIMEOUT_MS,
      liveness: {
        heartbeatMs: HEARTBEAT_INTERVAL_MS,
        idleTimeoutMs: IDLE_TIMEOUT_MS,
        heartbeat: () => ({ type: 'heartbeat' }),
        owed: () => this.takeOwedAck(),
      },
      budget,
      onMessage: (m) => this.handle(m),
      onClose: (closed) => this.closed(closed),
    });
  }

  get isClosed(): boolean {
    return !this.connection.live;
  }

  /**
   * Sends a command and waits for its answer. A dump's bytes are solicited, so they are
   * granted on top of the probe's budget, for this request only: what is left of the grant
   * is taken back when the request settles (answered, timed out, or the session closed).
   */
  request(command: ProbeCommand, timeoutMs: number, grantBytes = 0): Promise<Answer> {
    if (!this.hello || !this.connection.live) return Promise.reject(new RequestError('CLOSED', 'the probe session is not open'));
    const { id, answer } = this.requests.start(timeoutMs);
    if (grantBytes) {
      const { release } = this.budget.grant(grantBytes);
      void answer.then(release, release);
    }
    const m: CollectorMessage = { type: 'command', id, ...command };
    if (this.early) this.early.push(m);
    else this.connection.send(m);
    return answer;
  }

  close(reason: string, code: ProtocolErrorCode | null): void {
    this.connection.close(reason, code);
  }

  private closed({ reason, code, error }: Closed): void {
    if (error instanceof ProtocolError) {
      this.log.warn({ code, err: error.message, session: this.number }, 'closing probe session');
    } else if (code === 'ERR_INTERNAL') {
      this.log.error({ err: error }, 'unexpected error handling a probe message');
    }
    this.requests.failAll(new RequestError('CLOSED', `the probe session closed: ${reason}`));
    this.host.onClose(this, reason, code);
  }

  private takeOwedAck(): CollectorMessage | null {
    if (this.owedAck === 0) return null;
    const seq = this.owedAck;
    this.owedAck = 0;
    return { type: 'ack', seq };
  }

  private handle(m: Admitted): void {
    switch (m.type) {
      case 'hello': {
        if (m.protocol !== PROTOCOL_VERSION) {
          throw new ProtocolError('ERR_VERSION', `protocol ${m.protocol} not supported (this collector speaks ${PROTOCOL_VERSION})`);
        }
        this.hello = m;
        this.early = [];
        const ack = this.host.onHello(this, m);
        this.lastSeq = ack;
        // The probe has said who it is: full-size frames from here on.
        this.connection.open();
        this.connection.send({ type: 'welcome', ack, hostWallMs: Date.now() });
        for (const early of this.early) this.connection.send(early);
        this.early = null;
        return;
      }
      case 'events': {
        const events = m.events;
        for (const e of events) {
          if (e.seq !== this.lastSeq + 1) {
            throw new ProtocolError('ERR_UNEXPECTED', `event seq ${e.seq} after ${this.lastSeq} (must be consecutive)`);
          }
          this.lastSeq = e.seq;
        }
        if (events.length === 0) return;
        // Over the events budget: read no more for a while (or cut off: this throws).
        this.connection.throttle(this.budget.spendEvents(events.length));
        const upTo = this.lastSeq;
        const ackNow = m.ackNow === true;
        this.host.onEvents(this, events, m.sentAt, (err) => {
          if (err) {
            this.log.error({ err }, 'store commit failed; the probe will resend');
            this.close('store commit failed', 'ERR_STORE');
          } else {
            this.owedAck = Math.max(this.owedAck, upTo);
            if (ackNow) this.connection.send(this.takeOwedAck()!);
          }
        });
        return;
      }
      case 'gap':
        if (m.from !== this.lastSeq + 1 || m.to < m.from) {
          throw new ProtocolError('ERR_UNEXPECTED', `gap ${m.from}..${m.to} after seq ${this.lastSeq}`);
        }
        this.lastSeq = m.to;
        this.host.onGap(this, m.from, m.to);
        return;
      case 'heartbeat':
        this.host.onHeartbeat(this, m.sinceBootMs);
        return;
      case 'dump.chunk':
        this.requests.onChunk(m);
        return;
      case 'result':
        this.requests.onResult(m);
        return;
    }
  }
}
