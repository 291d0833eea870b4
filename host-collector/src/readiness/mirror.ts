// The readiness thread's copy of each sandbox's verdict, as the main thread posts it
// (thread.ts), and the readiness route's source there: an answer renders the reason's
// durations at the request's moment, held as verdict-clock.ts holds the main API's reads.

import { SETTLED_STATES } from '../catalogue.js';
import type { ReasonTemplates } from '../collector/elapsed.js';
import { readMoment } from '../collector/verdict-clock.js';
import type { ReadinessAnswer, ReadinessSource } from '../http/routes/readiness.js';
import type { MirroredReading, MirrorUpdate } from './messages.js';

export class Mirror implements ReadinessSource {
  private readonly readings = new Map<string, MirroredReading>();
  /** Long-polls waiting on a sandbox, woken when it settles or goes. */
  private readonly waiters = new Map<string, Set<() => void>>();

  constructor(
    private readonly templates: ReasonTemplates,
    private readonly now: () => number = Date.now,
  ) {}

  get size(): number {
    return this.readings.size;
  }

  apply(update: MirrorUpdate): void {
    for (const r of update.put) {
      this.readings.set(r.id, r);
      if (SETTLED_STATES.has(r.state)) this.wake(r.id);
    }
    for (const id of update.removed) {
      this.readings.delete(id);
      this.wake(id);
    }
  }

  answer(id: string): ReadinessAnswer | undefined {
    const r = this.readings.get(id);
    if (!r) return undefined;
    const at = readMoment(this.now(), r.evaluatedAt, r.dueAt);
    const { state, generation, session } = r;
    return { ready: state === 'ready', state, reason: this.templates.render(r.reason, at), generation, session };
  }

  settled(id: string, ms: number, abandoned: AbortSignal): Promise<void> {
    const r = this.readings.get(id);
    if (!r || SETTLED_STATES.has(r.state) || abandoned.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      const waiting = set;
      const done = () => {
        clearTimeout(timer);
        abandoned.removeEventListener('abort', done);
        waiting.delete(done);
        if (waiting.size === 0 && this.waiters.get(id) === waiting) this.waiters.delete(id);
        resolve();
      };
      const timer = setTimeout(done, ms);
      abandoned.addEventListener('abort', done, { once: true });
      waiting.add(done);
    });
  }

  private wake(id: string): void {
    const set = this.waiters.get(id);
    if (set) for (const done of [...set]) done();
  }
}
