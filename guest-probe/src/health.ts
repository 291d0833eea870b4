// The optional in-guest health check (--health-url, e.g. http://127.0.0.1:49983/health,
// which envd answers with 204). It tells "listening but not answering" (a request that
// times out in the accept queue) and "answering wrongly" apart from "not listening" (a
// refused connection). One request at a time, a fresh connection each, bounded by a
// timeout; often while failing, calmly once healthy.

import type { EventBody } from '@vsockdiag/proto';
import * as lazy from './lazy-builtins.js';
import { monotonicMs } from './clock.js';

export const HEALTH_TIMEOUT_MS = 2000;
const EVERY_FAILING_MS = 1000;
const EVERY_HEALTHY_MS = 10_000;
/** An unchanged outcome is re-sent this often (a heartbeat of the check itself). */
const RESEND_MS = 60_000;

export interface HealthOptions {
  url: string;
  /** The status that means healthy (envd: 204). */
  expect?: number;
  emit: (body: EventBody) => void;
  now?: () => number;
}

type Outcome = Omit<Extract<EventBody, { kind: 'health' }>, 'kind' | 'url'>;

export class HealthChecker {
  private inFlight = false;
  private lastAt = Number.NEGATIVE_INFINITY;
  private lastKey = '';
  private lastSentAt = Number.NEGATIVE_INFINITY;
  private ok = false;
  private readonly now: () => number;
  private readonly expect: number;

  constructor(private readonly opts: HealthOptions) {
    this.now = opts.now ?? Date.now;
    this.expect = opts.expect ?? 204;
    const u = new URL(opts.url);
    if (u.protocol !== 'http:') throw new Error(`--health-url must be http://, got ${opts.url}`);
  }

  /** Something changed (the listener came or went): check at the next tick. */
  kick(): void {
    this.lastAt = Number.NEGATIVE_INFINITY;
  }

  tick(): void {
    const now = this.now();
    if (this.inFlight || now - this.lastAt < (this.ok ? EVERY_HEALTHY_MS : EVERY_FAILING_MS)) return;
    this.inFlight = true;
    this.lastAt = now;
    void this.check().then((outcome) => {
      this.inFlight = false;
      this.ok = outcome.ok;
      const key = `${outcome.ok}|${outcome.status ?? ''}|${outcome.error ?? ''}`;
      const t = this.now();
      if (key === this.lastKey && t - this.lastSentAt < RESEND_MS) return;
      this.lastKey = key;
      this.lastSentAt = t;
      this.opts.emit({ kind: 'health', url: this.opts.url.slice(0, 256), ...outcome });
    });
  }

  private check(): Promise<Outcome> {
    const started = monotonicMs();
    const latency = () => Math.round((monotonicMs() - started) * 100) / 100;
    return new Promise((resolve) => {
      const req = lazy.http().get(this.opts.url, { agent: false, timeout: HEALTH_TIMEOUT_MS }, (res) => {
        res.resume(); // drain and discard the body
        const status = res.statusCode ?? 0;
        const done = () =>
          resolve({
            ok: status === this.expect,
            ...(status >= 100 && status <= 599 ? { status } : {}),
            latencyMs: latency(),
            ...(status !== this.expect ? { error: `HTTP ${status}, expected ${this.expect}` } : {}),
          });
        res.once('end', done);
        res.once('error', done);
      });
      req.once('timeout', () => req.destroy(Object.assign(new Error(`timed out after ${HEALTH_TIMEOUT_MS} ms`), { code: 'ETIMEDOUT' })));
      req.once('error', (err: NodeJS.ErrnoException) =>
        resolve({ ok: false, latencyMs: latency(), error: (err.code ? `${err.code}: ` : '') + err.message.slice(0, 200) }),
      );
    });
  }
}
