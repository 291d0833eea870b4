// The probe's side of one sandbox: takes the connections its listener accepts (refusing them
// during a reconnect penalty, past MAX_PENDING, or over the guest's budget) and is the SessionHost of
// each (session.ts): the hello opens a generation and answers the ack floor, events go to the
// store and into the short histories, then gaps, heartbeats and the close. What it learns
// (the merged status, the guest clock, who the probe is, when it came and went, counters) is
// what the verdict and the API read, through IntakeView.

import type net from 'node:net';
import { PROTOCOL_ERROR_CODES, applyEvent, type Hello, type ProbeEvent, type ProbeStatus, type ProtocolErrorCode } from '@vsockdiag/proto';
import { Budget, type BudgetLimits, type LimitCounters } from './budget.js';
import { GuestClock } from './clock.js';
import type { SandboxHistory } from './history.js';
import type { Logger } from './logger.js';
import { Session, type SessionHost } from './session.js';
import type { EventRecord, Store } from './store.js';

/** Connections that have not said hello yet, at most this many at a time; more are refused.
 *  An honest probe dials one at a time, and the one session past hello is superseded by the
 *  next hello, so a sandbox never holds more than MAX_PENDING + 1 connections. */
export const MAX_PENDING = 2;

/** Who the probe of the current (or last) session said it is. */
export interface ProbeIdentity {
  instanceId: string;
  version: string;
  bootId: string;
  generation: number;
  pprof: boolean;
}

export interface IntakeCounters {
  sessions: number;
  events: number;
  gaps: number;
  protocolErrors: number;
  refused: number;
}

/** What readers see of the intake: nothing can be changed through it. */
export interface IntakeView {
  /** Bumped by every hello: the session events, dumps and state changes are filed under. */
  readonly generation: number;
  /** The session past hello, if one is live (at most one). */
  readonly session: Session | null;
  /** The merged probe status; null until a probe ever said hello. */
  readonly status: ProbeStatus | null;
  /** Places the current session's guest times on the host's clock. */
  readonly clock: Pick<GuestClock, 'toHost'>;
  readonly probe: Readonly<ProbeIdentity> | null;
  /** When the current session opened, and when the last one closed and why (host ms). */
  readonly connectedAt: number | undefined;
  readonly disconnectedAt: number | undefined;
  readonly disconnectReason: string | undefined;
  readonly counters: Readonly<IntakeCounters>;
  /** What the sandbox's budget did: throttles, cut-offs, offences, refusals, the penalty. */
  readonly limits: Readonly<LimitCounters>;
}

export interface IntakeHooks {
  /** Something the verdict reads changed: decide again. */
  reconsider(): void;
  /** Probe events were queued for the store (after the verdict has seen them). */
  recorded(rows: EventRecord[]): void;
  /** A hello opened generation `generation`. */
  connected(generation: number): void;
}

export class Intake implements SessionHost, IntakeView {
  private gen: number;
  private live: Session | null = null;
  private merged: ProbeStatus | null = null;
  private guestClock = new GuestClock();
  private identity: ProbeIdentity | null = null;
  private openedAt: number | undefined;
  private closedAt: number | undefined;
  private closedWhy: string | undefined;
  private readonly count: IntakeCounters = { sessions: 0, events: 0, gaps: 0, protocolErrors: 0, refused: 0 };
  /** What this guest may send, shared by all its connections: reconnecting does not refill it. */
  private readonly budget: Budget;
  /** Accepted connections that have not said hello yet. */
  private readonly pending = new Set<Session>();
  private closed = false;

  constructor(
    private readonly sandboxId: string,
    generation: number,
    private readonly store: Store,
    private readonly history: SandboxHistory,
    budget: Partial<BudgetLimits> | undefined,
    private readonly log: Logger,
    private readonly hooks: IntakeHooks,
  ) {
    this.gen = generation;
    this.budget = new Budget(budget);
  }

  get generation(): number {
    return this.gen;
  }

  get session(): Session | null {
    return this.live;
  }

  get status(): ProbeStatus | null {
    return this.merged;
  }

  get clock(): Pick<GuestClock, 'toHost'> {
    return this.guestClock;
  }

  get probe(): Readonly<ProbeIdentity> | null {
    return this.identity;
  }

  get connectedAt(): number | undefined {
    return this.openedAt;
  }

  get disconnectedAt(): number | undefined {
    return this.closedAt;
  }

  get disconnectReason(): string | undefined {
    return this.closedWhy;
  }

  get counters(): Readonly<IntakeCounters> {
    return this.count;
  }

  get limits(): Readonly<LimitCounters> {
    return this.budget.counters;
  }

  /** Refuses (closes at once, before any byte is read) a connection during a reconnect
   *  penalty, past the pending limit, or over the frame budget (budget.ts). */
  accept(socket: net.Socket): void {
    if (this.closed) this.budget.refused('closed');
    if (this.closed || this.budget.refuse(this.pending.size, MAX_PENDING) !== null) {
      this.count.refused++;
      socket.destroy();
      return;
    }
    this.pending.add(new Session(socket, this, this.log.child({ sandbox: this.sandboxId }), this.budget));
  }

  /** The sandbox is going away: every connection closes, and none is taken after. */
  closeAll(reason: string): void {
    this.closed = true;
    this.live?.close(reason, null);
    for (const s of this.pending) s.close(reason, null);
  }

  // ---- SessionHost: called by the session ----

  onHello(session: Session, hello: Hello): number {
    this.pending.delete(session);
    if (this.live && this.live !== session) this.live.close('superseded by a new connection', null);
    this.live = session;
    this.gen++;
    session.generation = this.gen;
    this.count.sessions++;
    this.guestClock = new GuestClock();
    this.guestClock.observe(hello.clocks.sinceBootMs);
    this.history.noteSkew(Math.round(hello.clocks.wallMs - this.guestClock.toHost(hello.clocks.sinceBootMs)));
    this.merged = hello.status;
    this.identity = {
      instanceId: hello.instanceId,
      version: hello.probeVersion,
      bootId: hello.bootId,
      generation: hello.generation,
      pprof: hello.config.pprof === true,
    };
    this.openedAt = Date.now();
    this.store.openSession({
      sandboxId: this.sandboxId,
      generation: this.gen,
      instanceId: hello.instanceId,
      probeGeneration: hello.generation,
      probeVersion: hello.probeVersion,
      bootId: hello.bootId,
      openedMs: this.openedAt,
    });
    const ack = Math.min(this.store.ackFloor(this.sandboxId, hello.instanceId, hello.generation), hello.lastSeq);
    this.history.record('session.open', {
      instanceId: hello.instanceId,
      probeGeneration: hello.generation,
      probeVersion: hello.probeVersion,
      bootId: hello.bootId,
      lastSeq: hello.lastSeq,
      ack,
    });
    this.log.info({ sandbox: this.sandboxId, generation: this.gen, instance: hello.instanceId, ack }, 'probe connected');
    this.hooks.reconsider();
    this.hooks.connected(this.gen);
    return ack;
  }

  onEvents(session: Session, events: ProbeEvent[], done: (err: Error | null) => void): void {
    if (session !== this.live) return done(new Error('session superseded'));
    const keyframeSeq = session.hello!.lastSeq;
    const rows: EventRecord[] = [];
    let status = this.merged!;
    for (const e of events) {
      // Events up to the hello's lastSeq are already in its status keyframe: store them,
      // but do not apply them twice.
      if (e.seq > keyframeSeq) status = applyEvent(status, e);
      this.history.remember(e, this.guestClock);
      const { seq, t, kind, ...data } = e;
      rows.push({
        sandboxId: this.sandboxId,
        generation: session.generation,
        seq,
        kind,
        tGuest: t,
        tHost: Math.round(this.guestClock.toHost(t)),
        data,
      });
    }
    this.count.events += events.length;
    this.merged = status;
    this.store.append(rows, done);
    this.hooks.reconsider();
    this.hooks.recorded(rows);
  }

  onGap(session: Session, from: number, to: number): void {
    if (session !== this.live) return;
    this.count.gaps++;
    this.history.record('gap', { from, to, lost: to - from + 1 });
  }

  onHeartbeat(session: Session, sinceBootMs: number): void {
    // A better clock estimate moves every guest time, and so the thresholds: decide again.
    if (session === this.live && this.guestClock.observe(sinceBootMs)) this.hooks.reconsider();
  }

  onClose(session: Session, reason: string, code: ProtocolErrorCode | null): void {
    this.pending.delete(session);
    if (code) {
      this.count.protocolErrors++;
      // Only a guest that sent what it must not is penalised: not a link that went quiet (a
      // snapshot's transport reset can look like that) or was cut mid-frame (a probe killed,
      // a reset), nor the collector's own failures. Clean closes carry no code at all.
      if (PROTOCOL_ERROR_CODES[code].cause === 'peer') this.budget.offended(code);
    }
    if (session.generation > 0) this.store.closeSession(this.sandboxId, session.generation, code ? `${code}: ${reason}` : reason);
    if (session !== this.live) return;
    this.live = null;
    this.closedAt = Date.now();
    this.closedWhy = code ? `${code}: ${reason}` : reason;
    this.history.record('session.close', { reason, code });
    this.log.info({ sandbox: this.sandboxId, generation: session.generation, reason, code }, 'probe disconnected');
    this.hooks.reconsider();
  }
}
