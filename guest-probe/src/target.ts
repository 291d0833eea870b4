// Finds the target process and follows it. While the target is unknown it is looked for
// (by pid file or by name; a /proc scan, so not on every fast tick); once known only its
// own /proc/<pid>/stat is read, through a descriptor kept open while it is followed
// (proc/read.ts ProcFile). A restart by a supervisor shows as exit, then a new find.

import type { EventBody } from '@vsockdiag/proto';
import {
  CLOCK_TICKS,
  PAGE_SIZE,
  ProcFile,
  countFds,
  decodeExitCode,
  findProcessByName,
  pidStatOf,
  readPidFile,
  readPidStat,
  readProcFile,
} from './proc/index.js';
import { monotonicMs } from './clock.js';

const MS_PER_TICK = 1000 / CLOCK_TICKS;
/** A sample is sent when process facts change, and at least this often while nothing does. */
export const SAMPLE_KEEPALIVE_MS = 5000;
/** How often to look for a missing target: fast right after the probe starts, then calmer. */
const FIND_FAST_MS = 100;
const FIND_SLOW_MS = 1000;
const FIND_FAST_PERIOD_MS = 30_000;
/** A scan of every process may take at most this share of the time: with thousands of
 *  processes one scan costs milliseconds of CPU, and the guest's own work comes first. */
const FIND_MAX_DUTY = 0.05;

// biome-ignore format: a lookup table, several numbers a line
const SIGNAL_NAMES: Record<number, string> = {
  1: 'SIGHUP', 2: 'SIGINT', 3: 'SIGQUIT', 4: 'SIGILL', 5: 'SIGTRAP', 6: 'SIGABRT', 7: 'SIGBUS', 8: 'SIGFPE',
  9: 'SIGKILL', 10: 'SIGUSR1', 11: 'SIGSEGV', 12: 'SIGUSR2', 13: 'SIGPIPE', 14: 'SIGALRM', 15: 'SIGTERM',
};

export interface TargetOptions {
  name: string;
  pidFile: string | null;
  procRoot: string;
  emit: (body: EventBody) => void;
  now?: () => number;
}

interface Tracked {
  pid: number;
  /** Its /proc/<pid>/stat, open while it is followed. */
  stat: ProcFile;
  startTimeTicks: number;
  /** Spawned by the probe (wrap mode): its exit comes from the child process, not /proc. */
  child: boolean;
  lastState: string;
  lastThreads: number;
  lastSampleAt: number;
}

export class TargetWatcher {
  private tracked: Tracked | null = null;
  /** Wrap mode: the target is our child, never searched for. */
  private childMode = false;
  private lastFind = Number.NEGATIVE_INFINITY;
  /** How long the last scan took (ms of real time): the next waits at least 1/FIND_MAX_DUTY of it. */
  private findCostMs = 0;
  private readonly startedAt: number;
  private readonly now: () => number;

  constructor(private readonly opts: TargetOptions) {
    this.now = opts.now ?? Date.now;
    this.startedAt = this.now();
  }

  get pid(): number | null {
    return this.tracked?.pid ?? null;
  }

  /** One sampling step. Cheap when the target is known: one read of its stat file. */
  tick(): void {
    if (this.tracked) this.follow(this.tracked);
    else if (!this.childMode) this.find();
  }

  /** Wrap mode: the probe spawned the target itself. */
  adoptChild(pid: number, command: string[]): void {
    this.childMode = true;
    const st = readPidStat(pid, this.opts.procRoot);
    const name = command[0]!.split('/').pop()!;
    this.follows(pid, st?.startTimeTicks ?? 0, true);
    this.opts.emit({
      kind: 'target.found',
      pid,
      name,
      startedAt: (st?.startTimeTicks ?? 0) * MS_PER_TICK,
      source: 'child',
      cmdline: command.join(' ').slice(0, 4096),
    });
  }

  /** Wrap mode: the child exited (we are its parent, so the status is known). */
  childExited(code: number | null, signal: NodeJS.Signals | null): void {
    if (!this.tracked) return;
    const pid = this.tracked.pid;
    this.unfollow();
    this.opts.emit({
      kind: 'target.exit',
      pid,
      ...(code !== null ? { exitCode: code } : {}),
      ...(signal !== null ? { signal } : {}),
    });
  }

  /**
   * A process just spoke to the notify socket: if the target is still unknown, look at that
   * pid first (one stat read) instead of waiting for the next scan.
   */
  hint(pid: number): void {
    if (this.tracked || this.childMode || this.opts.pidFile || pid <= 0) return;
    const st = readPidStat(pid, this.opts.procRoot);
    if (st && st.comm === this.opts.name.slice(0, 15)) this.adopt(pid);
  }

  private find(): void {
    const now = this.now();
    const every = Math.max(now - this.startedAt < FIND_FAST_PERIOD_MS ? FIND_FAST_MS : FIND_SLOW_MS, this.findCostMs / FIND_MAX_DUTY);
    if (now - this.lastFind < every) return;
    this.lastFind = now;
    const { procRoot, pidFile, name } = this.opts;
    const started = monotonicMs();
    const pid = pidFile ? readPidFile(pidFile) : findProcessByName(name, procRoot);
    this.findCostMs = monotonicMs() - started;
    if (pid !== null) this.adopt(pid);
  }

  private adopt(pid: number): void {
    const { procRoot, pidFile, name } = this.opts;
    const st = readPidStat(pid, procRoot);
    if (!st || st.state === 'Z') return;
    const t = this.follows(pid, st.startTimeTicks, false);
    const cmdline = readProcFile(`${procRoot}/${pid}/cmdline`, 4096);
    this.opts.emit({
      kind: 'target.found',
      pid,
      name: pidFile ? st.comm : name,
      startedAt: st.startTimeTicks * MS_PER_TICK,
      source: pidFile ? 'pidfile' : 'name',
      ...(cmdline ? { cmdline: cmdline.replace(/\0+$/, '').replace(/\0/g, ' ').slice(0, 4096) } : {}),
    });
    this.follow(t);
  }

  private follows(pid: number, startTimeTicks: number, child: boolean): Tracked {
    this.tracked?.stat.close();
    const stat = new ProcFile(`${this.opts.procRoot}/${pid}/stat`);
    this.tracked = { pid, stat, startTimeTicks, child, lastState: '', lastThreads: -1, lastSampleAt: 0 };
    return this.tracked;
  }

  private unfollow(): void {
    this.tracked?.stat.close();
    this.tracked = null;
  }

  /** Stops following the target: its descriptor is closed. */
  stop(): void {
    this.unfollow();
  }

  private follow(t: Tracked): void {
    const st = pidStatOf(t.stat);
    const gone = !st || (st.startTimeTicks !== t.startTimeTicks && !t.child);
    if (!t.child && (gone || st!.state === 'Z')) {
      this.unfollow();
      this.lastFind = Number.NEGATIVE_INFINITY;
      // A zombie not yet reaped by its parent still shows its exit status (field 52); once
      // reaped, the status is gone and the exit is reported without one.
      const status = !gone && st!.state === 'Z' ? st!.exitCode : null;
      const exit = status !== null ? decodeExitCode(status) : null;
      this.opts.emit({
        kind: 'target.exit',
        pid: t.pid,
        ...(exit?.code != null ? { exitCode: exit.code } : {}),
        ...(exit?.signal != null ? { signal: SIGNAL_NAMES[exit.signal] ?? `SIG${exit.signal}` } : {}),
      });
      return;
    }
    if (!st) return; // our child is gone; its exit event is on its way
    const now = this.now();
    if (st.state === t.lastState && st.threads === t.lastThreads && now - t.lastSampleAt < SAMPLE_KEEPALIVE_MS) return;
    t.lastState = st.state;
    t.lastThreads = st.threads;
    t.lastSampleAt = now;
    this.opts.emit({
      kind: 'target.sample',
      pid: t.pid,
      state: st.state.slice(0, 1),
      threads: st.threads,
      rssKb: Math.round((st.rssPages * PAGE_SIZE) / 1024),
      fds: countFds(t.pid, this.opts.procRoot),
      cpuMs: Math.round((st.utimeTicks + st.stimeTicks) * MS_PER_TICK),
    });
  }
}
