// The readiness route's source on the main thread: each sandbox's verdict as read() gives it
// at the request's moment (verdict-clock.ts), and its state changes for the long-poll.

import { SETTLED_STATES } from '../catalogue.js';
import type { Registry } from '../collector/registry.js';
import type { StateChange } from '../collector/sandbox.js';
import type { ReadinessSource } from '../http/routes/readiness.js';

export function registryReadiness(registry: Registry): ReadinessSource {
  return {
    answer(id) {
      const sb = registry.get(id);
      if (!sb) return undefined;
      const v = sb.read();
      return { ready: v.state === 'ready', state: v.state, reason: v.reason, generation: sb.generation, session: sb.session };
    },
    settled(id, ms, abandoned) {
      const sb = registry.get(id);
      if (!sb || SETTLED_STATES.has(sb.state) || abandoned.aborted) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const onState = (c: StateChange) => {
          if (SETTLED_STATES.has(c.state)) done();
        };
        const timer = setTimeout(done, ms);
        abandoned.addEventListener('abort', done, { once: true });
        sb.on('state', onState);
        sb.once('removed', done);
        function done() {
          clearTimeout(timer);
          abandoned.removeEventListener('abort', done);
          sb!.removeListener('state', onState);
          sb!.removeListener('removed', done);
          resolve();
        }
      });
    },
  };
}
