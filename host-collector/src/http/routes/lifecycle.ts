// POST /v1/sandboxes/:id/lifecycle: the orchestrator's word on a sandbox's VM. A sandbox it
// paused on purpose shows `paused`, not `silent`; after a pause or a snapshot the next probe
// connection opens a new generation (collector/intake.ts `lifecycle`).

import type { FastifyInstance } from 'fastify';
import { LIFECYCLE_EVENT_NAMES, STATES, type LifecycleEvent } from '../../catalogue.js';
import type { Registry } from '../../collector/registry.js';
import { noSandbox } from '../errors.js';

/** `:id` as every sandbox route takes it (the registry checks the pattern itself). */
export const ID_PARAMS = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 256 } },
} as const;

export async function lifecycleRoutes(app: FastifyInstance, opts: { registry: Registry }): Promise<void> {
  const { registry } = opts;

  app.post(
    '/v1/sandboxes/:id/lifecycle',
    {
      config: { access: 'token' },
      schema: {
        params: ID_PARAMS,
        body: {
          type: 'object',
          required: ['event'],
          additionalProperties: false,
          properties: { event: { type: 'string', enum: [...LIFECYCLE_EVENT_NAMES] } },
        },
        response: {
          200: {
            type: 'object',
            required: ['id', 'event', 'state', 'generation', 'session', 'pausedSince', 'expectNewGeneration'],
            properties: {
              id: { type: 'string' },
              event: { type: 'string', enum: [...LIFECYCLE_EVENT_NAMES] },
              state: { type: 'string', enum: [...STATES] },
              generation: { type: 'integer' },
              session: { type: 'integer' },
              pausedSince: { type: ['string', 'null'], format: 'date-time' },
              expectNewGeneration: { type: 'boolean', description: 'the next probe connection opens a new generation' },
            },
          },
        },
      },
    },
    async (req) => {
      const { id } = req.params as { id: string };
      const { event } = req.body as { event: LifecycleEvent };
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
