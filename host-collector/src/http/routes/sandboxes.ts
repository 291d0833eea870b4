// /v1/sandboxes…: registration, state, readiness long-poll, event history.

import { RegistryError, type Registry } from '../../collector/registry.js';
import type { Sandbox } from '../../collector/sandbox.js';
import type { DumpService } from '../../collector/dump-service.js';
import { dumpBytes, type Store } from '../../collector/store.js';
import { ApiError, noSandbox } from '../errors.js';
import { detail, dumpDetail, eventRecord, phaseRecords, summary } from '../present.js';
import {
  ERRORS,
  EventPage,
  EventsQuery,
  ListQuery,
  NoContent,
  RegisterBody,
  SandboxDetail,
  SandboxList,
  SandboxParams,
  SandboxSummary,
  UnregisterAnswer,
  UnregisterQuery,
} from '../schemas.js';
import { registryReadiness } from '../../readiness/registry-source.js';
import type { Api } from '../base.js';
import { readinessRoute } from './readiness.js';

/** A page of events stops before it passes this many bytes (of stored event data; see
 *  Store.events), however many `limit` allowed: `more` then says to ask for the rest. */
export const MAX_EVENTS_RESPONSE_BYTES = 4 * 1024 * 1024;
/** The phases a sandbox's detail lists: at most this many, and bytes. */
const MAX_DETAIL_PHASES = 500;
const MAX_DETAIL_PHASE_BYTES = 1024 * 1024;
const DEFAULT_EVENTS_LIMIT = 100;

export async function sandboxRoutes(app: Api, opts: { registry: Registry; store: Store; dumps: DumpService }): Promise<void> {
  const { registry, store, dumps } = opts;

  const find = (id: string): Sandbox => {
    const sb = registry.get(id);
    if (!sb) throw noSandbox(id);
    return sb;
  };

  app.get(
    '/v1/sandboxes',
    {
      schema: {
        operationId: 'listSandboxes',
        summary: 'List sandboxes',
        querystring: ListQuery,
        response: { 200: SandboxList, ...ERRORS },
      },
    },
    async (req) => {
      const { state } = req.query;
      const now = Date.now();
      const list = [...registry.sandboxes.values()].map((sb) => summary(sb, now)).filter((s) => !state || s.state === state);
      return { sandboxes: list };
    },
  );

  app.put(
    '/v1/sandboxes/:id',
    {
      schema: {
        operationId: 'registerSandbox',
        summary: 'Register a sandbox: listen on <udsPath>_<vsock-port> for its probe',
        params: SandboxParams,
        body: RegisterBody,
        response: { 200: SandboxSummary, 201: SandboxSummary, ...ERRORS },
      },
    },
    async (req, reply) => {
      const { id } = req.params;
      try {
        const { sandbox, created } = await registry.register(id, req.body.udsPath, 'api');
        return reply.code(created ? 201 : 200).send(summary(sandbox));
      } catch (err) {
        if (err instanceof RegistryError) throw new ApiError(err.code, err.message);
        throw err;
      }
    },
  );

  // With ?capture=1, a last dump first (goroutines if the target is Go, else threads), while
  // the listener still takes the probe's connections: the answer carries it, since the
  // sandbox's history (its dumps too) goes with it.
  app.delete(
    '/v1/sandboxes/:id',
    {
      schema: {
        operationId: 'unregisterSandbox',
        summary: 'Unregister a sandbox and close its listener; ?capture=1 takes a final dump first and answers it',
        params: SandboxParams,
        querystring: UnregisterQuery,
        response: { 200: UnregisterAnswer, 204: NoContent, ...ERRORS },
      },
    },
    async (req, reply) => {
      const { id } = req.params;
      if (req.query.capture !== '1') {
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

  app.get(
    '/v1/sandboxes/:id',
    {
      schema: {
        operationId: 'getSandbox',
        summary: 'One sandbox in detail',
        params: SandboxParams,
        response: { 200: SandboxDetail, ...ERRORS },
      },
    },
    async (req) => {
      const sb = find(req.params.id);
      const after = store.lastEventId(sb.id, 'target.found');
      const phases = store.events(sb.id, { kind: 'phase', after, limit: MAX_DETAIL_PHASES, maxBytes: MAX_DETAIL_PHASE_BYTES });
      return detail(sb, phaseRecords(phases.events), phases.more);
    },
  );

  readinessRoute(app, registryReadiness(registry));

  // Oldest first from `after` (the default), or newest first below `before` with order=desc:
  // either way `next` is the cursor for the following page (the last id returned), and
  // `more` says whether there is one. A page may hold fewer than `limit` events and still
  // have more after it (MAX_EVENTS_RESPONSE_BYTES): page on `more`, not on the count.
  app.get(
    '/v1/sandboxes/:id/events',
    {
      schema: {
        operationId: 'listEvents',
        summary: "A page of the sandbox's history",
        params: SandboxParams,
        querystring: EventsQuery,
        response: { 200: EventPage, ...ERRORS },
      },
    },
    async (req) => {
      const sb = find(req.params.id);
      const q = req.query;
      const desc = q.order === 'desc';
      const after = q.after ?? 0;
      const { before, generation } = q;
      const limit = q.limit ?? DEFAULT_EVENTS_LIMIT;
      const page = store.events(sb.id, {
        after,
        limit,
        maxBytes: MAX_EVENTS_RESPONSE_BYTES,
        ...(before !== undefined ? { before } : {}),
        ...(desc ? { order: 'desc' as const } : {}),
        ...(q.kind ? { kind: q.kind } : {}),
        ...(generation !== undefined ? { generation } : {}),
      });
      const events = page.events.map(eventRecord);
      const last = events[events.length - 1];
      return { events, next: last ? last.id : desc ? (before ?? 0) : after, more: page.more };
    },
  );
}
