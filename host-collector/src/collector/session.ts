// One probe connection, from accept to close. The guest on the other end is untrusted:
// every frame is size-checked before decoding, schema-validated after, and charged to the
// sandbox's budget (shared by all its connections); anything wrong closes this session with
// a stable error code and touches nothing else. Acks go out only after the store has
// committed the events.
//
// Lifecycle: accept → hello (within HELLO_TIMEOUT_MS, in a frame of at most
// MAX_HELLO_FRAME_BYTES) → welcome{ack} → events/gap/heartbeat … (frames up to
// MAX_FRAME_BYTES) → close (socket end/error, protocol error, budget, idle timeout, superseded).

import type net from 'node:net';
import {
  FrameDecoder,
  HEARTBEAT_INTERVAL_MS,
  IDLE_TIMEOUT_MS,
  MAX_FRAME_BYTES,
  MAX_HELLO_FRAME_BYTES,
  PROTOCOL_VERSION,
  ProtocolError,
  decodeProbeMessage,
  encodeMessage,
  type CollectorMessage,
  type Hello,
  type ProbeEvent,
  type ProbeMessage,
  type ProtocolErrorCode,
} from '@vsockdiag/proto';
import type { Budget } from './budget.js';
import { RequestError, Requests, type Answer, type ProbeCommand } from './requests.js';
import type { Logger } from './logger.js';

/** An honest probe sends its hello the moment it connects; a connection that has not said
 *  hello holds one of the sandbox's few pending slots, so it does not get to hold it long. */
export const HELLO_TIMEOUT_MS = 2000;

export interface SessionHost {
  /** A valid hello arrived: returns the ack floor (highest seq already stored). */
  onHello(session: Session, hello: Hello): number;
  /** Validated, in-order events; `done` must be called once they are durable. */
  onEvents(session: Session, events: ProbeEvent[], done: (err: Error | null) => void): void;
  onGap(session: Session, from: number, to: number): void;
  onHeartbeat(session: Session, sinceBootMs: number): void;
  onClose(session: Session, reason: string, code: ProtocolErrorCode | null): void;
}

export class Session {
  /** Set by the sandbox when the hello is accepted. */
  generation = 0;
  hello: Hello | null = null;
  private lastSeq = 0;
  private closed = false;
  private readonly requests = new Requests();
  private readonly decoder: FrameDecoder;
  private lastRx = Date.now();
  /** Any frame proves we are alive to the probe: a heartbeat is only sent when nothing else was. */
  private lastTx = 0;
  private readonly timer: NodeJS.Timeout;
  private helloTimer: NodeJS.Timeout | null;

  constructor(
    readonly socket: net.Socket,
    private readonly host: SessionHost,
    private readonly log: Logger,
    /** The sandbox's budget, not this connection's: a reconnect does not refill it. */
    private readonly budget: Budget,
  ) {
    this.decoder = new FrameDecoder((body) => this.handle(decodeProbeMessage(body)), MAX_HELLO_FRAME_BYTES);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('end', () => {
      try {
        this.decoder.end();
        this.close('probe closed the connection', null);
      } catch (err) {
        this.fail(err);
      }
    });
    socket.on('error', (err) => this.close(`socket error: ${err.message}`, null));
    socket.on('close', () => this.close('connection closed', null));
    this.helloTimer = setTimeout(() => this.fail(new ProtocolError('ERR_UNEXPECTED', `no hello within ${HELLO_TIMEOUT_MS} ms`)), HELLO_TIMEOUT_MS);
    this.timer = setInterval(() => {
      const now = Date.now();
      if (now - this.lastRx > IDLE_TIMEOUT_MS) {
        this.fail(new ProtocolError('ERR_IDLE', `no word from the probe for ${IDLE_TIMEOUT_MS} ms`));
      } else if (this.hello && now - this.lastTx >= HEARTBEAT_INTERVAL_MS - 50) {
        this.send({ type: 'heartbeat' });
      }
    }, HEARTBEAT_INTERVAL_MS);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  send(m: CollectorMessage): void {
    if (this.closed) return;
    this.lastTx = Date.now();
    this.socket.write(encodeMessage(m));
  }

  /**
   * Sends a command and waits for its answer. A dump's bytes are solicited, so they are
   * granted on top of the probe's budget, for this request only: what is left of the grant
   * is taken back when the request settles (answered, timed out, or the session closed).
   */
  request(command: ProbeCommand, timeoutMs: number, grantBytes = 0): Promise<Answer> {
    if (this.closed || !this.hello) return Promise.reject(new RequestError('CLOSED', 'the probe session is not open'));
    const { id, answer } = this.requests.start(timeoutMs);
    if (grantBytes) {
      const { release } = this.budget.grant(grantBytes);
      void answer.then(release, release);
    }
    this.send({ type: 'command', id, ...command });
    return answer;
  }

  close(reason: string, code: ProtocolErrorCode | null): void {
    if (this.closed) return;
    this.closed = true;
    this.requests.failAll(new RequestError('CLOSED', `the probe session closed: ${reason}`));
    clearInterval(this.timer);
    this.clearHelloTimer();
    this.socket.destroy();
    this.host.onClose(this, reason, code);
  }

  private clearHelloTimer(): void {
    if (this.helloTimer) clearTimeout(this.helloTimer);
    this.helloTimer = null;
  }

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    this.lastRx = Date.now();
    try {
      if (!this.budget.spendBytes(chunk.length)) {
        throw new ProtocolError('ERR_RATE_LIMIT', 'probe exceeded its byte budget');
      }
      this.decoder.push(chunk);
    } catch (err) {
      this.fail(err);
    }
  }

  private fail(err: unknown): void {
    if (err instanceof ProtocolError) {
      this.log.warn({ code: err.code, err: err.message, generation: this.generation }, 'closing probe session');
      this.close(err.message, err.code);
    } else {
      this.log.error({ err }, 'unexpected error handling a probe message');
      this.close(`internal error: ${(err as Error).message}`, 'ERR_INTERNAL');
    }
  }

  private handle(m: ProbeMessage): void {
    if (this.closed) return;
    if (!this.budget.spendFrame()) throw new ProtocolError('ERR_RATE_LIMIT', 'probe exceeded its frame budget');
    if (!this.hello && m.type !== 'hello') throw new ProtocolError('ERR_UNEXPECTED', `${m.type} before hello`);
    switch (m.type) {
      case 'hello': {
        if (this.hello) throw new ProtocolError('ERR_UNEXPECTED', 'second hello');
        if (m.protocol !== PROTOCOL_VERSION) {
          throw new ProtocolError('ERR_VERSION', `protocol ${m.protocol} not supported (this collector speaks ${PROTOCOL_VERSION})`);
        }
        this.hello = m;
        this.clearHelloTimer();
        const ack = this.host.onHello(this, m);
        // The probe has said who it is: full-size frames from here on.
        this.decoder.maxFrameBytes = MAX_FRAME_BYTES;
        this.lastSeq = ack;
        this.send({ type: 'welcome', ack, hostWallMs: Date.now() });
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
        const upTo = this.lastSeq;
        this.host.onEvents(this, events, (err) => {
          if (err) {
            this.log.error({ err }, 'store commit failed; the probe will resend');
            this.close('store commit failed', 'ERR_STORE');
          } else {
            this.send({ type: 'ack', seq: upTo });
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
