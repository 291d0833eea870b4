// The main thread's side of the readiness thread (worker.ts): starts it, and keeps its mirror
// of the fleet's verdicts current. Each evaluation of a sandbox (each batch, hello, close,
// timer: verdict-clock.ts) makes its reading there and then, from the evaluation's own input
// (its reason a template: collector/elapsed.ts); a reading that differs from what the thread
// has is queued, and the queue is posted once a turn of the event loop, so a settled fleet
// posts almost nothing. A thread that dies is started again after RESTART_MS with the whole
// fleet.

import { Worker } from 'node:worker_threads';
import { ReasonTemplates } from '../collector/elapsed.js';
import type { Logger, LogLevel } from '../collector/logger.js';
import type { Registry } from '../collector/registry.js';
import type { Sandbox } from '../collector/sandbox.js';
import type { MirroredReading, MirrorUpdate, ReadinessWorkerData, ThreadStatus } from './messages.js';
import { READINESS_NICE } from './priority.js';

/** Next to the bundle (dist/vsockdiag.js, dist/readiness-worker.js); tests from source pass a built one. */
const BUNDLED_WORKER = new URL('./readiness-worker.js', import.meta.url);
export const RESTART_MS = 1000;

export interface ReadinessThreadOptions {
  host: string;
  port: number;
  token?: string;
  loopbackOnly: boolean;
  log: Logger;
  workerUrl?: URL;
}

export class ReadinessThread {
  private readonly templates = new ReasonTemplates();
  /** What the thread has, or is about to be sent, per sandbox. */
  private readonly sent = new Map<string, MirroredReading>();
  /** Readings to post at the next flush; null: the sandbox is gone. */
  private readonly pending = new Map<string, MirroredReading | null>();
  private flushing: NodeJS.Immediate | null = null;
  private worker: Worker | null = null;
  private serving = false;
  private restart: NodeJS.Timeout | null = null;
  private stopped = false;
  private port: number;

  constructor(
    private readonly registry: Registry,
    private readonly opts: ReadinessThreadOptions,
  ) {
    this.port = opts.port;
    for (const sb of registry.sandboxes.values()) this.watch(sb);
    registry.on('added', (sb) => this.watch(sb));
    registry.on('removed', (id) => this.forget(id));
  }

  /** The thread is up and listening (/metrics: vsockdiag_readiness_thread_up). */
  get listening(): boolean {
    return this.serving;
  }

  /** Starts the thread; resolves with the URL it listens on. */
  async start(): Promise<string> {
    const url = await this.spawn();
    // A restart listens where the first start did, even if that was port 0.
    this.port = Number(new URL(url).port);
    return url;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.serving = false;
    if (this.restart) clearTimeout(this.restart);
    if (this.flushing) clearImmediate(this.flushing);
    const worker = this.worker;
    this.worker = null;
    await worker?.terminate();
  }

  private spawn(): Promise<string> {
    const data: ReadinessWorkerData = {
      host: this.opts.host,
      port: this.port,
      loopbackOnly: this.opts.loopbackOnly,
      templateToken: this.templates.token,
      logLevel: this.opts.log.level as LogLevel,
      ...(this.opts.token ? { token: this.opts.token } : {}),
    };
    const worker = new Worker(this.opts.workerUrl ?? BUNDLED_WORKER, { workerData: data });
    this.worker = worker;
    // The new thread has nothing: send it the whole fleet (postMessage queues until it runs).
    this.sent.clear();
    this.pending.clear();
    for (const sb of this.registry.sandboxes.values()) this.update(sb);
    return new Promise<string>((resolve, reject) => {
      let up = false;
      worker.on('message', (s: ThreadStatus) => {
        if (s.type === 'listening') {
          up = true;
          this.serving = true;
          const { nice, why } = s.priority;
          if (why) this.opts.log.info({ nice, why }, `the readiness thread runs at nice ${nice}, not ${READINESS_NICE}`);
          else this.opts.log.debug({ nice }, `the readiness thread runs at nice ${nice}`);
          resolve(s.url);
        } else reject(new Error(`the readiness thread cannot listen on ${this.opts.host}:${this.port}: ${s.message}`));
      });
      worker.on('error', (err) => {
        if (!up) reject(new Error(`the readiness thread failed to start: ${err.message}`));
        else this.lost(worker, err.message);
      });
      worker.on('exit', (code) => {
        if (!up) reject(new Error(`the readiness thread exited with code ${code} before listening`));
        else this.lost(worker, `exited with code ${code}`);
      });
    });
  }

  /** The thread died after it listened: log it and start another. */
  private lost(worker: Worker, why: string): void {
    if (worker !== this.worker || this.stopped) return;
    this.worker = null;
    this.serving = false;
    this.opts.log.error({ err: why }, `the readiness thread was lost; starting it again in ${RESTART_MS} ms`);
    this.respawnLater();
  }

  private respawnLater(): void {
    this.restart = setTimeout(() => {
      this.restart = null;
      if (this.stopped) return;
      this.spawn().catch((err: Error) => {
        this.worker = null;
        this.opts.log.error({ err: err.message }, `the readiness thread did not start again; trying again in ${RESTART_MS} ms`);
        if (!this.stopped) this.respawnLater();
      });
    }, RESTART_MS);
  }

  private watch(sb: Sandbox): void {
    const update = () => this.update(sb);
    sb.on('changed', update);
    sb.on('connected', update);
    update();
  }

  /** Makes the sandbox's reading now and queues it if the thread has another. */
  private update(sb: Sandbox): void {
    // No thread (between a loss and its restart): the next one is sent the whole fleet. A
    // sandbox no longer registered (or replaced under its id) has been forgotten already.
    if (!this.worker || this.registry.get(sb.id) !== sb) return;
    const t = sb.readingTemplate(this.templates.mark);
    const last = this.sent.get(sb.id);
    if (
      last &&
      last.state === t.state &&
      last.reason === t.reason &&
      last.dueAt === t.dueAt &&
      last.generation === sb.generation &&
      last.session === sb.session
    ) {
      return;
    }
    const reading: MirroredReading = {
      id: sb.id,
      state: t.state,
      reason: t.reason,
      generation: sb.generation,
      session: sb.session,
      evaluatedAt: t.evaluatedAt,
      dueAt: t.dueAt,
    };
    this.sent.set(sb.id, reading);
    this.queue(sb.id, reading);
  }

  private forget(id: string): void {
    if (this.worker && this.sent.delete(id)) this.queue(id, null);
  }

  private queue(id: string, reading: MirroredReading | null): void {
    this.pending.set(id, reading);
    this.flushing ??= setImmediate(() => this.flush());
  }

  private flush(): void {
    this.flushing = null;
    const update: MirrorUpdate = { put: [], removed: [] };
    for (const [id, reading] of this.pending) {
      if (reading) update.put.push(reading);
      else update.removed.push(id);
    }
    this.pending.clear();
    // No thread (lost since): the next one is sent the whole fleet.
    if (this.worker && (update.put.length > 0 || update.removed.length > 0)) this.worker.postMessage(update);
  }
}
