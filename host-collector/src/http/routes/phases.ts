// GET /v1/phases: how long each phase took across the fleet (the current target of every
// sandbox), so "cgroup-manager is slow on this host" shows at a glance. A phase lasts from its
// marker to the next one; the last lasts until READY=1 (an unfinished one is not counted).

import type { Registry } from '../../collector/registry.js';
import { phaseStats } from '../present.js';
import { ERRORS, PhaseList } from '../schemas.js';
import type { Api } from '../base.js';

const MAX_SAMPLES = 500;

export async function phaseRoutes(app: Api, opts: { registry: Registry }): Promise<void> {
  app.get(
    '/v1/phases',
    {
      schema: { operationId: 'listPhases', summary: 'How long each phase took across the fleet', response: { 200: PhaseList, ...ERRORS } },
    },
    async () => {
      const byName = new Map<string, number[]>();
      const order: string[] = [];
      for (const sb of opts.registry.sandboxes.values()) {
        const tl = sb.history.phaseTimeline;
        for (let i = 0; i < tl.length; i++) {
          const end = i + 1 < tl.length ? tl[i + 1]!.t : sb.history.readyAt;
          if (end === null || end < tl[i]!.t) continue;
          const name = tl[i]!.name;
          let list = byName.get(name);
          if (!list) {
            byName.set(name, (list = []));
            order.push(name);
          }
          list.push(Math.round((end - tl[i]!.t) * 1000) / 1000);
        }
      }
      return { phases: order.map((name) => phaseStats(name, byName.get(name)!, MAX_SAMPLES)) };
    },
  );
}
