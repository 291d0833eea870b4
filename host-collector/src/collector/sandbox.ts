// One sandbox as the collector knows it: its identity (the id, and where its Firecracker
// vsock socket is), the listener on <udsPath>_<vsockPort>, and the wiring of its three parts:
// the intake (intake.ts: the probe's connections and what they said), the history
// (history.ts: the collector's events and the short histories) and the verdict clock
// (verdict-clock.ts: when the state is decided, and what readers see of it). Readers get
// read-only views of the parts and typed events. Identity is the socket a connection came
// in on; nothing the guest says changes which sandbox it is.

import { EventEmitter } from 'node:events';
import type net from 'node:net';
import { listen } from '@vsockdiag/proto';
import type { LifecycleEvent, SandboxState } from '../catalogue.js';
import type { BudgetLimits } from './budget.js';
import type { Condition, ConditionSettings } from './conditions.js';
import { SandboxHistory, type Blocked, type DumpNote, type HistoryView } from './history.js';
import { Intake, type IntakeView } from './intake.js';
import type { Logger } from './logger.js';
import type { EventRecord, Store } from './store.js';
import type { Elapsed } from './elapsed.js';
import { VerdictClock, type Reading, type ReadingTemplate } from './verdict-clock.js';

export interface SandboxSettings {
  vsockPort: number;
  stallAfterMs: number;
  startDeadlineMs: number;
  targetName: string;
  conditions: Omit<ConditionSettings, 'stallAfterMs'>;
  budget?: Partial<BudgetLimits>;
  /** Group given the vsock sockets (mode 0660), for a jailed Firecracker under its own uid;
   *  without one they are 0600: the collector's user alone. */
  socketGid?: number;
}

export interface StateChange {
  id: string;
  state: SandboxState;
  previous: SandboxState;
  reason: string;
  generation: number;
  /** From the input that decided it to the recorded transition, ms (verdict-clock.ts). */
  lagMs: number;
  session: number;
}

/** What a sandbox tells its listeners. */
export interface SandboxEvents {
  /** The state changed; the change is already in the history. */
  state: [change: StateChange];
  /** The verdict was decided again: a summary may read differently. */
  changed: [];
  /** Rows were queued for the store (the probe's events, or the collector's). */
  recorded: [rows: EventRecord[]];
  /** The rows committed (not a resent one the store skipped), with their ids (the live stream sends them). */
  stored: [rows: readonly EventRecord[], ids: readonly number[]];
  /** A probe said hello, opening this session of this generation (or a vm.genid event
   *  opened a generation inside the session). */
  connected: [generation: number, session: number];
  /** The sandbox was unregistered. */
  removed: [];
}

export class Sandbox extends EventEmitter<SandboxEvents> {
  private uds: string;
  private server: net.Server | null = null;
  private listenFailure: string | null = null;
  private readonly kept: SandboxHistory;
  private readonly link: Intake;
  private readonly verdict: VerdictClock;

  constructor(
    readonly id: string,
    udsPath: string,
    readonly source: 'api' | 'discover',
    store: Store,
    private readonly settings: SandboxSettings,
    private readonly log: Logger,
  ) {
    super();
    this.uds = udsPath;
    // Every readiness long-poll on this sandbox listens here; there is no fixed bound.
    this.setMaxListeners(0);
    this.kept = new SandboxHistory(
      id,
      store,
      () => ({ generation: this.link.generation, session: this.link.sessionNumber }),
      (rows) => this.emit('recorded', rows),
      (rows, ids) => this.emit('stored', rows, ids),
    );
    this.link = new Intake(id, store, this.kept, settings.budget, log, {
      reconsider: (causeAt) => this.verdict.evaluate(causeAt),
      recorded: (rows) => this.emit('recorded', rows),
      stored: (rows, ids) => this.emit('stored', rows, ids),
      connected: (gen, session) => this.emit('connected', gen, session),
    });
    this.verdict = new VerdictClock(
      {
        intake: this.link,
        history: this.kept,
        listenError: () => (this.listenFailure === null ? null : { socketPath: this.socketPath, message: this.listenFailure }),
      },
      {
        targetName: settings.targetName,
        stallAfterMs: settings.stallAfterMs,
        startDeadlineMs: settings.startDeadlineMs,
        conditions: { ...settings.conditions, stallAfterMs: settings.stallAfterMs },
      },
      {
        record: (kind, data) => this.kept.record(kind, data),
        evaluated: () => this.emit('changed'),
        transition: ({ state, previous, reason, lagMs }) => {
          this.log.info({ sandbox: this.id, state, previous, reason }, 'state changed');
          this.emit('state', {
            id: this.id,
            state,
            previous,
            reason,
            generation: this.link.generation,
            session: this.link.sessionNumber,
            lagMs,
          });
        },
      },
    );
  }

  get udsPath(): string {
    return this.uds;
  }

  get socketPath(): string {
    return `${this.uds}_${this.settings.vsockPort}`;
  }

  /** Why the collector cannot listen on socketPath, or null while it listens. */
  get listenError(): string | null {
    return this.listenFailure;
  }

  /** The probe's connections and what they said. */
  get intake(): IntakeView {
    return this.link;
  }

  /** The short histories and recent dumps. */
  get history(): HistoryView {
    return this.kept;
  }

  get generation(): number {
    return this.link.generation;
  }

  /** The current (or last) probe connection's number. */
  get session(): number {
    return this.link.sessionNumber;
  }

  /** The orchestrator's word on the VM (POST …/lifecycle). */
  lifecycle(event: LifecycleEvent): void {
    this.link.lifecycle(event);
  }

  /** The state the history has (as of the last evaluation). */
  get state(): SandboxState {
    return this.verdict.state;
  }

  /** The verdict as readers see it at `now`; records nothing (verdict-clock.ts says why it
   *  still agrees with the history). */
  read(now = Date.now()): Reading {
    return this.verdict.read(now);
  }

  /** The last evaluation's verdict, its durations written by `elapsed`, for a reader that
   *  renders it later on its own clock (the readiness thread); records nothing. */
  readingTemplate(elapsed: Elapsed): ReadingTemplate {
    return this.verdict.template(elapsed);
  }

  /** The conditions at `now`, as read() has them. */
  conditionsAt(now = Date.now()): readonly Condition[] {
    return this.verdict.conditionsAt(now);
  }

  /** Binds <udsPath>_<vsockPort>. Accepting does nothing slow: Firecracker's connect to
   *  this socket blocks its event thread until we accept. */
  async startListening(): Promise<void> {
    const gid = this.settings.socketGid;
    this.server = await listen(`unix:${this.socketPath}`, (socket) => this.link.accept(socket), {
      replaceStale: true,
      ...(gid === undefined ? { mode: 0o600 } : { mode: 0o660, gid }),
    });
    this.listenFailure = null;
    this.verdict.evaluate();
  }

  /** Binding (or re-binding after a move) failed: the verdict's reason says so until it works. */
  listenFailed(message: string): void {
    this.listenFailure = message;
    this.verdict.evaluate();
  }

  async stop(): Promise<void> {
    this.verdict.stop();
    this.link.closeAll('sandbox unregistered');
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
    const from = this.uds;
    this.uds = udsPath;
    await this.startListening();
    // A socket that moved is a restore (vsock_override): the next hello is a new life.
    if (from !== udsPath) this.link.expectMoved(from, udsPath);
  }

  /** Resolves true when a probe session is (or becomes) open within `ms`. */
  waitForSession(ms: number): Promise<boolean> {
    if (this.link.session) return Promise.resolve(true);
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
  noteBlocked(blocked: Blocked): void {
    this.kept.noteBlocked(blocked);
    this.verdict.evaluate();
  }

  /** A dump was taken (or failed): into the history, and linked from the sandbox. */
  recordDump(d: DumpNote): void {
    this.kept.noteDump(d);
  }
}
