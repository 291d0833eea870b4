// What a sandbox remembers beside the probe's own events: the collector's events (state
// changes, conditions, session edges, gaps, dumps) written into the sandbox's history in the
// store, and the short, bounded histories that conditions, the verdict and the API read
// (thread counts, kernel notes, the phase timeline, clock skew, recent dumps, where a dump
// found the target blocked).

import { CLOCK_SLACK_MS, type DumpMode, type ProbeEvent } from '@vsockdiag/proto';
import type { CollectorEventKind, DumpTrigger } from '../catalogue.js';
import type { GuestClock } from './clock.js';
import type { KernelNote } from './conditions.js';
import type { EventRecord, Store } from './store.js';

/** Bounds on the short histories. */
const MAX_THREAD_SAMPLES = 256;
const MAX_KERNEL_NOTES = 32;
const MAX_PHASES = 64;
const MAX_RECENT_DUMPS = 10;

export interface ThreadSample {
  /** Host ms. */
  at: number;
  n: number;
}

export interface PhaseMark {
  name: string;
  /** Guest ms since boot. */
  t: number;
}

export interface RecentDump {
  /** Into the store; null when nothing was stored (a failure). */
  id: number | null;
  mode: DumpMode;
  trigger: DumpTrigger;
  at: number;
  complete: boolean;
  error?: string;
}

export interface Blocked {
  pid: number;
  text: string;
  dumpId: number;
}

/** A dump as it goes into the history (dump-service.ts). */
export type DumpNote = {
  dumpId?: number;
  mode: DumpMode;
  trigger: DumpTrigger;
  complete: boolean;
  error?: string;
  blockedIn?: string;
  count?: number;
};

/** What readers see of the history: nothing can be changed through it. */
export interface HistoryView {
  /** The current target's thread counts, for thread-growth. */
  readonly threads: readonly ThreadSample[];
  /** The current target's phases and when it became ready (guest ms), for fleet phase durations. */
  readonly phaseTimeline: readonly PhaseMark[];
  readonly readyAt: number | null;
  /** Kernel messages worth seeing (host ms). */
  readonly kernel: readonly KernelNote[];
  /** Guest wall clock minus host wall clock, from the last hello or system sample. */
  readonly skewMs: number | null;
  /** The newest dumps, newest last, for linking from the state. */
  readonly recentDumps: readonly RecentDump[];
  /** Where the newest goroutine dump of a target found it blocked (dumps/where-blocked.ts);
   *  the verdict names it while that pid is still the target. */
  readonly blocked: Readonly<Blocked> | null;
}

export class SandboxHistory implements HistoryView {
  private threadSamples: ThreadSample[] = [];
  private phases: PhaseMark[] = [];
  private readyAtMs: number | null = null;
  private readonly kernelNotes: KernelNote[] = [];
  private skew: number | null = null;
  private readonly dumps: RecentDump[] = [];
  private blockedIn: Blocked | null = null;

  constructor(
    private readonly sandboxId: string,
    private readonly store: Store,
    /** The sandbox's generation and session now: collector events are filed under them. */
    private readonly now: () => { generation: number; session: number },
    /** Rows just queued for the store (the verdict has seen them). */
    private readonly recorded: (rows: EventRecord[]) => void,
    /** Rows just committed, with the ids the history lists them by (the live stream). */
    private readonly stored: (rows: EventRecord[], ids: readonly number[]) => void,
  ) {}

  get threads(): readonly ThreadSample[] {
    return this.threadSamples;
  }

  get phaseTimeline(): readonly PhaseMark[] {
    return this.phases;
  }

  get readyAt(): number | null {
    return this.readyAtMs;
  }

  get kernel(): readonly KernelNote[] {
    return this.kernelNotes;
  }

  get skewMs(): number | null {
    return this.skew;
  }

  get recentDumps(): readonly RecentDump[] {
    return this.dumps;
  }

  get blocked(): Readonly<Blocked> | null {
    return this.blockedIn;
  }

  /** A collector-side event (state change, session edge, gap, …) in the sandbox's history. */
  record(kind: CollectorEventKind, data: Record<string, unknown>): void {
    const { generation, session } = this.now();
    const row: EventRecord = {
      sandboxId: this.sandboxId,
      generation,
      session,
      seq: null,
      kind,
      tGuest: null,
      tHost: Date.now(),
      data,
    };
    this.store.append([row], (err, ids) => {
      if (!err) this.stored([row], ids);
    });
    this.recorded([row]);
  }

  /** A hello's clocks: the skew until the next system sample. */
  noteSkew(skewMs: number): void {
    this.skew = skewMs;
  }

  /** Keeps what the short histories need of a probe event (bounded). */
  remember(e: ProbeEvent, clock: GuestClock): void {
    switch (e.kind) {
      case 'target.found':
        this.threadSamples = [];
        // Phases reported just before the probe found the target are its own (see applyEvent).
        this.phases = this.phases.filter((p) => p.t >= e.startedAt - CLOCK_SLACK_MS);
        this.readyAtMs = null;
        return;
      case 'phase':
        if (e.name !== undefined && this.phases.length < MAX_PHASES) this.phases.push({ name: e.name, t: e.t });
        if (e.ready && this.readyAtMs === null) this.readyAtMs = e.t;
        return;
      case 'target.sample':
        this.threadSamples.push({ at: clock.toHost(e.t), n: e.threads });
        if (this.threadSamples.length > MAX_THREAD_SAMPLES) this.threadSamples.splice(0, this.threadSamples.length - MAX_THREAD_SAMPLES);
        return;
      case 'kernel': {
        // Dated by the kernel's timestamp, not by when the probe read the record: a probe that
        // (re)starts reads the kernel's whole buffer, and an OOM kill from before this target
        // started is not about it. (Never later than the read: the clocks may drift apart.)
        const kernelMs = e.kernelMs;
        if (kernelMs !== undefined && this.kernelNotes.some((k) => k.kernelMs === kernelMs && k.message === e.message)) return; // read again
        this.kernelNotes.push({
          what: e.what,
          at: clock.toHost(kernelMs !== undefined ? Math.min(kernelMs, e.t) : e.t),
          message: e.message,
          ...(e.process !== undefined ? { process: e.process } : {}),
          ...(e.pid !== undefined ? { pid: e.pid } : {}),
          ...(kernelMs !== undefined ? { kernelMs } : {}),
        });
        if (this.kernelNotes.length > MAX_KERNEL_NOTES) this.kernelNotes.shift();
        return;
      }
      case 'system':
        this.skew = Math.round(e.wallMs - clock.toHost(e.t));
        return;
      default:
        return;
    }
  }

  /** A goroutine dump found the target blocked somewhere. */
  noteBlocked(blocked: Blocked): void {
    this.blockedIn = blocked;
  }

  /** A dump was taken (or failed): into the history, and linked from the sandbox. */
  noteDump(d: DumpNote): void {
    this.record('dump', d);
    this.dumps.push({
      id: d.dumpId ?? null,
      mode: d.mode,
      trigger: d.trigger,
      at: Date.now(),
      complete: d.complete,
      ...(d.error ? { error: d.error } : {}),
    });
    if (this.dumps.length > MAX_RECENT_DUMPS) this.dumps.shift();
  }
}
