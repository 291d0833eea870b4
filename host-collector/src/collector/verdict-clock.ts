// When a sandbox's verdict (verdict.ts) is decided, and what readers see of it.
//
// Events and timers decide; reads never record. Every change to an input of the verdict
// (a hello, a batch, a close, a heartbeat that corrects the guest clock: intake.ts; a dump's
// finding: history.ts; a listen failure: sandbox.ts) calls evaluate(), which decides at once,
// records a state change and the conditions raised or cleared in the history, and arms one
// timer for the moment the verdict could next change by itself (its recheckAt).
//
// The rule for reads (read(), conditionsAt()): between two evaluations only time moves, and
// time alone can change the state only at the moment the timer is armed for. So a read
// decides at its time held just short of that moment (and not before the last evaluation,
// should the wall clock step back). It always shows the state the history has; a read that
// lands on a threshold before the timer fires shows the state before it (and a reason of
// that moment), and the timer records the transition right after.

import type { ConditionName, SandboxState } from '../catalogue.js';
import { conditions, conditionsRecheckAt, type Condition, type ConditionSettings } from './conditions.js';
import type { Elapsed } from './elapsed.js';
import type { HistoryView } from './history.js';
import type { IntakeView } from './intake.js';
import { decide, type VerdictInput } from './verdict.js';

/** What the verdict is decided from, read afresh at each decision. */
export interface VerdictSources {
  readonly intake: Pick<IntakeView, 'session' | 'status' | 'clock' | 'connectedAt' | 'disconnectedAt' | 'disconnectReason' | 'pausedSince'>;
  readonly history: Pick<HistoryView, 'threads' | 'kernel' | 'skewMs' | 'blocked'>;
  /** Why the collector cannot listen on the sandbox's socket, if it cannot. */
  listenError(): VerdictInput['listenError'];
}

export interface VerdictSettings {
  targetName: string;
  stallAfterMs: number;
  startDeadlineMs: number;
  conditions: ConditionSettings;
}

export interface Transition {
  state: SandboxState;
  previous: SandboxState;
  reason: string;
  /** From the cause (see evaluate) to this decision, ms. */
  lagMs: number;
}

export interface VerdictHooks {
  /** Into the sandbox's history. */
  record(kind: 'state' | 'condition', data: Record<string, unknown>): void;
  /** Decided again: the reason or the conditions may read differently now. */
  evaluated(): void;
  /** The state changed (already in the history). */
  transition(t: Transition): void;
}

/** What a reader sees of the verdict. */
export interface Reading {
  state: SandboxState;
  reason: string;
  conditions: readonly Condition[];
  /** Host ms since which the sandbox has been in `state`. */
  since: number;
}

/** The last evaluation's verdict with its durations left to the reader (elapsed.ts), for a
 *  reader elsewhere that renders it at its own read, by the rule above (readMoment). */
export interface ReadingTemplate {
  state: SandboxState;
  /** The reason, its durations written by the Elapsed given. */
  reason: string;
  /** When the evaluation ran, and the moment its timer looks again (null: no timer), host ms. */
  evaluatedAt: number;
  dueAt: number | null;
}

/** The moment a read at `now` decides at: held just short of the armed timer's moment, and
 *  not before the last evaluation (should the wall clock step back). */
export function readMoment(now: number, evaluatedAt: number, dueAt: number | null): number {
  const held = dueAt === null ? now : Math.min(now, dueAt - 1);
  return Math.max(evaluatedAt, held);
}

const NO_CONDITIONS: readonly Condition[] = [];

export class VerdictClock {
  private decided: SandboxState = 'registered';
  private decidedSince = Date.now();
  /** When the last evaluation ran, and the moment its timer looks again (null: no timer). */
  private evaluatedAt = this.decidedSince;
  private dueAt: number | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** The moment `timer` is armed for. */
  private timerDue: number | null = null;
  /** Conditions raised and not yet cleared, with their detail when raised. */
  private readonly raised = new Map<ConditionName, string>();
  private stopped = false;
  /** The input of the evaluation whose `evaluated` hook is running (see template()). */
  private evaluating: VerdictInput | null = null;
  private readonly toHost = (guestMs: number) => this.sources.intake.clock.toHost(guestMs);

  constructor(
    private readonly sources: VerdictSources,
    private readonly settings: VerdictSettings,
    private readonly hooks: VerdictHooks,
  ) {}

  /** The state as of the last evaluation: the one the history has. */
  get state(): SandboxState {
    return this.decided;
  }

  get since(): number {
    return this.decidedSince;
  }

  /** The verdict at `now` as readers see it (see the rule above). Records nothing. */
  read(now = Date.now()): Reading {
    const input = this.inputAt(this.readMoment(now));
    return { state: this.decided, reason: decide(input).reason, conditions: input.conditions ?? NO_CONDITIONS, since: this.decidedSince };
  }

  /** The last evaluation's verdict, its durations written by `elapsed`. Records nothing.
   *  Asked for from the `evaluated` hook (the readiness thread asks at every evaluation of
   *  every sandbox), it is decided from that evaluation's own input, not gathered again. */
  template(elapsed: Elapsed): ReadingTemplate {
    const own = this.evaluating;
    // A condition's detail may hold a duration, and the evaluation's were formatted at once:
    // with conditions in force, the input is gathered again with them written by `elapsed`.
    const input = own && (own.conditions ?? NO_CONDITIONS).length === 0 ? own : this.inputAt(this.evaluatedAt, elapsed);
    return { state: this.decided, reason: decide(input, elapsed).reason, evaluatedAt: this.evaluatedAt, dueAt: this.dueAt };
  }

  /** The conditions at `now` as readers see them (as read() has them, without the reason). */
  conditionsAt(now = Date.now()): readonly Condition[] {
    return this.conditionsOf(this.readMoment(now));
  }

  /** Decides now, records a transition if the state changed, and arms the next check.
   *  `causeAt` is when the input that asks for it happened (host ms: a probe event's time),
   *  so a transition knows its lag; the timer passes the threshold it waited for. */
  evaluate(causeAt?: number): void {
    if (this.stopped) return;
    const now = Date.now();
    const input = this.inputAt(now);
    // The reason text only when the state changed (same input, same now: the same verdict).
    const v = decide(input, false);
    const previous = this.decided;
    this.decided = v.state;
    this.evaluatedAt = now;
    this.dueAt = v.recheckAt;
    this.noteConditions(input.conditions ?? NO_CONDITIONS);
    // Held only while the hook runs: kept a second longer, 5,000 sandboxes' inputs would each
    // outlive the young generation and churn the old one.
    this.evaluating = input;
    try {
      this.hooks.evaluated();
    } finally {
      this.evaluating = null;
    }
    if (v.state !== previous) {
      const { reason } = decide(input);
      this.decidedSince = now;
      this.hooks.record('state', { state: v.state, previous, reason });
      this.hooks.transition({ state: v.state, previous, reason, lagMs: Math.max(0, now - (causeAt ?? now)) });
    }
    // The timer armed for this very moment stays (a booting sandbox's start deadline does not
    // move with each batch): thousands of sandboxes would otherwise re-arm one per batch.
    if (this.timer && this.timerDue === v.recheckAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerDue = v.recheckAt;
    if (v.recheckAt !== null) {
      // +1 ms so the threshold has certainly passed when we look again.
      const due = v.recheckAt;
      this.timer = setTimeout(
        () => {
          this.timer = null;
          this.evaluate(due);
        },
        Math.max(0, due - now) + 1,
      );
    }
  }

  /** No more decisions (the sandbox is going away). */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private readMoment(now: number): number {
    return readMoment(now, this.evaluatedAt, this.dueAt);
  }

  private conditionsOf(now: number, elapsed?: Elapsed): readonly Condition[] {
    const { status } = this.sources.intake;
    if (!status) return NO_CONDITIONS;
    const { threads, kernel, skewMs } = this.sources.history;
    const settings = this.settings.conditions;
    return conditions({ now, status, toHost: this.toHost, threads, kernel, skewMs, settings, elapsed });
  }

  private inputAt(now: number, elapsed?: Elapsed): VerdictInput {
    const { intake, history } = this.sources;
    const { status } = intake;
    const { toHost } = this;
    return {
      blocked: history.blocked,
      listenError: this.sources.listenError(),
      conditions: this.conditionsOf(now, elapsed),
      conditionsRecheckAt: status ? conditionsRecheckAt({ status, toHost, now, settings: this.settings.conditions }) : null,
      now,
      connected: intake.session !== null,
      pausedSince: intake.pausedSince,
      connectedAt: intake.connectedAt,
      disconnectedAt: intake.disconnectedAt,
      disconnectReason: intake.disconnectReason,
      status,
      toHost,
      targetName: this.settings.targetName,
      stallAfterMs: this.settings.stallAfterMs,
      startDeadlineMs: this.settings.startDeadlineMs,
    };
  }

  /** Records conditions as they are raised and cleared, so the history shows them. */
  private noteConditions(current: readonly Condition[]): void {
    if (current.length === 0 && this.raised.size === 0) return; // the usual case
    for (const c of current) {
      if (!this.raised.has(c.name)) this.hooks.record('condition', { name: c.name, raised: true, detail: c.detail });
      this.raised.set(c.name, c.detail);
    }
    for (const [name, detail] of this.raised) {
      if (current.some((c) => c.name === name)) continue;
      this.hooks.record('condition', { name, raised: false, detail });
      this.raised.delete(name);
    }
  }
}
