// /v1/sandboxes…: registration, state, readiness long-poll, event history.

import type { FastifyInstance } from 'fastify';
import { SETTLED_STATES, STATES, isSandboxState } from '../../catalogue.js';
import { RegistryError, type Registry } from '../../collector/registry.js';
import type { Sandbox, StateChange } from '../../collector/sandbox.js';
import type { DumpService } from '../../collector/dump-service.js';
import { dumpBytes, type Store } from '../../collector/store.js';
import { ApiError, noSandbox } from '../errors.js';
import { detail, dumpDetail, eventRecord, phaseRecords, summary } from '../present.js';
import { ID_PARAMS } from './lifecycle.js';

export const MAX_READINESS_WAIT_MS = 120_000;
export const MAX_EVENTS_LIMIT = 1000;
/** A page of events stops before it passes this many bytes (of stored event data; see
 *  Store.events), however many `limit` allowed: `more` then says to ask for the rest. */
export const MAX_EVENTS_RESPONSE_BYTES = 4 * 1024 * 1024;
/** The phases a sandbox's detail lists: at most this many, and bytes. */
const MAX_DETAIL_PHASES = 500;
const MAX_DETAIL_PHASE_BYTES = 1024 * 1024;

function intParam(value: unknown, name: string, min: number, max: number, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new ApiError('BAD_REQUEST', `${name} must be an integer in [${min}, ${max}]`);
  return n;
}

export async function sandboxRoutes(app: FastifyInstance, opts: { registry: Registry; store: Store; dumps: DumpService }): Promise<void> {
  const { registry, store, dumps } = opts;

  const find = (id: string): Sandbox => {
    const sb = registry.get(id);
    if (!sb) throw noSandbox(id);
    return sb;
  };

  app.get('/v1/sandboxes', async (req) => {
    const { state } = req.query as { state?: string };
    if (state !== undefined && !isSandboxState(state)) {
      throw new ApiError('BAD_REQUEST', `state must be one of ${STATES.join(', ')}`);
    }
    const now = Date.now();
    const list = [...registry.sandboxes.values()].map((sb) => summary(sb, now)).filter((s) => !state || s.state === state);
    return { sandboxes: list };
  });

  app.put('/v1/sandboxes/:id', async (req, reply) => {
    const { id } = req.params as { id: string };
    const body = req.body as { udsPath?: unknown } | null;
    if (!body || typeof body.udsPath !== 'string') throw new ApiError('BAD_REQUEST', 'body must be {"udsPath": "<absolute path>"}');
    try {
      const { sandbox, created } = await registry.register(id, body.udsPath, 'api');
      return reply.code(created ? 201 : 200).send(summary(sandbox));
    } catch (err) {
      if (err instanceof RegistryError) throw new ApiError(err.code, err.message);
      throw err;
    }
  });

  // With ?capture=1, a last dump first (goroutines if the target is Go, else threads), while
  // the listener still takes the probe's connections: the answer carries it, since the
  // sandbox's history (its dumps too) goes with it.
  app.delete(
    '/v1/sandboxes/:id',
    {
      config: { access: 'token' },
      schema: {
        params: ID_PARAMS,
        querystring: {
          type: 'object',
          properties: { capture: { type: 'string', enum: ['0', '1'], description: '1: take a final dump before unregistering' } },
        },
        response: {
          200: {
            type: 'object',
            required: ['id', 'dump', 'captureError'],
            properties: {
              id: { type: 'string' },
              dump: { type: ['object', 'null'], additionalProperties: true, description: 'the final dump, with its text' },
              captureError: { type: ['string', 'null'], description: 'why no dump could be taken' },
            },
          },
          204: { type: 'null', description: 'unregistered (no capture asked for)' },
        },
      },
    },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      const capture = (req.query as { capture?: string }).capture === '1';
      if (!capture) {
        if (!(await registry.unregister(id))) throw noSandbox(id);
        return reply.code(204).send();
      }
      const { dump, error } = await dumps.final(find(id));
      const stored = dump ? store.getDump(id, dump.id) : null;
      const withText = stored ? dumpDetail(stored, (await dumpBytes(stored)).toString('utf8')) : null;
      if (!(await registry.unregister(id))) throw noSandbox(id);
      return reply.code(200).send({ id, dump: withText, captureError: error });
    },
  );

  app.get('/v1/sandboxes/:id', async (req) => {
    const sb = find((req.params as { id: string }).id);
    const after = store.lastEventId(sb.id, 'target.found');
    const phases = store.events(sb.id, { kind: 'phase', after, limit: MAX_DETAIL_PHASES, maxBytes: MAX_DETAIL_PHASE_BYTES });
    return detail(sb, phaseRecords(phases.events), phases.more);
  });

  app.get('/v1/sandboxes/:id/readiness', async (req, reply) => {
    const sb = find((req.params as { id: string }).id);
    const wait = intParam((req.query as { wait?: string }).wait, 'wait', 0, MAX_READINESS_WAIT_MS, 0);
    if (!SETTLED_STATES.has(sb.state) && wait > 0) {
      await new Promise<void>((resolve) => {
        const onState = (c: StateChange) => {
          if (SETTLED_STATES.has(c.state)) done();
        };
        const timer = setTimeout(done, wait);
        req.raw.once('close', done);
        sb.on('state', onState);
        sb.once('removed', done);
        function done() {
          clearTimeout(timer);
          sb.removeListener('state', onState);
          sb.removeListener('removed', done);
          req.raw.removeListener('close', done);
          resolve();
        }
      });
    }
    // Only what readiness says: the verdict, not the whole summary (this route is polled hard).
    const v = sb.read();
    const ready = v.state === 'ready';
    return reply.code(ready ? 200 : 503).send({ ready, state: v.state, reason: v.reason, generation: sb.generation, session: sb.session });
  });

  // Oldest first from `after` (the default), or newest first below `before` with order=desc:
  // either way `next` is the cursor for the following page (the last id returned), and
  // `more` says whether there is one. A page may hold fewer than `limit` events and still
  // have more after it (MAX_EVENTS_RESPONSE_BYTES): page on `more`, not on the count.
  app.get('/v1/sandboxes/:id/events', async (req) => {
    const sb = find((req.params as { id: string }).id);
    const q = req.query as { after?: string; before?: string; order?: string; kind?: string; limit?: string; generation?: string };
    if (q.order !== undefined && q.order !== 'asc' && q.order !== 'desc') throw new ApiError('BAD_REQUEST', 'order must be asc or desc');
    const desc = q.order === 'desc';
    const after = intParam(q.after, 'after', 0, Number.MAX_SAFE_INTEGER, 0);
    const before = q.before === undefined ? undefined : intParam(q.before, 'before', 1, Number.MAX_SAFE_INTEGER, 1);
    const limit = intParam(q.limit, 'limit', 1, MAX_EVENTS_LIMIT, 100);
    const generation = q.generation === undefined ? undefined : intParam(q.generation, 'generation', 0, 2 ** 31, 0);
    if (q.kind !== undefined && !/^[a-z.]{1,64}$/.test(q.kind)) throw new ApiError('BAD_REQUEST', 'kind must be like "phase" or "target."');
    const page = store.events(sb.id, {
      after,
      limit,
      maxBytes: MAX_EVENTS_RESPONSE_BYTES,
      ...(before !== undefined ? { before } : {}),
      ...(desc ? { order: 'desc' as const } : {}),
      ...(q.kind ? { kind: q.kind } : {}),
      ...(generation !== undefined ? { generation } : {}),
    });
    const events = page.events.map((e) => ({ id: e.id, ...eventRecord(e) }));
    const last = events[events.length - 1];
    return { events, next: last ? last.id : desc ? (before ?? 0) : after, more: page.more };
  });
}
