// One probe ↔ collector connection as a state machine, whichever side this is and whichever
// side dialled: the socket, the frame decoder and its limit, the hello exchange and its
// deadline, heartbeats and the idle timeout, an optional budget, and the error codes. Modelled
// on Firecracker's vsock connection state machine (csm/): one set of states, each documented,
// and one table of the moves between them.
//
// Four kinds of connection run on it, and differ only in their role (ConnectionRole): the
// collector's side of a probe session (host-collector session.ts), the probe's side of it
// (guest-probe link.ts), the probe's command port (guest-probe commands.ts) and the collector
// dialling that port (host-collector probe-dial.ts). A role says who speaks first, which
// messages each state admits, and what to do with them; it never touches the socket.

import { encodeMessage } from './codec.js';
import { ProtocolError } from './errors.js';
import { FrameDecoder } from './frame.js';
import { MAX_FRAME_BYTES, MAX_HELLO_FRAME_BYTES } from './limits.js';
import type { CollectorMessage, ProbeMessage } from './messages.js';
import type { ProtocolErrorCode } from './codes.js';

/** The states of a connection, in the order it goes through them. */
export const CONNECTION_STATES = {
  /** The socket is up; the hello exchange is not complete (the collector has not accepted the
   *  probe's hello, or the probe has not had the collector's welcome). Only the message that
   *  completes the exchange is admitted, in frames of at most MAX_HELLO_FRAME_BYTES, and the
   *  hello deadline runs. A side with nothing to await (the command port) leaves at once. */
  'awaiting-hello': 'the hello exchange is not complete',
  /** The exchange is complete: the role's messages flow, in frames of up to MAX_FRAME_BYTES. */
  open: 'the hello exchange is complete; messages flow',
  /** The end is decided and was reported (onClose, exactly once); the socket is being
   *  destroyed. Nothing more is read, dispatched or sent, and no timer runs. Lasts until the
   *  socket's 'close', normally a turn of the event loop. */
  closing: 'the end is decided and reported; the socket is going',
  /** The socket is gone. Terminal. */
  closed: 'the socket is gone',
} as const;

export type ConnectionState = keyof typeof CONNECTION_STATES;

/** What moves a connection from one state to the next. */
export const CONNECTION_EVENTS = {
  /** The role says the hello exchange completed. */
  opened: 'the hello exchange completed',
  /** The end was decided: by this side, by the peer's end of stream, by a socket error, or by
   *  a broken rule (a ProtocolError, which includes silence and a missed hello deadline). */
  close: 'the end was decided',
  /** The socket emitted 'close'. */
  gone: 'the socket closed',
} as const;

export type ConnectionEvent = keyof typeof CONNECTION_EVENTS;

/** Every legal move, and only those: `transition` does not compile for a pair missing here. */
export const CONNECTION_MOVES = {
  'awaiting-hello': { opened: 'open', close: 'closing' },
  open: { close: 'closing' },
  closing: { gone: 'closed' },
  closed: {},
} as const satisfies { readonly [S in ConnectionState]: { readonly [E in ConnectionEvent]?: ConnectionState } };

type Moves = typeof CONNECTION_MOVES;
/** The events a connection in state S may take (for a union of states: those all of them may). */
export type LegalEvent<S extends ConnectionState> = keyof Moves[S] & ConnectionEvent;

/**
 * The state after `event` in state `from`. The type admits only legal pairs, so a caller must
 * first narrow its state (`if (state === 'open') state = transition(state, 'close')`). A pair
 * forced past the types throws ERR_UNEXPECTED.
 */
export function transition<S extends ConnectionState, E extends LegalEvent<S>>(from: S, event: E): Moves[S][E] {
  const to = (CONNECTION_MOVES[from] as { readonly [K in ConnectionEvent]?: ConnectionState })[event];
  if (to === undefined) throw new ProtocolError('ERR_UNEXPECTED', `${event} in state ${from}`);
  return to as Moves[S][E];
}

/** The states a connection reads in. */
export type ReadingState = 'awaiting-hello' | 'open';

/** Which message types a side takes in each state it reads in. Awaiting hello, that is the
 *  message that completes the exchange (the peer's hello, or the collector's welcome). */
export interface Admits<T extends string> {
  readonly 'awaiting-hello': readonly T[];
  readonly open: readonly T[];
}

/** Returns `m` if `admits` takes it in `state`; otherwise throws ERR_UNEXPECTED. */
export function admit<M extends { type: string }, T extends string>(admits: Admits<T>, state: ReadingState, m: M): Extract<M, { type: T }> {
  const type = m.type as T;
  if (admits[state].includes(type)) return m as Extract<M, { type: T }>;
  const awaited = admits['awaiting-hello'];
  if (state === 'awaiting-hello') throw new ProtocolError('ERR_UNEXPECTED', `${type} before ${awaited.join(' or ')}`);
  if (awaited.includes(type)) throw new ProtocolError('ERR_UNEXPECTED', `second ${type}`);
  throw new ProtocolError('ERR_UNEXPECTED', `${type} is not admitted on this connection`);
}

/** A tick comes heartbeatMs after the last one give or take timer jitter: a frame the last
 *  tick sent must not look too recent to need the next one. */
const TICK_SLACK_MS = 50;
/** How late a timer may come before this side counts itself stalled rather than the peer silent. */
const STALL_SLACK_MS = 250;

export interface Liveness<Out> {
  /** How often the idle check runs, and the longest this side stays silent. */
  heartbeatMs: number;
  /** Silence from the peer longer than this closes with ERR_IDLE (in every reading state). */
  idleTimeoutMs: number;
  /** Sent on a tick when nothing else went out since the last: any frame proves liveness. */
  heartbeat: () => Out;
  /** A frame this side holds back for its next tick (the collector's deferred ack; null when
   *  none): sent on the tick whatever else went out meanwhile, and in place of a heartbeat,
   *  since any frame proves liveness. */
  owed?: () => Out | null;
  /** The owner calls tick() at least every heartbeatMs and the connection keeps no timer of
   *  its own: a process that wakes that often anyway (the probe's sample loop) then wakes
   *  once a second instead of twice. A gap between the owner's ticks longer than
   *  heartbeatMs is this side's own stall, as a late timer is. */
  driven?: boolean;
}

/** A budget the peer's bytes and frames are charged to. Each spend answers how long to stop
 *  reading (ms; 0: read on), which is how a peer over budget is throttled: its writes block on
 *  its side and nothing it sent is lost. A spend throws (a ProtocolError, ERR_RATE_LIMIT) to
 *  cut the peer off. */
export interface Allowance {
  spendBytes(n: number): number;
  spendFrame(): number;
  /** The connection stayed paused this long (ms) for a throttle. */
  held?(ms: number): void;
}

export interface Closed {
  /** Why, in words (for logs and the session history). */
  reason: string;
  /** A code when something was wrong (the ProtocolError's, or ERR_INTERNAL for an exception
   *  in the role); null for an ordinary end, a socket error included. */
  code: ProtocolErrorCode | null;
  /** What failed, if anything did: a ProtocolError, the socket's error, or the role's. */
  error?: Error;
  /** The state it closed from: whether the hello exchange had completed. */
  from: ReadingState;
}

/** What the connection needs of its socket (a net.Socket has all of it). */
export interface ConnectionSocket {
  write(chunk: Uint8Array): boolean;
  destroy(): void;
  setNoDelay?(noDelay?: boolean): unknown;
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'end' | 'close' | 'drain', listener: () => void): unknown;
  /** Stop and restart reading (a throttle); a socket without them cannot be throttled. */
  pause?(): unknown;
  resume?(): unknown;
}

/** One side's part: everything that differs between the four kinds of connection. */
export interface ConnectionRole<In extends { type: string }, Out, T extends In['type']> {
  /** Who is at the other end, for the reasons ("no word from the probe …"). */
  peer: string;
  /** Decodes and validates a frame body from the peer (decodeProbeMessage or decodeCollectorMessage). */
  decode(body: Uint8Array): In;
  admits: Admits<T>;
  /** This side speaks first: sent as the connection starts (the probe's hello). */
  hello?: Out;
  /** This side spoke first before the connection took the socket: its hello went out on the
   *  raw fd (the probe writes it before node:net loads). Counts as `hello` for liveness. */
  greeted?: boolean;
  /** Close with ERR_UNEXPECTED when still awaiting hello after this long. */
  helloTimeoutMs?: number;
  /** Heartbeats and the idle timeout; without it the connection lives until either end closes.
   *  A side heartbeats once the peer has heard from it: from the start if it spoke first,
   *  from open otherwise. */
  liveness?: Liveness<Out>;
  /** Charged for every chunk (before decoding) and every frame (before dispatch). */
  budget?: Allowance;
  /** An admitted message. Throwing closes the connection: a ProtocolError with its code, any
   *  other error with ERR_INTERNAL. */
  onMessage(m: Extract<In, { type: T }>): void;
  /** The connection entered closing: called once, whatever ended it. */
  onClose(closed: Closed): void;
  /** The socket took everything after a send() that returned false. */
  onDrain?(): void;
}

export class Connection<In extends { type: string }, Out extends ProbeMessage | CollectorMessage, T extends In['type'] = In['type']> {
  private current: ConnectionState = 'awaiting-hello';
  private readonly decoder: FrameDecoder;
  private lastRx = Date.now();
  private lastTx = 0;
  /** When the liveness tick last ran: a tick that comes late means this side was stalled. */
  private lastTick = Date.now();
  private readonly ticker: NodeJS.Timeout | null;
  private helloTimer: NodeJS.Timeout | null = null;
  /** A throttle: reading stopped until the timer fires (see throttle()). */
  private holdTimer: NodeJS.Timeout | null = null;
  private holdStart = 0;
  private holdFor = 0;
  /** Time spent held, added to the hello deadline: the peer could not be heard meanwhile. */
  private heldMs = 0;
  private drainWaiters: Array<{ resolve: () => void; reject: (err: Error) => void }> = [];

  constructor(
    private readonly socket: ConnectionSocket,
    private readonly role: ConnectionRole<In, Out, T>,
  ) {
    this.decoder = new FrameDecoder((body) => this.dispatch(role.decode(body)), MAX_HELLO_FRAME_BYTES);
    socket.setNoDelay?.(true);
    socket.on('data', (chunk) => this.feed(chunk));
    socket.on('end', () => this.peerEnded());
    socket.on('error', (err) => this.end(`socket error: ${err.message}`, null, err));
    socket.on('close', () => this.socketClosed());
    socket.on('drain', () => this.drained());
    const { helloTimeoutMs, liveness } = role;
    if (helloTimeoutMs !== undefined) {
      const awaited = role.admits['awaiting-hello'].join(' or ');
      const started = Date.now();
      let stalledMs = 0;
      let scheduledFor = started + helloTimeoutMs;
      const check = () => {
        // Time this side spent not reading does not count against the peer: a throttle, and
        // a stall of this process's own event loop (the timer came late), during which the
        // hello may have been waiting unread.
        const now = Date.now();
        const late = now - scheduledFor;
        const stalled = late > STALL_SLACK_MS;
        if (stalled) stalledMs += late;
        let due = started + helloTimeoutMs + stalledMs + this.heldMs + (this.holdTimer ? now - this.holdStart : 0);
        // After a stall, the frames that came meanwhile are read after the timers run: look again then.
        if (stalled) due = Math.max(due, now + STALL_SLACK_MS);
        if (now < due) {
          scheduledFor = due;
          this.helloTimer = setTimeout(check, due - now);
        } else this.fail(new ProtocolError('ERR_UNEXPECTED', `no ${awaited} within ${helloTimeoutMs} ms`));
      };
      this.helloTimer = setTimeout(check, helloTimeoutMs);
    }
    this.ticker = liveness && !liveness.driven ? setInterval(() => this.checkLiveness(liveness), liveness.heartbeatMs) : null;
    if (role.hello) this.send(role.hello);
    else if (role.greeted) this.lastTx = Date.now();
  }

  get state(): ConnectionState {
    return this.current;
  }

  /** Reading and sending: awaiting hello or open. */
  get live(): boolean {
    return this.current === 'awaiting-hello' || this.current === 'open';
  }

  /** The hello exchange completed: full-size frames from the very next one (even one already
   *  in the same chunk), and the hello deadline is off. */
  open(): void {
    if (this.current !== 'awaiting-hello') throw new ProtocolError('ERR_UNEXPECTED', `opened in state ${this.current}`);
    this.current = transition(this.current, 'opened');
    this.clearHelloTimer();
    this.decoder.maxFrameBytes = MAX_FRAME_BYTES;
  }

  /** Ends the connection (if it has not ended) and reports it to the role. */
  close(reason: string, code: ProtocolErrorCode | null = null): void {
    this.end(reason, code);
  }

  /** Sends unless closing; false when the socket's buffer is full (onDrain follows) or closing. */
  send(m: Out): boolean {
    if (!this.live) return false;
    this.lastTx = Date.now();
    return this.socket.write(encodeMessage(m));
  }

  /** Sends, and resolves once the socket took the bytes (after 'drain' when its buffer was
   *  full); rejects when the connection ends first. For writers that stream (dump chunks). */
  deliver(m: Out): Promise<void> {
    if (!this.live) return Promise.reject(new Error('connection closed'));
    if (this.send(m)) return Promise.resolve();
    return new Promise((resolve, reject) => this.drainWaiters.push({ resolve, reject }));
  }

  /** Bytes from the peer. The socket's data goes here; so do bytes read before the connection
   *  took the socket (what followed Firecracker's `OK` line in the same chunk). A chunk that
   *  puts the peer over budget is still decoded (it is in memory already, one socket read at
   *  most); reading stops after it. */
  feed(chunk: Buffer): void {
    if (!this.live) return;
    this.lastRx = Date.now();
    try {
      if (this.role.budget) this.throttle(this.role.budget.spendBytes(chunk.length));
      this.decoder.push(chunk);
    } catch (err) {
      this.fail(err);
    }
  }

  /** Stops reading from the peer for `ms` (longer if already held for longer): back-pressure
   *  for a peer over budget. The idle timeout and the hello deadline do not run meanwhile. */
  throttle(ms: number): void {
    if (ms <= 0 || !this.live || !this.socket.pause) return;
    const now = Date.now();
    const until = now + ms;
    if (this.holdTimer) {
      if (until <= this.holdStart + this.holdFor) return;
      clearTimeout(this.holdTimer);
    } else {
      this.holdStart = now;
      this.socket.pause();
    }
    this.holdFor = until - this.holdStart;
    this.holdTimer = setTimeout(() => this.release(), until - now);
  }

  /** A throttle ends (its time is up, or the connection ends). */
  private release(): void {
    if (!this.holdTimer) return;
    clearTimeout(this.holdTimer);
    this.holdTimer = null;
    const ms = Date.now() - this.holdStart;
    this.heldMs += ms;
    this.role.budget?.held?.(ms);
    if (!this.live) return;
    // Silence while we were not listening is not the peer's.
    this.lastRx = Date.now();
    this.socket.resume?.();
  }

  private dispatch(m: In): void {
    const state = this.current;
    // Closed by an earlier frame of the same chunk: the rest is not read.
    if (state !== 'awaiting-hello' && state !== 'open') return;
    if (this.role.budget) this.throttle(this.role.budget.spendFrame());
    this.role.onMessage(admit(this.role.admits, state, m));
  }

  private peerEnded(): void {
    if (!this.live) return;
    try {
      this.decoder.end();
      this.end(`${this.role.peer} closed the connection`, null);
    } catch (err) {
      this.fail(err);
    }
  }

  private socketClosed(): void {
    this.end('connection closed', null);
    if (this.current === 'closing') this.current = transition(this.current, 'gone');
  }

  private drained(): void {
    for (const w of this.drainWaiters.splice(0)) w.resolve();
    this.role.onDrain?.();
  }

  /** A liveness tick from the owner (Liveness.driven); nothing once closing. */
  tick(): void {
    const { liveness } = this.role;
    if (liveness && (this.current === 'awaiting-hello' || this.current === 'open')) this.checkLiveness(liveness);
  }

  private checkLiveness(liveness: Liveness<Out>): void {
    const now = Date.now();
    // A tick that comes late means this process was stalled (a busy event loop, a starved
    // CPU): the peer's frames may be waiting unread, so that time is not the peer's silence.
    // Without this, a collector that falls behind closes the very sessions it is behind on.
    // The late tick itself judges nothing: those frames are read after the timers run.
    const stalled = now - this.lastTick - liveness.heartbeatMs;
    this.lastTick = now;
    if (stalled > STALL_SLACK_MS) this.lastRx = Math.min(now, this.lastRx + stalled);
    else if (!this.holdTimer && now - this.lastRx > liveness.idleTimeoutMs) {
      this.fail(new ProtocolError('ERR_IDLE', `no word from the ${this.role.peer} for ${liveness.idleTimeoutMs} ms`));
      return;
    }
    const heard =
      this.current === 'open' || (this.current === 'awaiting-hello' && (this.role.hello !== undefined || this.role.greeted === true));
    const owed = this.current === 'open' ? liveness.owed?.() : null;
    if (owed) this.send(owed);
    else if (heard && now - this.lastTx >= liveness.heartbeatMs - TICK_SLACK_MS) this.send(liveness.heartbeat());
  }

  private fail(err: unknown): void {
    if (err instanceof ProtocolError) return this.end(err.message, err.code, err);
    const error = err instanceof Error ? err : new Error(String(err));
    this.end(`internal error: ${error.message}`, 'ERR_INTERNAL', error);
  }

  private end(reason: string, code: ProtocolErrorCode | null, error?: Error): void {
    const from = this.current;
    if (from !== 'awaiting-hello' && from !== 'open') return; // reported once
    this.current = transition(from, 'close');
    if (this.ticker) clearInterval(this.ticker);
    this.clearHelloTimer();
    this.release();
    const gone = new Error('connection closed');
    for (const w of this.drainWaiters.splice(0)) w.reject(gone);
    this.socket.destroy();
    this.role.onClose(error ? { reason, code, error, from } : { reason, code, from });
  }

  private clearHelloTimer(): void {
    if (this.helloTimer) clearTimeout(this.helloTimer);
    this.helloTimer = null;
  }
}
