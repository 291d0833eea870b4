// The readiness thread: GET /v1/sandboxes/:id/readiness (and /healthz) on a port of its own
// (--readiness-http), answered from its mirror of the fleet's verdicts (mirror.ts). Its own
// event loop and heap: an answer does not wait behind the main thread's ingest, store
// commits or garbage collections (test/bench/FINDINGS.md measured those at 5,000 sessions).
// The request lifecycle (guard, token, error shape) is the main API's (http/base.ts).

import type net from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { ReasonTemplates } from '../collector/elapsed.js';
import { createLogger } from '../collector/logger.js';
import { buildBase, urlOf } from '../http/base.js';
import { readinessRoute } from '../http/routes/readiness.js';
import { ErrorBody, Health } from '../http/schemas.js';
import type { MirrorUpdate, ReadinessWorkerData, ThreadStatus } from './messages.js';
import { Mirror } from './mirror.js';
import { preferThisThread } from './priority.js';

const data = workerData as ReadinessWorkerData;
const port = parentPort!;
const log = createLogger(data.logLevel).child({ thread: 'readiness' });
const mirror = new Mirror(new ReasonTemplates(data.templateToken));
port.on('message', (update: MirrorUpdate) => mirror.apply(update));

const { app, api } = buildBase({ log, loopbackOnly: data.loopbackOnly, ...(data.token ? { token: data.token } : {}) });
api.get(
  '/healthz',
  {
    config: { access: 'public' },
    schema: { operationId: 'getReadinessHealth', summary: 'Liveness of the readiness thread', response: { 200: Health, '4xx': ErrorBody } },
  },
  async () => ({ ok: true as const, sandboxes: mirror.size }),
);
readinessRoute(api, mirror);

const say = (s: ThreadStatus) => port.postMessage(s);
try {
  await app.listen({ host: data.host, port: data.port });
  say({ type: 'listening', url: urlOf(app.server.address() as net.AddressInfo), priority: preferThisThread() });
} catch (err) {
  say({ type: 'failed', message: (err as Error).message });
  process.exit(1);
}
