// Taking, parsing and keeping dumps. A dump goes over the probe's own session when it is
// up, else through the probe's command port (Firecracker's host-initiated CONNECT), on a
// fresh connection, with a dial deadline; a command port out of reach falls back to the
// session once the probe is back. Either way the answer must come from the sandbox's current
// generation: an answer that straddles a restore is thrown away and the dump taken again,
// once (and so is one whose session was replaced by a reconnect: the new session can answer).
//
// Automatic dumps: on entering `stuck`, a goroutine dump that does not harm the target (read
// from its memory, or its pprof page); a threads dump when that fails (not a Go target, no
// ptrace permission); with --on-stuck=quit also the destructive SIGQUIT dump, so the
// supervisor restarts envd with the evidence kept. Each is linked from the history, and a
// goroutine dump of the current target tells the verdict where it is blocked.
// A guest can bring about any number of stuck episodes (a reboot, a restore, a restarted
// target), so automatic sets are rate-limited per sandbox; a set not taken is recorded as skipped.

import { DUMP_MODES, MAX_DUMP_BYTES, type DumpMode } from '@vsockdiag/proto';
import type { DumpErrorCode, DumpTrigger } from '../catalogue.js';
import { topGroup } from '../dumps/analyze.js';
import { whereBlocked } from '../dumps/where-blocked.js';
import type { DumpAnalyzer } from './dump-analyzer.js';
import type { Logger } from './logger.js';
import { requestViaCommandPort } from './probe-dial.js';
import type { Registry } from './registry.js';
import { RequestError, type Answer } from './requests.js';
import type { Sandbox, StateChange } from './sandbox.js';
import type { StoredDump, Store } from './store.js';

/** A threads dump is quick; SIGQUIT waits for the target to exit; gdb can be slow. */
export const DUMP_TIMEOUT_MS: Record<DumpMode, number> = { threads: 15_000, goroutines: 45_000, native: 60_000 };

export type OnStuck = 'threads' | 'quit';

/** How long a dump whose session died waits for the probe to reconnect. */
const RECONNECT_WAIT_MS = 3000;

/** How long a dump whose command port is out of reach (a CONNECT hung past DIAL_DEADLINE_MS,
 *  answered by EOF, or refused at the connection limit) waits for the probe's session: a
 *  probe reconnects within its backoff cap (2 s) of the link coming back, and notices a dead
 *  link within its idle timeout (5 s). */
export const SESSION_FALLBACK_WAIT_MS = 6000;

/** At most AUTO_DUMP_SETS automatic dump sets per sandbox in any AUTO_DUMP_WINDOW_MS, however
 *  many stuck episodes (reconnects, restarts of the target) fall in it. */
export const AUTO_DUMP_SETS = 3;
export const AUTO_DUMP_WINDOW_MS = 10 * 60_000;

/** One sandbox's automatic dumps: the episode last dumped, and when recent sets started. */
interface AutoHistory {
  episode: string;
  /** Start times of the sets taken in the last window, oldest first. */
  taken: number[];
  /** Until when the skip is already recorded (one record per pause, not one per episode). */
  skipNotedUntil: number;
}

export interface DumpRequest {
  mode: DumpMode;
  destructive: boolean;
  trigger: DumpTrigger;
}

export class DumpError extends Error {
  constructor(
    readonly code: DumpErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export class DumpService {
  private auto = new Map<string, AutoHistory>();

  constructor(
    private readonly store: Store,
    private readonly registry: Registry,
    private readonly log: Logger,
    private readonly opts: { probePort: number; onStuck: OnStuck; analyzer: DumpAnalyzer },
  ) {
    registry.on('state', (c: StateChange) => {
      if (c.state === 'stuck') void this.autoDumps(c.id, c.generation);
    });
    registry.on('removed', (id: string) => this.auto.delete(id));
    // The first sandbox whose state moves has a probe that can be asked for a dump (and a
    // stuck one gets one at once): the dump worker starts then, not on that first dump.
    registry.once('state', () => opts.analyzer.prestart());
  }

  async take(sb: Sandbox, req: DumpRequest): Promise<StoredDump> {
    if (!(DUMP_MODES as readonly string[]).includes(req.mode))
      throw new DumpError('BAD_REQUEST', `mode must be one of ${DUMP_MODES.join(', ')}`);
    const started = Date.now();
    const generation = sb.generation;
    const told = { id: sb.id, mode: req.mode, trigger: req.trigger };
    try {
      const d = await this.attempts(sb, req);
      const at = Date.now();
      const error = d.error ? { error: d.error } : {};
      this.registry.feed.publish({
        ...told,
        ...error,
        type: 'dump',
        generation: d.generation,
        at,
        dumpId: d.id,
        ok: !d.error,
        durationMs: at - started,
      });
      return d;
    } catch (err) {
      const at = Date.now();
      const error = (err as Error).message;
      this.registry.feed.publish({ ...told, type: 'dump', generation, at, dumpId: null, ok: false, error, durationMs: at - started });
      throw err;
    }
  }

  /** The dump, asked for again once if the sandbox changed generation under the first try. */
  private async attempts(sb: Sandbox, req: DumpRequest): Promise<StoredDump> {
    let lastErr: Error | null = null;
    for (let attempt = 0; attempt < 2; attempt++) {
      const generation = sb.generation;
      const session = sb.session;
      try {
        const { answer, via } = await this.ask(sb, req);
        if (sb.generation !== generation) {
          throw new DumpError('STALE_GENERATION', `the sandbox moved to generation ${sb.generation} during the dump (${via})`);
        }
        if (!answer.result.ok && answer.bytes === 0) {
          // Nothing to keep (no target, a mode the probe cannot do): an answer, not a dump.
          throw new DumpError('DUMP_FAILED', answer.result.error ?? 'the probe could not take the dump');
        }
        return await this.keep(sb, req, answer, generation);
      } catch (err) {
        lastErr = err as Error;
        // Retry once if the sandbox changed generation or session under us: the new one can answer.
        if (err instanceof DumpError && err.code === 'DUMP_FAILED') break;
        if (sb.generation === generation && sb.session === session) break;
      }
    }
    throw lastErr instanceof DumpError
      ? lastErr
      : lastErr instanceof RequestError && lastErr.code === 'TIMEOUT'
        ? new DumpError('DUMP_TIMEOUT', lastErr.message)
        : new DumpError('PROBE_UNREACHABLE', lastErr?.message ?? 'no answer');
  }

  /** Session first; if there is none (or it dies), the command port. */
  private async ask(sb: Sandbox, req: DumpRequest): Promise<{ answer: Answer; via: string }> {
    const command = { op: 'dump' as const, mode: req.mode, destructive: req.destructive };
    const timeout = DUMP_TIMEOUT_MS[req.mode];
    const session = sb.intake.session;
    if (session) {
      try {
        return { answer: await session.request(command, timeout, MAX_DUMP_BYTES), via: 'session' };
      } catch (err) {
        if (!(err instanceof RequestError) || err.code !== 'CLOSED') throw err;
        // A session that dies mid-dump is often a snapshot's transport reset: the probe is
        // back within moments, on a new session (of a new generation if it was a restore).
        // Ask that one (take() retries), rather than a command port that may reach the VM in between.
        if (await sb.waitForSession(RECONNECT_WAIT_MS)) {
          throw new DumpError(
            'STALE_GENERATION',
            `the probe reconnected (generation ${sb.generation}, session ${sb.session}) during the dump`,
          );
        }
        this.log.info({ sandbox: sb.id, err: err.message }, 'session closed during a dump; trying the command port');
      }
    }
    const expected = sb.intake.probe;
    let a: Awaited<ReturnType<typeof requestViaCommandPort>>;
    try {
      a = await requestViaCommandPort(sb.udsPath, this.opts.probePort, command, timeout);
    } catch (err) {
      // A sandbox that never had a probe has no session to wait for.
      if (!(err instanceof RequestError) || err.code !== 'UNREACHABLE' || !expected) throw err;
      // The command port is out of reach, but the probe's own session may be back soon (the
      // link of a restored VM comes back while its host-initiated path stays hung): ask there.
      this.log.info({ sandbox: sb.id, err: err.message }, 'command port unreachable; waiting for the session');
      const session = (await sb.waitForSession(SESSION_FALLBACK_WAIT_MS)) ? sb.intake.session : null;
      if (!session) {
        throw new RequestError('UNREACHABLE', `${err.message}; no session either within ${SESSION_FALLBACK_WAIT_MS / 1000} s`);
      }
      return { answer: await session.request(command, timeout, MAX_DUMP_BYTES), via: 'session, after the command port failed' };
    }
    // Same memory as the session we know, or we cannot tell which VM answered.
    if (expected && (a.hello.instanceId !== expected.instanceId || a.hello.generation < expected.generation)) {
      throw new DumpError(
        'STALE_GENERATION',
        `the command port answered as probe ${a.hello.instanceId} session ${a.hello.generation}, not the current ${expected.instanceId} session ${expected.generation}`,
      );
    }
    return { answer: a, via: 'command port' };
  }

  /**
   * The last evidence before a sandbox goes (DELETE …?capture=1): a goroutine dump that does not
   * harm the target when it is a Go program, else (the probe answers it cannot) a threads dump.
   * Never throws: no dump is an answer with the reason.
   */
  async final(sb: Sandbox): Promise<{ dump: StoredDump | null; error: string | null }> {
    // A paused VM answers nothing: waiting out both modes' time limits would only delay the teardown.
    if (sb.intake.pausedSince !== null) return { dump: null, error: 'the VM is paused (lifecycle hint): no probe can answer' };
    let error: string | null = null;
    for (const mode of ['goroutines', 'threads'] as const) {
      try {
        const d = await this.take(sb, { mode, destructive: false, trigger: 'final' });
        if (d.error === null) return { dump: d, error: null };
        error = d.error;
      } catch (err) {
        error = (err as Error).message;
        // No probe to ask: a threads dump would not find one either.
        if (err instanceof DumpError && err.code === 'PROBE_UNREACHABLE') break;
      }
    }
    this.log.warn({ sandbox: sb.id, err: error }, 'final dump not taken');
    return { dump: null, error };
  }

  /** Stores the answer: gzipped and analysed in the dump worker, so a big or hostile dump never holds up the event loop. */
  private async keep(sb: Sandbox, req: DumpRequest, a: Answer, generation: number): Promise<StoredDump> {
    const d = a.result.dump;
    const complete = Boolean(d?.complete) && !a.cut && a.contiguous && d?.bytes === a.bytes && d.chunks === a.chunks.length;
    const error = a.result.ok ? null : (a.result.error ?? 'the probe could not take the dump');
    const { gz, bytes, analysis, notAnalysed } = await this.opts.analyzer.ingest(a.chunks);
    const notes = [d?.note ?? (a.cut ? `cut at ${MAX_DUMP_BYTES} bytes` : null), notAnalysed ? `not analysed: ${notAnalysed}` : null];
    const id = this.store.saveDump({
      sandboxId: sb.id,
      generation,
      mode: req.mode,
      source: d?.source ?? 'none',
      trigger: req.trigger,
      complete,
      error,
      note: notes.filter((n) => n !== null).join('; ') || null,
      pid: d?.pid ?? null,
      pausedMs: d?.pausedMs ?? null,
      createdMs: Date.now(),
      gz,
      bytes,
      analysis,
    });
    if (analysis?.kind === 'goroutines' && complete && d?.pid !== undefined) {
      const where = whereBlocked(analysis.goroutineGroups);
      if (where) sb.noteBlocked({ pid: d.pid, text: where.text, dumpId: id });
    }
    const top = analysis ? topGroup(analysis) : null;
    sb.recordDump({
      dumpId: id,
      mode: req.mode,
      trigger: req.trigger,
      complete,
      ...(error ? { error } : {}),
      ...(top ? { blockedIn: top.blockedIn, count: top.count } : {}),
    });
    this.log.info({ sandbox: sb.id, dump: id, mode: req.mode, trigger: req.trigger, bytes, complete, error, notAnalysed }, 'dump stored');
    return this.store.dumpInfo(sb.id, id)!;
  }

  /** The automatic set, then the feed hears it is over and which dumps it stored. */
  private async autoDumps(id: string, generation: number): Promise<void> {
    const stored: number[] = [];
    try {
      await this.autoDumpSet(id, stored);
    } finally {
      this.registry.feed.publish({ type: 'auto-dumps', id, generation, at: Date.now(), dumpIds: stored });
    }
  }

  /** One set per stuck episode (generation and target pid), within the rate limit. */
  private async autoDumpSet(id: string, stored: number[]): Promise<void> {
    const sb = this.registry.get(id);
    const target = sb?.intake.status?.target;
    if (!sb || !target) return;
    const episode = `${sb.generation}:${target.pid}`;
    const now = Date.now();
    let h = this.auto.get(id);
    if (!h) this.auto.set(id, (h = { episode: '', taken: [], skipNotedUntil: 0 }));
    if (h.episode === episode) return;
    h.episode = episode;
    while (h.taken.length > 0 && h.taken[0]! <= now - AUTO_DUMP_WINDOW_MS) h.taken.shift();
    const harmless: DumpRequest = { mode: 'goroutines', destructive: false, trigger: 'auto' };
    const fallback: DumpRequest = { mode: 'threads', destructive: false, trigger: 'auto' };
    const quit: DumpRequest | null = this.opts.onStuck === 'quit' ? { mode: 'goroutines', destructive: true, trigger: 'auto' } : null;
    if (h.taken.length >= AUTO_DUMP_SETS) {
      const until = h.taken[0]! + AUTO_DUMP_WINDOW_MS;
      this.log.info({ sandbox: id, episode }, 'automatic dumps skipped (rate limit)');
      if (h.skipNotedUntil < until) {
        // Once per pause: the record says until when, so it covers the episodes after it too.
        h.skipNotedUntil = until;
        const error = `skipped: ${AUTO_DUMP_SETS} automatic dump sets in the last ${AUTO_DUMP_WINDOW_MS / 60_000} minutes; none until ${new Date(until).toISOString()}`;
        sb.recordDump({ mode: 'goroutines', trigger: 'auto', complete: false, error });
      }
      return;
    }
    h.taken.push(now);
    if (!(await this.autoDump(sb, harmless, stored))) await this.autoDump(sb, fallback, stored);
    if (quit) await this.autoDump(sb, quit, stored);
  }

  /** One automatic dump (its id into `stored`); a failure goes into the history. True when a
   *  dump was stored without error. */
  private async autoDump(sb: Sandbox, req: DumpRequest, stored: number[]): Promise<boolean> {
    try {
      const d = await this.take(sb, req);
      stored.push(d.id);
      return d.error === null;
    } catch (err) {
      this.log.warn({ sandbox: sb.id, mode: req.mode, err: (err as Error).message }, 'automatic dump failed');
      sb.recordDump({ mode: req.mode, trigger: 'auto', complete: false, error: (err as Error).message });
      return false;
    }
  }
}
