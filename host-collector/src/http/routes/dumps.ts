// /v1/sandboxes/:id/dumps…: take a dump (waits for it), list, read one with its parsed
// groups, its raw text, and the diff against an earlier dump.

import { AnalysisError, type DumpAnalyzer } from '../../collector/dump-analyzer.js';
import { DumpError, type DumpService } from '../../collector/dump-service.js';
import type { Registry } from '../../collector/registry.js';
import { dumpBytes, type Store } from '../../collector/store.js';
import { ApiError, noSandbox } from '../errors.js';
import { dumpBrief, dumpDetail, dumpDiff } from '../present.js';
import { DiffQuery, DumpBrief, DumpDetail, DumpDiff, DumpList, DumpParams, DumpRequest, ERRORS, SandboxParams, Text } from '../schemas.js';
import type { Api } from '../base.js';

export async function dumpRoutes(
  app: Api,
  opts: { registry: Registry; store: Store; dumps: DumpService; analyzer: DumpAnalyzer },
): Promise<void> {
  const { registry, store, dumps, analyzer } = opts;
  const sandbox = (id: string) => {
    const sb = registry.get(id);
    if (!sb) throw noSandbox(id);
    return sb;
  };
  const dumpOf = (id: string, dumpId: number) => {
    const d = store.getDump(id, dumpId);
    if (!d) throw new ApiError('NOT_FOUND', `no dump ${dumpId} of sandbox "${id.slice(0, 140)}"`);
    return d;
  };

  app.post(
    '/v1/sandboxes/:id/dumps',
    {
      config: { optionalBody: true },
      // No body at all (curl -X POST) is the default dump.
      preValidation: async (req) => {
        // Only an absent body: a JSON null is a body, and not an object.
        if (req.body === undefined) req.body = {};
      },
      schema: {
        operationId: 'takeDump',
        summary: 'Take a dump now (answers when it is stored)',
        params: SandboxParams,
        body: DumpRequest,
        response: { 201: DumpBrief, ...ERRORS },
      },
    },
    async (req, reply) => {
      const sb = sandbox(req.params.id);
      const { mode = 'threads', destructive = false } = req.body;
      try {
        const d = await dumps.take(sb, { mode, destructive, trigger: 'api' });
        return reply.code(201).send(dumpBrief(d));
      } catch (err) {
        if (err instanceof DumpError) throw new ApiError(err.code, err.message);
        throw err;
      }
    },
  );

  app.get(
    '/v1/sandboxes/:id/dumps',
    {
      schema: {
        operationId: 'listDumps',
        summary: "The sandbox's stored dumps",
        params: SandboxParams,
        response: { 200: DumpList, ...ERRORS },
      },
    },
    async (req) => {
      const sb = sandbox(req.params.id);
      return { dumps: store.listDumps(sb.id, dumpBrief) };
    },
  );

  app.get(
    '/v1/sandboxes/:id/dumps/:dumpId',
    {
      schema: {
        operationId: 'getDump',
        summary: 'One dump: its text and parsed groups',
        params: DumpParams,
        response: { 200: DumpDetail, ...ERRORS },
      },
    },
    async (req) => {
      const { id, dumpId } = req.params;
      sandbox(id);
      const d = dumpOf(id, dumpId);
      return dumpDetail(d, (await dumpBytes(d)).toString('utf8'));
    },
  );

  app.get(
    '/v1/sandboxes/:id/dumps/:dumpId/raw',
    {
      schema: {
        operationId: 'getDumpRaw',
        summary: 'A dump as the probe sent it',
        params: DumpParams,
        response: { 200: { description: 'the bytes as the probe sent them', content: { 'text/plain': { schema: Text } } }, ...ERRORS },
      },
    },
    async (req, reply) => {
      const { id, dumpId } = req.params;
      sandbox(id);
      const d = dumpOf(id, dumpId);
      return (
        reply
          .type('text/plain; charset=utf-8')
          .header('content-disposition', `attachment; filename="${id}-dump-${d.id}-${d.mode}.txt"`)
          // The bytes as the probe sent them.
          .send(await dumpBytes(d))
      );
    },
  );

  app.get(
    '/v1/sandboxes/:id/dumps/:dumpId/diff',
    {
      schema: {
        operationId: 'diffDumps',
        summary: 'What did not move between an earlier dump and this one',
        params: DumpParams,
        querystring: DiffQuery,
        response: { 200: DumpDiff, ...ERRORS },
      },
    },
    async (req) => {
      const { id, dumpId } = req.params;
      sandbox(id);
      const newer = dumpOf(id, dumpId);
      const { against } = req.query;
      const older = against !== undefined ? dumpOf(id, against) : store.previousDump(id, newer.mode, newer.id);
      if (!older) throw new ApiError('NOT_FOUND', `no earlier ${newer.mode} dump of sandbox "${id.slice(0, 140)}" to compare with`);
      try {
        // Unzipped, parsed and compared in the dump worker, within its time limit.
        return dumpDiff(older, newer, await analyzer.diff(older.gz, newer.gz));
      } catch (err) {
        if (err instanceof AnalysisError) throw new ApiError(err.code, err.message);
        throw err;
      }
    },
  );
}
