// The probe's side of one sandbox: takes the connections its listener accepts (refusing them
// during a reconnect penalty, past MAX_PENDING, or over the guest's budget) and is the SessionHost of
// each (session.ts): the hello opens a session, and a generation when there is evidence of a
// new life of the VM (lives.ts), and answers the ack floor; events are filed under the
// generation they were made in and go to the store and into the short histories; then gaps,
// heartbeats and the close. It also keeps the orchestrator's lifecycle hints (paused, a new
// life expected). What it learns (the merged status, the guest clock, who the probe is, when
// it came and went, counters) is what the verdict and the API read, through IntakeView.

import type net from 'node:net';
import {
  PROTOCOL_ERROR_CODES,
  ProtocolError,
  applyEvent,
  type EventOf,
  type Hello,
  type ProbeEvent,
  type ProbeStatus,
  type ProtocolErrorCode,
} from '@vsockdiag/proto';
import type { GenerationCause, LifecycleEvent } from '../catalogue.js';
import { Budget, type BudgetLimits, type LimitCounters } from './budget.js';
import { GuestClock } from './clock.js';
import type { SandboxHistory } from './history.js';
import { generationOf, newLifeEvidence, restoreCut, type Expectation, type GenerationRecord, type LastContact } from './lives.js';
import type { Logger } from './logger.js';
import { Session, type SessionHost } from './session.js';
import { KEEP_GENERATIONS, type EventRecord, type Store } from './store.js';

/** Connections that have not said hello yet, at most this many at a time; more are refused.
 *  An honest probe dials one at a time, and the one session past hello is superseded by the
 *  next hello, so a sandbox never holds more than MAX_PENDING + 1 connections. */
export const MAX_PENDING = 2;

/** Causes that mean a restore of the same memory: the probe's events run on across them. */
const RESTORES: ReadonlySet<GenerationCause> = new Set<GenerationCause>(['lifecycle', 'uds-moved', 'monotonic', 'clock']);

/** The orchestrator's word on the VM, until a hello (or the VM carrying on) settles it. */
interface Hint {
  /** Host ms since which the VM is paused on purpose; null when it is not. */
  pausedSince: number | null;
  /** The next hello opens a new generation, for this reason. */
  expect: Expectation | null;
  /** The session live when the hint came: a frame on it from `watchFrom` on shows the VM
   *  carried on in the same life (a snapshot taken and the VM resumed), and cancels `expect`.
   *  Not kept across a collector restart (no session is). */
  watch: Session | null;
  watchFrom: number | null;
}

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
  /** The current life of the VM (a boot or a restore): what dumps and state changes are
   *  filed under. 0 before the first hello. */
  readonly generation: number;
  /** The current (or last) connection's number, counted per sandbox. 0 before the first hello. */
  readonly sessionNumber: number;
  /** Where the current generation began and why; null before the first. */
  readonly currentGeneration: Readonly<GenerationRecord> | null;
  /** Host ms since which the orchestrator says the VM is paused; null when it is not. */
  readonly pausedSince: number | null;
  /** The next hello opens a new generation (a lifecycle hint, a moved socket). */
  readonly expectsNewGeneration: boolean;
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
  /** Something the verdict reads changed: decide again. `causeAt`: when it happened (host
   *  ms), for probe events their own time; otherwise now. */
  reconsider(causeAt?: number): void;
  /** Probe events were queued for the store (after the verdict has seen them). */
  recorded(rows: EventRecord[]): void;
  /** The rows once committed (not a resent one the store skipped), with the ids they were stored under. */
  stored(rows: readonly EventRecord[], ids: readonly number[]): void;
  /** A hello opened session `session`, of generation `generation`. */
  connected(generation: number, session: number): void;
}

export class Intake implements SessionHost, IntakeView {
  private gen: number;
  private sessionNo: number;
  /** The newest generations, oldest first: where each began, to file events by. */
  private readonly gens: GenerationRecord[];
  /** What the next hello is compared with. */
  private last: LastContact | null;
  private hint: Hint | null = null;
  /** The session whose hello opened a restore's generation, until it reports the vm.genid
   *  of that same restore (which then only marks more precisely where the life began). */
  private genidPending: Session | null = null;
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
    private readonly store: Store,
    private readonly history: SandboxHistory,
    budget: Partial<BudgetLimits> | undefined,
    private readonly log: Logger,
    private readonly hooks: IntakeHooks,
  ) {
    // A restarted collector goes on from what it stored: the same generation, the next session.
    const life = store.lifeState(sandboxId);
    this.gen = life.generation;
    this.sessionNo = life.session;
    this.gens = life.generations;
    this.last = life.last;
    if (life.lifecycle) {
      const saved = JSON.parse(life.lifecycle) as Pick<Hint, 'pausedSince' | 'expect'>;
      this.hint = { ...saved, watch: null, watchFrom: null };
    }
    this.budget = new Budget(budget);
  }

  get generation(): number {
    return this.gen;
  }

  get sessionNumber(): number {
    return this.sessionNo;
  }

  get currentGeneration(): Readonly<GenerationRecord> | null {
    return this.gens[this.gens.length - 1] ?? null;
  }

  get pausedSince(): number | null {
    return this.hint?.pausedSince ?? null;
  }

  get expectsNewGeneration(): boolean {
    return (this.hint?.expect ?? null) !== null;
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
    // While the store cannot write, a probe keeps its events in its ring: refusing it is the
    // back-pressure (it retries with its backoff), not taking what cannot be stored.
    if (this.closed) this.budget.refused('closed');
    else if (this.store.writeError !== null) this.budget.refused('store');
    if (this.closed || this.store.writeError !== null || this.budget.refuse(this.pending.size, MAX_PENDING) !== null) {
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

  /**
   * The orchestrator's word (POST …/lifecycle): a pause shows as `paused` until a resume or a
   * probe's hello; after a pause or a snapshot the next connection opens a new generation,
   * unless the VM is seen to carry on in the same life first (a frame on the session that was
   * live, once it runs again).
   */
  lifecycle(event: LifecycleEvent): void {
    const now = Date.now();
    const hint: Hint = this.hint ?? { pausedSince: null, expect: null, watch: null, watchFrom: null };
    switch (event) {
      case 'pause':
        hint.pausedSince ??= now;
        hint.expect = { cause: 'lifecycle', detail: 'the orchestrator paused the VM' };
        hint.watch = this.live;
        hint.watchFrom = null; // it runs again only at the resume
        break;
      case 'snapshot':
        hint.expect = { cause: 'lifecycle', detail: 'the orchestrator snapshotted the VM' };
        hint.watch = this.live;
        hint.watchFrom = hint.pausedSince === null ? now : null;
        break;
      case 'resume':
        hint.pausedSince = null;
        if (hint.watch) hint.watchFrom = now;
        break;
    }
    this.setHint(hint);
    this.history.record('lifecycle', { event });
    this.log.info({ sandbox: this.sandboxId, event }, 'lifecycle hint');
    this.hooks.reconsider();
  }

  /** The sandbox was registered again at another socket: a restore that moved it. */
  expectMoved(from: string, to: string): void {
    const hint: Hint = this.hint ?? { pausedSince: null, expect: null, watch: null, watchFrom: null };
    hint.expect = { cause: 'uds-moved', detail: `uds_path moved from ${from} to ${to}` };
    hint.watch = null;
    this.setHint(hint);
  }

  private setHint(hint: Hint | null): void {
    this.hint = hint && (hint.pausedSince !== null || hint.expect !== null) ? hint : null;
    const saved = this.hint ? JSON.stringify({ pausedSince: this.hint.pausedSince, expect: this.hint.expect }) : null;
    this.store.saveLifecycle(this.sandboxId, saved);
  }

  /** A frame on the watched session once the VM runs again: it carried on in the same life. */
  private carriedOn(session: Session): void {
    const h = this.hint;
    if (!h || h.watch !== session || h.watchFrom === null || h.expect === null) return;
    this.log.info({ sandbox: this.sandboxId, session: session.number }, 'the VM carried on after the lifecycle hint: same generation');
    this.setHint({ ...h, expect: null, watch: null });
  }

  private addGeneration(g: GenerationRecord): void {
    this.gen = g.generation;
    this.gens.push(g);
    if (this.gens.length > KEEP_GENERATIONS) this.gens.shift();
  }

  // ---- SessionHost: called by the session ----

  onHello(session: Session, hello: Hello): number {
    const writeError = this.store.writeError;
    if (writeError) throw new ProtocolError('ERR_STORE', `the store cannot write: ${writeError.message}`);
    this.pending.delete(session);
    if (this.live && this.live !== session) this.live.close('superseded by a new connection', null);
    this.live = session;
    const now = Date.now();
    const ack = Math.min(this.store.ackFloor(this.sandboxId, hello.instanceId, hello.generation), hello.lastSeq);
    const evidence = newLifeEvidence(this.last, hello, now, this.hint?.expect ?? null);
    let opens: GenerationRecord | undefined;
    if (evidence) {
      const cut = this.last && RESTORES.has(evidence.cause) ? restoreCut(this.last, hello, ack) : { fromSeq: 1, afterGuestMs: null };
      opens = { generation: this.gen + 1, ...evidence, openedMs: now, instanceId: hello.instanceId, ...cut };
      this.addGeneration(opens);
    }
    this.genidPending = evidence && RESTORES.has(evidence.cause) ? session : null;
    // The VM runs (a probe is talking): not paused, and whatever new life was expected is this one.
    if (this.hint) this.setHint(null);
    this.sessionNo++;
    session.number = this.sessionNo;
    this.count.sessions++;
    this.guestClock = new GuestClock();
    this.guestClock.observe(hello.clocks.sinceBootMs, now);
    const skew = Math.round(hello.clocks.wallMs - this.guestClock.toHost(hello.clocks.sinceBootMs));
    this.history.noteSkew(skew);
    this.last = {
      instanceId: hello.instanceId,
      bootId: hello.bootId,
      bootOffsetMs: this.guestClock.bootOffsetMs,
      skewMs: skew,
      guestMs: hello.clocks.sinceBootMs,
    };
    // A copy: applyEvent updates the merged status in place, and the session keeps its hello.
    this.merged = structuredClone(hello.status);
    this.identity = {
      instanceId: hello.instanceId,
      version: hello.probeVersion,
      bootId: hello.bootId,
      generation: hello.generation,
      pprof: hello.config.pprof === true,
    };
    this.openedAt = now;
    this.store.openSession(
      {
        sandboxId: this.sandboxId,
        session: this.sessionNo,
        generation: this.gen,
        instanceId: hello.instanceId,
        probeGeneration: hello.generation,
        probeVersion: hello.probeVersion,
        bootId: hello.bootId,
        openedMs: now,
        bootOffsetMs: this.last.bootOffsetMs,
        skewMs: this.last.skewMs,
        guestMs: this.last.guestMs,
      },
      opens,
    );
    if (opens) this.recordGeneration(opens);
    this.history.record('session.open', {
      session: this.sessionNo,
      instanceId: hello.instanceId,
      probeGeneration: hello.generation,
      probeVersion: hello.probeVersion,
      bootId: hello.bootId,
      lastSeq: hello.lastSeq,
      ...(hello.lostAtSeq !== undefined ? { lostAtSeq: hello.lostAtSeq } : {}),
      ack,
    });
    this.log.info(
      { sandbox: this.sandboxId, generation: this.gen, session: this.sessionNo, cause: evidence?.cause, instance: hello.instanceId, ack },
      'probe connected',
    );
    this.hooks.reconsider();
    this.hooks.connected(this.gen, this.sessionNo);
    return ack;
  }

  private recordGeneration(g: GenerationRecord): void {
    this.history.record('generation', { generation: g.generation, cause: g.cause, detail: g.detail, fromSeq: g.fromSeq });
    this.log.info({ sandbox: this.sandboxId, generation: g.generation, cause: g.cause, detail: g.detail }, 'new generation');
  }

  /**
   * The kernel's NEW_VMGENID, as the probe reported it: a new life from this event on. If the
   * hello of this session already opened the restore's generation (from the clocks, a hint or
   * a moved socket), it is that same restore, and only says more exactly where it began.
   */
  private onGenid(session: Session, e: EventOf<'vm.genid'>, instanceId: string): void {
    const current = this.gens[this.gens.length - 1];
    if (this.genidPending === session && current?.instanceId === instanceId) {
      this.genidPending = null;
      if (e.seq < current.fromSeq) {
        current.fromSeq = e.seq;
        current.afterGuestMs = null;
        this.store.saveGeneration(this.sandboxId, current);
      }
      return;
    }
    // An event of an earlier life, resent: its restore is behind us.
    if (generationOf(this.gens, instanceId, e.seq, e.t) !== this.gen) return;
    const g: GenerationRecord = {
      generation: this.gen + 1,
      cause: 'vmgenid',
      detail: `NEW_VMGENID${e.devpath ? ` from ${e.devpath}` : ''} at probe event ${e.seq}`,
      openedMs: Date.now(),
      instanceId,
      fromSeq: e.seq,
      afterGuestMs: null,
    };
    this.addGeneration(g);
    this.store.saveGeneration(this.sandboxId, g);
    this.recordGeneration(g);
    this.hooks.connected(this.gen, this.sessionNo);
  }

  onEvents(session: Session, events: ProbeEvent[], sentAt: number | undefined, done: (err: Error | null) => void): void {
    if (session !== this.live) return done(new Error('session superseded'));
    // Before this batch's times are placed; the verdict is decided again below in any case.
    if (sentAt !== undefined) this.observeClock(sentAt);
    const hello = session.hello!;
    const keyframeSeq = hello.lastSeq;
    const rows: EventRecord[] = [];
    let status = this.merged!;
    let newest = 0;
    this.carriedOn(session);
    for (const e of events) {
      // Events up to the hello's lastSeq are already in its status keyframe: store them,
      // but do not apply them twice.
      if (e.seq > keyframeSeq) status = applyEvent(status, e);
      if (e.kind === 'vm.genid') this.onGenid(session, e, hello.instanceId);
      this.history.remember(e, this.guestClock);
      if (this.last && e.t > (this.last.guestMs ?? 0)) this.last.guestMs = e.t;
      const { seq, t, kind, ...data } = e;
      rows.push({
        sandboxId: this.sandboxId,
        // The life it was made in: one resent after a restore belongs to the one before.
        generation: generationOf(this.gens, hello.instanceId, seq, t),
        session: session.number,
        seq,
        kind,
        tGuest: t,
        tHost: Math.round(this.guestClock.toHost(t)),
        data,
      });
      newest = Math.max(newest, rows[rows.length - 1]!.tHost);
    }
    this.count.events += events.length;
    this.merged = status;
    this.store.append(rows, (err, ids, stored) => {
      // A resent row the store skipped was stored before: acked all the same.
      done(err);
      // Followers see what is stored, under the ids the history lists it by (once).
      if (!err) this.hooks.stored(stored, ids);
    });
    this.hooks.reconsider(newest || undefined);
    this.hooks.recorded(rows);
  }

  onGap(session: Session, from: number, to: number): void {
    if (session !== this.live) return;
    this.count.gaps++;
    this.history.record('gap', { from, to, lost: to - from + 1 });
  }

  onHeartbeat(session: Session, sinceBootMs: number): void {
    if (session !== this.live) return;
    this.carriedOn(session);
    // A better clock estimate moves every guest time, and so the thresholds: decide again.
    if (this.observeClock(sinceBootMs)) this.hooks.reconsider();
  }

  /** A guest time the probe stamped as it wrote: one more sample of the clock's offset.
   *  True when the estimate improved. */
  private observeClock(sinceBootMs: number): boolean {
    if (this.last) this.last.guestMs = Math.max(this.last.guestMs ?? 0, sinceBootMs);
    if (!this.guestClock.observe(sinceBootMs)) return false;
    if (this.last) this.last.bootOffsetMs = this.guestClock.bootOffsetMs;
    return true;
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
    if (session.number > 0) {
      const clocks = session === this.live && this.last ? { ...this.last, skewMs: this.history.skewMs } : undefined;
      this.store.closeSession(this.sandboxId, session.number, code ? `${code}: ${reason}` : reason, clocks);
    }
    if (session !== this.live) return;
    this.live = null;
    this.closedAt = Date.now();
    this.closedWhy = code ? `${code}: ${reason}` : reason;
    this.history.record('session.close', { reason, code });
    this.log.info({ sandbox: this.sandboxId, generation: this.gen, session: session.number, reason, code }, 'probe disconnected');
    this.hooks.reconsider();
  }
}
