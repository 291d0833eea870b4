// POST /v1/sandboxes/:id/lifecycle: the orchestrator's word on a sandbox's VM. A sandbox it
// paused on purpose shows `paused`, not `silent`; after a pause or a snapshot the next probe
// connection opens a new generation (collector/intake.ts `lifecycle`).

import type { Registry } from '../../collector/registry.js';
import { noSandbox } from '../errors.js';
import { ERRORS, LifecycleAnswer, LifecycleBody, SandboxParams } from '../schemas.js';
import type { Api } from '../base.js';

export async function lifecycleRoutes(app: Api, opts: { registry: Registry }): Promise<void> {
  const { registry } = opts;

  app.post(
    '/v1/sandboxes/:id/lifecycle',
    {
      schema: {
        operationId: 'postLifecycle',
        summary: "Tell the collector the orchestrator paused, resumed or snapshotted the sandbox's VM",
        params: SandboxParams,
        body: LifecycleBody,
        response: { 200: LifecycleAnswer, ...ERRORS },
      },
    },
    async (req) => {
      const { id } = req.params;
      const { event } = req.body;
      const sb = registry.get(id);
      if (!sb) throw noSandbox(id);
      sb.lifecycle(event);
      const paused = sb.intake.pausedSince;
      return {
        id,
        event,
        state: sb.state,
        generation: sb.generation,
        session: sb.session,
        pausedSince: paused === null ? null : new Date(paused).toISOString(),
        expectNewGeneration: sb.intake.expectsNewGeneration,
      };
    },
  );
}
