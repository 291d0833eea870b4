// GET /v1/sandboxes/:id/readiness: the answer an orchestrator polls, 200 when ready, 503 when
// not (yet), long-polling up to ?wait ms for a settled state. One route, two hosts: the main
// API serves it from the registry, the readiness thread (readiness/worker.ts) from its mirror
// of each sandbox's verdict. Each gives it a ReadinessSource.

import { SETTLED_STATES, type SandboxState } from '../../catalogue.js';
import type { Api } from '../base.js';
import { noSandbox } from '../errors.js';
import { ERRORS, Readiness, ReadinessQuery, SandboxParams } from '../schemas.js';

export interface ReadinessAnswer {
  ready: boolean;
  state: SandboxState;
  reason: string;
  generation: number;
  session: number;
}

export interface ReadinessSource {
  /** The sandbox's answer now; undefined when no such sandbox is registered. */
  answer(id: string): ReadinessAnswer | undefined;
  /** Resolves when the sandbox's state is settled (SETTLED_STATES) or it is gone, when `ms`
   *  have passed, or when `abandoned` fires (the client went away), whichever comes first. */
  settled(id: string, ms: number, abandoned: AbortSignal): Promise<void>;
}

export function readinessRoute(app: Api, source: ReadinessSource): void {
  app.get(
    '/v1/sandboxes/:id/readiness',
    {
      schema: {
        operationId: 'getReadiness',
        summary: 'Is the sandbox ready? 200 ready, 503 not (yet): long-polls up to ?wait ms for a settled state',
        params: SandboxParams,
        querystring: ReadinessQuery,
        response: {
          200: { description: 'ready', content: { 'application/json': { schema: Readiness } } },
          503: { description: 'not ready (yet): state and reason say why', content: { 'application/json': { schema: Readiness } } },
          ...ERRORS,
        },
      },
    },
    async (req, reply) => {
      const { id } = req.params;
      let answer = source.answer(id);
      const wait = req.query.wait ?? 0;
      if (answer && wait > 0 && !SETTLED_STATES.has(answer.state)) {
        const gone = new AbortController();
        const onClose = () => gone.abort();
        req.raw.once('close', onClose);
        try {
          await source.settled(id, wait, gone.signal);
        } finally {
          req.raw.removeListener('close', onClose);
        }
        answer = source.answer(id);
      }
      if (!answer) throw noSandbox(id);
      return reply.code(answer.ready ? 200 : 503).send(answer);
    },
  );
}
