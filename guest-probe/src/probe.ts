// The probe, assembled: watchers observe, every observation becomes a numbered event in
// the ring and updates the status keyframe, and the link streams both to the collector.
//
//   notify socket ─┐
//   target (/proc) ├─► emit() ─► ring ─► link ─► collector
//   listener       ┘      └─► status (keyframe for every hello)

import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import {
  CLOCK_SLACK_MS,
  HEARTBEAT_INTERVAL_MS,
  MAX_NOTIFY_DATAGRAM,
  MAX_TEXT,
  PROTOCOL_VERSION,
  applyEvent,
  eventSchema,
  initialStatus,
  listen,
  parseAddress,
  type EventBody,
  type Hello,
  type ProbeStatus,
} from '@vsockdiag/proto';
import { BootClock } from './clock.js';
import { serveCommands, type Command, type CommandAnswer, type CommandChannel } from './commands.js';
import type { ProbeConfig } from './config.js';
import { Link } from './link.js';
import { socketCensus } from './diag.js';
import { HealthChecker } from './health.js';
import { KmsgReader, type KmsgOptions } from './kmsg.js';
import { addonOrNull } from './native.js';
import { UeventWatcher } from './uevent.js';
import { setSettled, withDumpFlags } from './v8-flags.js';
import { FileFollower } from './logs/follow-file.js';
import { JournalFollower } from './logs/journal.js';
import { LogWatcher } from './logs/log-watcher.js';
import { SigquitCapture, dumpChunks, takeDump, tracebackEnded, waitForExit } from './dumps/index.js';
import { ListenerWatcher, pickListenerQuery } from './listener.js';
import { NotifyListener } from './notify/listener.js';
import { NOTIFY_EVENTS_PER_SEC, NOTIFY_PAUSE_MS } from './notify/rate.js';
import { SampleLoop, SampleRate } from './sample-loop.js';
import { phaseEvent } from './phases.js';
import { readBootId } from './proc/index.js';
import { EventRing } from './ring.js';
import { SocketWatcher } from './sockets.js';
import { SystemSampler, UNKNOWN_BOOT_ID } from './system.js';
import { TargetWatcher } from './target.js';
import { isRetryable } from './vsock/index.js';
import * as lazy from './lazy-builtins.js';
import { exitStatusOf, flushOutput, spawnTarget } from './wrap.js';
import { monotonicMs } from './clock.js';

export const PROBE_VERSION = '0.1.0';
export const KEYFRAME_EVERY_MS = 60_000;
/** In wrap mode, how long to wait for the collector to ack the exit before exiting anyway. */
const EXIT_FLUSH_MS = 5000;
/** After a SIGQUIT'ed target exited, how long the journal may take to hand over the end of
 *  its traceback: journald tells readers of new entries at most every 250 ms
 *  (POST_CHANGE_TIMER_INTERVAL_USEC), and later under load. */
const JOURNAL_LAG_MAX_MS = 5000;

export class Probe {
  readonly instanceId = randomId();
  readonly ring = new EventRing();
  status: ProbeStatus;
  readonly link: Link;
  private readonly clock: BootClock;
  private readonly bootId: string;
  private readonly target: TargetWatcher;
  private readonly listener: ListenerWatcher;
  /** Everything sampled on each tick, in order; each decides itself how often to do real work. */
  private readonly watchers: Array<{ tick(): void; stop?(): void }>;
  private notify: NotifyListener | null = null;
  private readonly kmsg: KmsgReader | null;
  /** The kernel's uevents, for a restore's NEW_VMGENID; null without the addon's netlink. */
  private readonly uevents: UeventWatcher | null;
  private readonly health: HealthChecker | null;
  /** The Go traceback a SIGQUIT prints goes to the target's stderr: every raw stderr chunk
   *  passes through here on its way to the log watcher. */
  private readonly sigquit = new SigquitCapture();
  /** Commands still running (a dump): wrap mode waits for them before exiting. */
  private inflight = 0;
  /** Log lines (wrap mode's pipes, a followed file, the journal): phases and a bounded tail. */
  private readonly logs: LogWatcher;
  private readonly file: FileFollower | null;
  private journal: JournalFollower | null = null;
  /** Journal entries that ended a Go traceback (its register dump), counted while a SIGQUIT
   *  capture runs: the journal has delivered a dump once one more has come. */
  private journalTracebackEnds = 0;
  private lastKeyframe = Date.now();
  private commandServer: net.Server | null = null;
  /** stop() was called: start() opens nothing more after its wait for the first hello. */
  private stopped = false;
  private readonly loop: SampleLoop;
  private readonly rate: SampleRate;
  private oversizeReported = 0;
  /** A notify flood past NOTIFY_EVENTS_PER_SEC: the pauses and drops said so far. */
  private ratePausesReported = 0;
  private rateDropReported = 0;

  constructor(
    private readonly config: ProbeConfig,
    private readonly log: (level: 'info' | 'warn', message: string) => void,
  ) {
    this.clock = new BootClock(config.procRoot);
    this.bootId = readBootId(config.procRoot) ?? UNKNOWN_BOOT_ID;
    this.status = initialStatus(config.expectPort);
    const emit = (body: EventBody) => this.emit(body);
    this.target = new TargetWatcher({ name: config.target, pidFile: config.pidFile, procRoot: config.procRoot, emit });
    const query = pickListenerQuery(config.procRoot);
    this.status = {
      ...this.status,
      probe: { listenerSource: query.source, ...(query.fallbackReason ? { fallbackReason: query.fallbackReason.slice(0, 500) } : {}) },
    };
    if (query.fallbackReason) log('warn', `listener checks read /proc/net/tcp (slower): ${query.fallbackReason}`);
    this.listener = new ListenerWatcher({
      port: config.expectPort,
      procRoot: config.procRoot,
      query,
      emit,
      targetPid: () => this.target.pid,
    });
    this.health = config.healthUrl ? new HealthChecker({ url: config.healthUrl, emit }) : null;
    const census = query.source === 'sock_diag' ? (top: number) => socketCensus({ top }) : null;
    const sockets = new SocketWatcher({ procRoot: config.procRoot, emit, census, sinceBootMs: () => this.clock.sinceBootMs() });
    const kmsg = config.kmsg ? new KmsgReader({ path: config.kmsg, emit, log, ...addonReadNow() }) : null;
    this.kmsg = kmsg;
    this.uevents = openUevents(emit, log);
    const uevents = this.uevents;
    this.logs = new LogWatcher({ pattern: config.phasePattern, emit: (body, t) => this.emit(body, t) });
    this.file = config.logFile ? new FileFollower(config.logFile, this.sigquit.tee(this.logs.input('file')), { log }) : null;
    this.watchers = [
      this.target,
      this.listener,
      sockets,
      new SystemSampler({ procRoot: config.procRoot, emit }),
      // Kernel messages are not urgent to the 40 ms of a boot tick: once a second is enough.
      ...(kmsg ? [everyMs(1000, () => void kmsg.poll())] : []),
      ...(uevents ? [everyMs(1000, () => uevents.poll())] : []),
      ...(this.file ? [this.file] : []),
      this.logs,
      ...(this.health ? [this.health] : []),
      { tick: () => this.keyframe() },
    ];
    // The sample loop beats at least once a heartbeat unless told to sample more slowly:
    // then it drives the session's liveness too, one wake-up a second instead of two.
    const drivenLiveness = Math.max(config.intervalMs, config.bootIntervalMs, config.hungIntervalMs) <= HEARTBEAT_INTERVAL_MS;
    this.rate = new SampleRate(config, monotonicMs());
    this.loop = new SampleLoop(
      () => {
        this.sample();
        if (drivenLiveness) this.link.tick();
      },
      () => this.rate.delayMs(monotonicMs()),
    );
    this.link = new Link({
      address: config.connect,
      ring: this.ring,
      hello: (generation) => this.hello(generation),
      onCommand: (c, channel) => this.command(c, channel),
      sinceBootMs: () => this.clock.sinceBootMs(),
      onLost: () => uevents?.poll(),
      log,
      drivenLiveness,
      // Only vsock has errors that retrying soon will not fix; a missing Unix socket file
      // just means the collector is not there yet.
      ...(parseAddress(config.connect).kind === 'vsock' ? { isFatal: (err: unknown) => !isRetryable(err) } : {}),
    });
    this.link.on('ack', (seq: number) => this.ring.acked(seq));
  }

  /** Records one observation: numbered, stamped (now, or `t` when the source knows when it
   *  happened: a journal entry), applied to the status, sent soon. */
  emit(body: EventBody, t?: number): void {
    // The collector rejects a batch holding one event that breaks the schema, and the probe
    // would resend it forever: check here, with the same schema, before it enters the ring.
    try {
      eventSchema.parse({ ...body, seq: 1, t: 0 });
    } catch (err) {
      const message = `dropped a ${body.kind} event that breaks the protocol schema: ${(err as Error).message}`;
      this.log('warn', message);
      body = { kind: 'probe.notice', level: 'warn', message: message.slice(0, MAX_TEXT) };
    }
    // A target that reports phases over the notify socket says more than its log lines do:
    // then log-derived phases would only repeat it (the lines still go out as log.lines).
    if (body.kind === 'phase' && body.source === 'log' && this.status.phases.reported) return;
    // A log line read late may belong to a target process that has since been replaced:
    // its phase is not the new process's.
    const target = this.status.target;
    if (body.kind === 'phase' && t !== undefined && target && t < target.startedAt - CLOCK_SLACK_MS) return;
    const event = this.ring.push(body, t ?? this.clock.sinceBootMs());
    this.status = applyEvent(this.status, event);
    if (event.kind === 'listener.bound' || event.kind === 'listener.unbound') this.health?.kick();
    this.link.flush();
  }

  /** Resolves once everything is started. The first hello goes out before anything that
   *  loads node:net (the command port) or spawns (the journal): the collector hears of this
   *  VM first. The notify socket comes first of all (envd may start right after the probe),
   *  and a wrapped target is started before the link, whatever the link's first attempt does. */
  async start(): Promise<void> {
    this.openNotifySocket();
    if (this.config.command.length) this.wrap();
    this.link.start();
    this.loop.start();
    await this.link.firstAttempt;
    if (this.stopped) return;
    await this.openCommandPort();
    if (this.config.journalUnit) {
      const out = this.sigquit.tee(this.logs.input('journal'));
      this.journal = new JournalFollower(
        this.config.journalUnit,
        (message, t) => {
          this.logs.stamp('journal', t);
          out.feed(message);
          if (this.sigquit.busy && tracebackEnded(message.toString('latin1'))) this.journalTracebackEnds++;
        },
        this.log,
        { toBootMs: (us) => this.clock.fromMonotonicUs(us) },
      );
    }
  }

  stop(): void {
    this.stopped = true;
    this.loop.stop();
    for (const w of this.watchers) w.stop?.();
    this.notify?.close();
    this.kmsg?.close();
    this.uevents?.close();
    this.file?.close();
    this.journal?.close();
    this.commandServer?.close();
    this.link.stop();
  }

  /** Ready as the collector will judge it: then sampling can slow down. */
  private get settled(): boolean {
    const s = this.status;
    return !!s.target?.alive && s.listener.bound && (!s.phases.reported || s.phases.ready);
  }

  private sample(): void {
    for (const w of this.watchers) w.tick();
    const settled = this.settled;
    const target = this.status.target;
    this.rate.saw(target?.alive ? target.pid : null, settled, monotonicMs());
    setSettled(settled);
  }

  /** Now and then the whole status as one event: a collector that missed deltas (a gap)
   *  resynchronises from it. */
  private keyframe(): void {
    const now = Date.now();
    if (now - this.lastKeyframe < KEYFRAME_EVERY_MS) return;
    this.lastKeyframe = now;
    // The ring keeps this object; emit's applyEvent gives this.status a copy of it to go on with.
    this.emit({ kind: 'keyframe', status: this.status });
  }

  private hello(generation: number): Omit<Hello, 'type'> {
    return {
      protocol: PROTOCOL_VERSION,
      probeVersion: PROBE_VERSION,
      instanceId: this.instanceId,
      generation,
      bootId: this.bootId,
      clocks: { wallMs: Date.now(), sinceBootMs: this.clock.sinceBootMs() },
      lastSeq: this.ring.lastSeq,
      ...(this.link.lostAtSeq !== undefined ? { lostAtSeq: this.link.lostAtSeq } : {}),
      config: { target: this.config.target, expectPort: this.config.expectPort, pprof: this.config.pprofUrl !== null },
      status: this.status,
    };
  }

  private async command(c: Command, channel: CommandChannel): Promise<CommandAnswer> {
    switch (c.op) {
      case 'status':
        return { ok: true, status: this.status };
      case 'dump':
        return withDumpFlags(() => this.dump(c, channel));
    }
  }

  /** Takes a dump and streams it in chunks; the result says what was sent. */
  private async dump(c: Command, channel: CommandChannel): Promise<CommandAnswer> {
    const mode = c.mode ?? 'threads';
    const pid = this.target.pid;
    this.inflight++;
    try {
      let chunks = 0;
      let bytes = 0;
      // encodeMessage copies the chunk into its frame before send() returns.
      const sendChunk = async (data: Buffer): Promise<void> => {
        await channel.send({ type: 'dump.chunk', id: c.id, index: chunks++, data });
        bytes += data.length;
      };
      const r = await takeDump(
        { mode, destructive: c.destructive === true },
        {
          targetPid: pid,
          procRoot: this.config.procRoot,
          pprofUrl: this.config.pprofUrl,
          sigquit: this.sigquit,
          exited: (p, signal) => this.targetExited(p, signal),
          stderrSource: this.config.command.length ? 'wrap' : this.config.logFile ? 'file' : this.config.journalUnit ? 'journal' : null,
          pump: () => this.file?.poll(),
          sendChunk,
        },
      );
      for (const data of dumpChunks(r)) await sendChunk(data);
      return {
        ok: r.error === undefined,
        ...(r.error !== undefined ? { error: r.error.slice(0, MAX_TEXT) } : {}),
        dump: {
          mode,
          source: r.source,
          complete: r.complete,
          bytes,
          chunks,
          ...((r.pid ?? pid) !== null ? { pid: (r.pid ?? pid)! } : {}),
          ...(r.note ? { note: r.note.slice(0, MAX_TEXT) } : {}),
          ...(r.pausedMs !== undefined ? { pausedMs: r.pausedMs } : {}),
        },
      };
    } finally {
      this.inflight--;
    }
  }

  /** Resolves once `pid` is gone and, when its stderr comes through the journal, once the
   *  journal has handed over the end of its traceback too (or JOURNAL_LAG_MAX_MS passed):
   *  the capture's own short drain is far less than journald's delay. */
  private targetExited(pid: number, signal: AbortSignal): Promise<void> {
    const gone = waitForExit(pid, { procRoot: this.config.procRoot, signal });
    if (!this.journal || this.config.command.length || this.config.logFile) return gone;
    const ends = this.journalTracebackEnds;
    return gone.then(
      () =>
        new Promise<void>((resolve) => {
          const started = monotonicMs();
          const timer = setInterval(() => {
            if (signal.aborted || this.journalTracebackEnds > ends || monotonicMs() - started > JOURNAL_LAG_MAX_MS) {
              clearInterval(timer);
              resolve();
            }
          }, 25);
        }),
    );
  }

  private openNotifySocket(): void {
    const p = this.config.notifySocket;
    if (!p) return;
    try {
      if (!p.startsWith('@')) fs.mkdirSync(path.dirname(p), { recursive: true });
      this.notify = NotifyListener.open(p);
    } catch (err) {
      this.emit({ kind: 'probe.notice', level: 'warn', message: `notify socket ${p} unavailable: ${(err as Error).message}` });
      this.log('warn', `notify socket ${p} unavailable: ${(err as Error).message}`);
      return;
    }
    const notify = this.notify;
    notify.on('message', (msg, pid) => {
      this.target.hint(pid);
      const event = phaseEvent(msg, pid);
      if (event) this.emit(event);
      this.sampleSoon();
    });
    // The listener counts oversize datagrams and the rate's pauses and drops; say so now and then.
    const check = setInterval(() => {
      if (notify.counters.oversize > this.oversizeReported) {
        this.emit({
          kind: 'probe.notice',
          level: 'warn',
          message: `${notify.counters.oversize - this.oversizeReported} notify datagram(s) over ${MAX_NOTIFY_DATAGRAM} bytes rejected (${notify.counters.oversize} in all)`,
        });
        this.oversizeReported = notify.counters.oversize;
      }
      const { pauses, dropped, received } = notify.counters;
      if (pauses > this.ratePausesReported) {
        this.emit({
          kind: 'probe.notice',
          level: 'warn',
          message: `notify datagrams over ${NOTIFY_EVENTS_PER_SEC}/s: reading paused ${pauses - this.ratePausesReported} time(s) for ${NOTIFY_PAUSE_MS} ms, ${dropped - this.rateDropReported} datagram(s) read then not recorded (in all: ${pauses} pauses, ${dropped} not recorded, ${received} read)`,
        });
        this.ratePausesReported = pauses;
        this.rateDropReported = dropped;
      }
    }, 10_000);
    check.unref();
  }

  /** A phase marker often comes right before a bind or an exit: look again at once. */
  private sampleSoon(): void {
    if (!this.settled) this.loop.soon();
  }

  private async openCommandPort(): Promise<void> {
    const addr = this.config.listen;
    if (!addr) return;
    try {
      this.commandServer = await listen(
        addr,
        (socket) =>
          serveCommands(socket, {
            hello: () => this.hello(this.link.generation),
            onCommand: (c, channel) => this.command(c, channel),
            log: this.log,
          }),
        { replaceStale: true },
      );
    } catch (err) {
      const message = `command port ${addr} unavailable: ${(err as Error).message}`;
      this.emit({ kind: 'probe.notice', level: 'warn', message });
      this.log('warn', message);
    }
  }

  private wrap(): void {
    const child = spawnTarget({
      command: this.config.command,
      notifySocket: this.config.notifySocket,
      onError: (err) => {
        this.emit({ kind: 'probe.notice', level: 'warn', message: `cannot start ${this.config.command[0]}: ${err.message}` });
        this.log('warn', `cannot start ${this.config.command[0]}: ${err.message}`);
      },
      onOutput: (stream, chunk) => {
        if (stream === 'stderr') this.sigquit.feed(chunk);
        this.logs.input(stream).feed(chunk);
      },
      onOutputEnd: (stream) => this.logs.input(stream).end(),
      onExit: (code, signal) => {
        this.logs.flush(); // the last lines before the exit, in order
        this.target.childExited(code, signal);
        // Pass the status on to our own supervisor once the collector has the exit on record.
        void this.link.waitAcked(this.ring.lastSeq, EXIT_FLUSH_MS).then(async () => {
          // A dump in flight (the SIGQUIT one ends the target) still has to reach the host.
          for (let waited = 0; this.inflight > 0 && waited < EXIT_FLUSH_MS; waited += 50) await sleep(50);
          this.stop();
          await flushOutput(2000);
          process.exit(exitStatusOf(code, signal));
        });
      },
    });
    if (child.pid !== undefined) this.target.adoptChild(child.pid, this.config.command);
  }
}

/** 8 random bytes in hex, read by the addon (native/src/random.c; 0.04 ms, where node:fs's
 *  first open, read and close take 0.28 ms before the hello, and loading node:crypto more). */
function randomId(): string {
  return addonOrNull()?.randomHex(8) ?? lazy.crypto().randomBytes(8).toString('hex');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The addon's non-throwing read for the kernel log's polls; node:fs where there is no addon. */
function addonReadNow(): Pick<KmsgOptions, 'readNow'> {
  const addon = addonOrNull();
  return addon ? { readNow: (fd, buffer) => addon.readNow(fd, buffer) } : {};
}

/** The uevent watcher, or null where the addon or the kernel's netlink is not there. */
function openUevents(emit: (body: EventBody) => void, log: (level: 'info' | 'warn', message: string) => void): UeventWatcher | null {
  const addon = addonOrNull();
  if (!addon) return null;
  const w = new UeventWatcher(addon, emit, log);
  return w.open ? w : null;
}

/** A watcher that does its work at most every `ms`, however fast the sampling ticks. */
function everyMs(ms: number, work: () => void): { tick(): void } {
  let last = Number.NEGATIVE_INFINITY;
  return {
    tick() {
      const now = monotonicMs();
      if (now - last < ms) return;
      last = now;
      work();
    },
  };
}
