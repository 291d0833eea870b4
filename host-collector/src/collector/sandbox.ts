// One sandbox as the collector knows it: where its Firecracker vsock socket is, the
// listener on <udsPath>_<vsockPort>, the live probe session (at most one), the merged
// probe status, and the verdict with its timer. Identity is the socket a connection came
// in on; nothing the guest says changes which sandbox it is.

import { EventEmitter } from 'node:events';
import type net from 'node:net';
import {
  CLOCK_SLACK_MS,
  PROTOCOL_ERROR_CODES,
  applyEvent,
  listen,
  type DumpMode,
  type Hello,
  type ProbeEvent,
  type ProbeStatus,
  type ProtocolErrorCode,
} from '@vsockdiag/proto';
import type { CollectorEventKind, ConditionName, DumpTrigger, SandboxState } from '../catalogue.js';
import { Budget, type BudgetLimits } from './budget.js';
import { GuestClock } from './clock.js';
import type { Logger } from './logger.js';
import { Session, type SessionHost } from './session.js';
import type { EventRecord, Store } from './store.js';
import { conditions, conditionsRecheckAt, type Condition, type ConditionSettings, type KernelNote } from './conditions.js';
import { decide, type Verdict, type VerdictInput } from './verdict.js';

export interface SandboxSettings {
  vsockPort: number;
  stallAfterMs: number;
  startDeadlineMs: number;
  targetName: string;
  conditions: Omit<ConditionSettings, 'stallAfterMs'>;
  budget?: BudgetLimits;
  /** Group given the vsock sockets (mode 0660), for a jailed Firecracker under its own uid;
   *  without one they are 0600: the collector's user alone. */
  socketGid?: number;
}

/** Bounds on the short histories kept per sandbox for conditions. */
const MAX_THREAD_SAMPLES = 256;
const MAX_KERNEL_NOTES = 32;
const MAX_PHASES = 64;

/** Connections that have not said hello yet, at most this many at a time; more are refused.
 *  An honest probe dials one at a time, and the one session past hello is superseded by the
 *  next hello, so a sandbox never holds more than MAX_PENDING + 1 connections. */
export const MAX_PENDING = 2;

/** After a probe is cut off for misbehaving, its next connections are refused for this long:
 *  long enough that a guest cannot hammer the collector with bad sessions, short enough that
 *  an honest probe (reconnect backoff capped at 2 s) is back within a few seconds. */
export const COOLDOWN_MS = 2000;

export interface StateChange {
  id: string;
  state: SandboxState;
  previous: SandboxState;
  reason: string;
  generation: number;
}

export class Sandbox extends EventEmitter implements SessionHost {
  generation: number;
  status: ProbeStatus | null = null;
  session: Session | null = null;
  clock = new GuestClock();
  probe: { instanceId: string; version: string; bootId: string; generation: number; pprof: boolean } | null = null;
  /** The newest dumps (ids into the store), newest last, for linking from the state. */
  recentDumps: Array<{ id: number | null; mode: DumpMode; trigger: DumpTrigger; at: number; complete: boolean; error?: string }> = [];
  listenError: string | null = null;
  connectedAt: number | undefined;
  disconnectedAt: number | undefined;
  disconnectReason: string | undefined;
  stateSince = Date.now();
  counters = { sessions: 0, events: 0, gaps: 0, protocolErrors: 0, refused: 0 };
  /** The current target's thread counts (host ms), for thread-growth. */
  threads: Array<{ at: number; n: number }> = [];
  /** The current target's phases (guest ms) and when it became ready, for fleet phase durations. */
  phaseTimeline: Array<{ name: string; t: number }> = [];
  readyAt: number | null = null;
  /** Kernel messages worth seeing (host ms). */
  kernel: KernelNote[] = [];
  /** Where the newest goroutine dump of a target found it blocked (dumps/where-blocked.ts);
   *  the verdict names it while that pid is still the target. */
  blocked: { pid: number; text: string; dumpId: number } | null = null;
  /** Guest wall clock minus host wall clock, from the last hello or system sample. */
  skewMs: number | null = null;
  private server: net.Server | null = null;
  /** The state as of the last evaluation; the reason is written fresh for each reader (currentVerdict). */
  private decided: SandboxState = 'registered';
  private timer: NodeJS.Timeout | null = null;
  /** Built once: evaluate() runs on every batch of every sandbox and should allocate little. */
  private readonly conditionSettings: ConditionSettings;
  private readonly toHost = (guestMs: number) => this.clock.toHost(guestMs);
  /** Conditions raised and not yet cleared, with their detail when raised. */
  private readonly raised = new Map<ConditionName, string>();
  /** What this guest may send, shared by all its connections: reconnecting does not refill it. */
  private readonly budget: Budget;
  /** Accepted connections that have not said hello yet. */
  private readonly pending = new Set<Session>();
  private cooldownUntil = 0;
  private closed = false;

  constructor(
    readonly id: string,
    public udsPath: string,
    readonly source: 'api' | 'discover',
    generation: number,
    private readonly store: Store,
    private readonly settings: SandboxSettings,
    private readonly log: Logger,
  ) {
    super();
    this.generation = generation;
    this.conditionSettings = { ...settings.conditions, stallAfterMs: settings.stallAfterMs };
    this.budget = new Budget(settings.budget);
    // Every readiness long-poll on this sandbox listens here; there is no fixed bound.
    this.setMaxListeners(0);
  }

  get socketPath(): string {
    return `${this.udsPath}_${this.settings.vsockPort}`;
  }

  get state(): SandboxState {
    return this.decided;
  }

  /** Binds <udsPath>_<vsockPort>. Accepting does nothing slow: Firecracker's connect to
   *  this socket blocks its event thread until we accept. */
  async startListening(): Promise<void> {
    const gid = this.settings.socketGid;
    this.server = await listen(`unix:${this.socketPath}`, (socket) => this.accept(socket), {
      replaceStale: true,
      ...(gid === undefined ? { mode: 0o600 } : { mode: 0o660, gid }),
    });
    this.listenError = null;
    this.evaluate();
  }

  async stop(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.session?.close('sandbox unregistered', null);
    for (const s of this.pending) s.close('sandbox unregistered', null);
    this.emit('removed');
    // Stop accepting now; the session's own connection was closed just above.
    this.server?.close();
    this.server = null;
  }

  /** The restore moved Firecracker's socket (vsock_override): listen at the new place. */
  async move(udsPath: string): Promise<void> {
    // The live session (if any) stays: it is a connection, not the listener, and the restore
    // that moved the socket resets it anyway.
    this.server?.close();
    this.server = null;
    this.udsPath = udsPath;
    await this.startListening();
  }

  /**
   * Re-runs the verdict now (fresh reason text, e.g. for an API read). A read can land in
   * the millisecond before a threshold's timer fires: then the transition is recorded here,
   * so what the API shows and the state history never disagree.
   */
  currentVerdict(now = Date.now(), conditionsNow = this.currentConditions(now)): Verdict {
    const v = decide(this.verdictInput(now, conditionsNow));
    if (v.state !== this.decided) this.evaluate();
    return v;
  }

  /** Refuses (closes at once, before any byte is read) a connection during a cool-down, past
   *  the pending limit, or over the frame budget (each connection costs a frame, so dialling
   *  in a loop is rate-limited like sending is). */
  private accept(socket: net.Socket): void {
    if (this.closed || Date.now() < this.cooldownUntil || this.pending.size >= MAX_PENDING || !this.budget.spendFrame()) {
      this.counters.refused++;
      socket.destroy();
      return;
    }
    this.pending.add(new Session(socket, this, this.log.child({ sandbox: this.id }), this.budget));
  }

  // ---- SessionHost: called by the session ----

  onHello(session: Session, hello: Hello): number {
    this.pending.delete(session);
    if (this.session && this.session !== session) this.session.close('superseded by a new connection', null);
    this.session = session;
    this.generation++;
    session.generation = this.generation;
    this.counters.sessions++;
    this.clock = new GuestClock();
    this.clock.observe(hello.clocks.sinceBootMs);
    this.skewMs = Math.round(hello.clocks.wallMs - this.clock.toHost(hello.clocks.sinceBootMs));
    this.status = hello.status;
    this.probe = {
      instanceId: hello.instanceId,
      version: hello.probeVersion,
      bootId: hello.bootId,
      generation: hello.generation,
      pprof: hello.config.pprof === true,
    };
    this.connectedAt = Date.now();
    this.store.openSession({
      sandboxId: this.id,
      generation: this.generation,
      instanceId: hello.instanceId,
      probeGeneration: hello.generation,
      probeVersion: hello.probeVersion,
      bootId: hello.bootId,
      openedMs: this.connectedAt,
    });
    const ack = Math.min(this.store.ackFloor(this.id, hello.instanceId, hello.generation), hello.lastSeq);
    this.record('session.open', {
      instanceId: hello.instanceId,
      probeGeneration: hello.generation,
      probeVersion: hello.probeVersion,
      bootId: hello.bootId,
      lastSeq: hello.lastSeq,
      ack,
    });
    this.log.info({ sandbox: this.id, generation: this.generation, instance: hello.instanceId, ack }, 'probe connected');
    this.evaluate();
    this.emit('connected', this.generation);
    return ack;
  }

  onEvents(session: Session, events: ProbeEvent[], done: (err: Error | null) => void): void {
    if (session !== this.session) return done(new Error('session superseded'));
    const keyframeSeq = session.hello!.lastSeq;
    const rows: EventRecord[] = [];
    let status = this.status!;
    for (const e of events) {
      // Events up to the hello's lastSeq are already in its status keyframe: store them,
      // but do not apply them twice.
      if (e.seq > keyframeSeq) status = applyEvent(status, e);
      this.remember(e);
      const { seq, t, kind, ...data } = e;
      rows.push({
        sandboxId: this.id,
        generation: session.generation,
        seq,
        kind,
        tGuest: t,
        tHost: Math.round(this.clock.toHost(t)),
        data,
      });
    }
    this.counters.events += events.length;
    this.status = status;
    this.store.append(rows, done);
    this.evaluate();
    this.emit('recorded', rows);
  }

  /** Keeps the short histories conditions need (bounded). */
  private remember(e: ProbeEvent): void {
    switch (e.kind) {
      case 'target.found':
        this.threads = [];
        // Phases reported just before the probe found the target are its own (see applyEvent).
        this.phaseTimeline = this.phaseTimeline.filter((p) => p.t >= e.startedAt - CLOCK_SLACK_MS);
        this.readyAt = null;
        return;
      case 'phase':
        if (e.name !== undefined && this.phaseTimeline.length < MAX_PHASES) this.phaseTimeline.push({ name: e.name, t: e.t });
        if (e.ready && this.readyAt === null) this.readyAt = e.t;
        return;
      case 'target.sample':
        this.threads.push({ at: this.clock.toHost(e.t), n: e.threads });
        if (this.threads.length > MAX_THREAD_SAMPLES) this.threads.splice(0, this.threads.length - MAX_THREAD_SAMPLES);
        return;
      case 'kernel': {
        // Dated by the kernel's timestamp, not by when the probe read the record: a probe that
        // (re)starts reads the kernel's whole buffer, and an OOM kill from before this target
        // started is not about it. (Never later than the read: the clocks may drift apart.)
        const kernelMs = e.kernelMs;
        if (kernelMs !== undefined && this.kernel.some((k) => k.kernelMs === kernelMs && k.message === e.message)) return; // read again
        this.kernel.push({
          what: e.what,
          at: this.clock.toHost(kernelMs !== undefined ? Math.min(kernelMs, e.t) : e.t),
          message: e.message,
          ...(e.process !== undefined ? { process: e.process } : {}),
          ...(e.pid !== undefined ? { pid: e.pid } : {}),
          ...(kernelMs !== undefined ? { kernelMs } : {}),
        });
        if (this.kernel.length > MAX_KERNEL_NOTES) this.kernel.shift();
        return;
      }
      case 'system':
        this.skewMs = Math.round(e.wallMs - this.clock.toHost(e.t));
        return;
      default:
        return;
    }
  }

  onGap(session: Session, from: number, to: number): void {
    if (session !== this.session) return;
    this.counters.gaps++;
    this.record('gap', { from, to, lost: to - from + 1 });
  }

  onHeartbeat(session: Session, sinceBootMs: number): void {
    if (session === this.session) this.clock.observe(sinceBootMs);
  }

  onClose(session: Session, reason: string, code: ProtocolErrorCode | null): void {
    this.pending.delete(session);
    if (code) {
      this.counters.protocolErrors++;
      // Only a guest that sent what it must not cools down: not a link that went quiet (a
      // snapshot's transport reset can look like that) or was cut mid-frame (a probe killed,
      // a reset), nor the collector's own failures. Clean closes carry no code at all.
      if (PROTOCOL_ERROR_CODES[code].cause === 'peer') this.cooldownUntil = Date.now() + COOLDOWN_MS;
    }
    if (session.generation > 0) this.store.closeSession(this.id, session.generation, code ? `${code}: ${reason}` : reason);
    if (session !== this.session) return;
    this.session = null;
    this.disconnectedAt = Date.now();
    this.disconnectReason = code ? `${code}: ${reason}` : reason;
    this.record('session.close', { reason, code });
    this.log.info({ sandbox: this.id, generation: session.generation, reason, code }, 'probe disconnected');
    this.evaluate();
  }

  // ---- verdict ----

  /** Conditions in force now. */
  currentConditions(now = Date.now()): readonly Condition[] {
    if (!this.status) return [];
    return conditions({
      now,
      status: this.status,
      toHost: this.toHost,
      threads: this.threads,
      kernel: this.kernel,
      skewMs: this.skewMs,
      settings: this.conditionSettings,
    });
  }

  private verdictInput(now: number, conditionsNow: readonly Condition[]): VerdictInput {
    const { status, toHost } = this;
    return {
      blocked: this.blocked,
      conditions: conditionsNow,
      conditionsRecheckAt: status ? conditionsRecheckAt({ status, toHost, now, settings: this.conditionSettings }) : null,
      now,
      connected: this.session !== null,
      connectedAt: this.connectedAt,
      disconnectedAt: this.disconnectedAt,
      disconnectReason: this.disconnectReason,
      status,
      toHost,
      targetName: this.settings.targetName,
      stallAfterMs: this.settings.stallAfterMs,
      startDeadlineMs: this.settings.startDeadlineMs,
    };
  }

  /** Decides now, records a transition if the state changed, and arms the next check. */
  evaluate(): void {
    if (this.closed) return;
    const now = Date.now();
    const conditionsNow = this.currentConditions(now);
    const input = this.verdictInput(now, conditionsNow);
    // The reason text only when the state changed (same input, same now: the same verdict).
    const v = decide(input, false);
    const previous = this.decided;
    this.decided = v.state;
    this.noteConditions(conditionsNow);
    this.emit('changed');
    if (v.state !== previous) {
      const { reason } = decide(input);
      this.stateSince = now;
      this.record('state', { state: v.state, previous, reason });
      this.log.info({ sandbox: this.id, state: v.state, previous, reason }, 'state changed');
      const change: StateChange = { id: this.id, state: v.state, previous, reason, generation: this.generation };
      this.emit('state', change);
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (v.recheckAt !== null) {
      // +1 ms so the threshold has certainly passed when we look again.
      this.timer = setTimeout(() => this.evaluate(), Math.max(0, v.recheckAt - now) + 1);
    }
  }

  /** Resolves true when a probe session is (or becomes) open within `ms`. */
  waitForSession(ms: number): Promise<boolean> {
    if (this.session) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.removeListener('connected', onConnected);
        resolve(ok);
      };
      const onConnected = () => done(true);
      const timer = setTimeout(() => done(false), ms);
      this.once('connected', onConnected);
    });
  }

  /** A goroutine dump found the target blocked somewhere: the stuck reason says where. */
  noteBlocked(blocked: { pid: number; text: string; dumpId: number }): void {
    this.blocked = blocked;
    this.evaluate();
  }

  /** A dump was taken (or failed): into the history, and linked from the sandbox. */
  recordDump(d: {
    dumpId?: number;
    mode: DumpMode;
    trigger: DumpTrigger;
    complete: boolean;
    error?: string;
    blockedIn?: string;
    count?: number;
  }): void {
    this.record('dump', d);
    this.recentDumps.push({
      id: d.dumpId ?? null,
      mode: d.mode,
      trigger: d.trigger,
      at: Date.now(),
      complete: d.complete,
      ...(d.error ? { error: d.error } : {}),
    });
    if (this.recentDumps.length > 10) this.recentDumps.shift();
  }

  /** Records conditions as they are raised and cleared, so the history shows them. */
  private noteConditions(current: readonly Condition[]): void {
    if (current.length === 0 && this.raised.size === 0) return; // the usual case
    for (const c of current) {
      if (!this.raised.has(c.name)) this.record('condition', { name: c.name, raised: true, detail: c.detail });
      this.raised.set(c.name, c.detail);
    }
    for (const [name, detail] of this.raised) {
      if (current.some((c) => c.name === name)) continue;
      this.record('condition', { name, raised: false, detail });
      this.raised.delete(name);
    }
  }

  /** A collector-side event (state change, session edge, gap) in the sandbox's history. */
  private record(kind: CollectorEventKind, data: Record<string, unknown>): void {
    const row: EventRecord = { sandboxId: this.id, generation: this.generation, seq: null, kind, tGuest: null, tHost: Date.now(), data };
    this.store.append([row]);
    this.emit('recorded', [row]);
  }
}
