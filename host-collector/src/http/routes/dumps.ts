// /v1/sandboxes/:id/dumps…: take a dump (waits for it), list, read one with its parsed
// groups, its raw text, and the diff against an earlier dump.

import type { FastifyInstance } from 'fastify';
import { DUMP_MODES, type DumpMode } from '@vsockdiag/proto';
import { AnalysisError, type DumpAnalyzer } from '../../collector/dump-analyzer.js';
import { DumpError, type DumpService } from '../../collector/dump-service.js';
import type { Registry } from '../../collector/registry.js';
import { dumpBytes, type Store } from '../../collector/store.js';
import { ApiError, noSandbox } from '../errors.js';
import { dumpBrief, dumpDetail, dumpDiff } from '../present.js';

export async function dumpRoutes(
  app: FastifyInstance,
  opts: { registry: Registry; store: Store; dumps: DumpService; analyzer: DumpAnalyzer },
): Promise<void> {
  const { registry, store, dumps, analyzer } = opts;
  const sandbox = (id: string) => {
    const sb = registry.get(id);
    if (!sb) throw noSandbox(id);
    return sb;
  };
  const dumpOf = (id: string, dumpId: string) => {
    const n = Number(dumpId);
    const d = Number.isInteger(n) ? store.getDump(id, n) : null;
    if (!d) throw new ApiError('NOT_FOUND', `no dump ${dumpId.slice(0, 20)} of sandbox "${id.slice(0, 140)}"`);
    return d;
  };

  app.post('/v1/sandboxes/:id/dumps', async (req, reply) => {
    const sb = sandbox((req.params as { id: string }).id);
    const body = (req.body ?? {}) as { mode?: unknown; destructive?: unknown };
    const mode = (body.mode ?? 'threads') as DumpMode;
    if (!(DUMP_MODES as readonly string[]).includes(mode))
      throw new ApiError('BAD_REQUEST', `mode must be one of ${DUMP_MODES.join(', ')}`);
    if (body.destructive !== undefined && typeof body.destructive !== 'boolean')
      throw new ApiError('BAD_REQUEST', 'destructive must be true or false');
    try {
      const d = await dumps.take(sb, { mode, destructive: body.destructive === true, trigger: 'api' });
      return reply.code(201).send(dumpBrief(d));
    } catch (err) {
      if (err instanceof DumpError) throw new ApiError(err.code, err.message);
      throw err;
    }
  });

  app.get('/v1/sandboxes/:id/dumps', async (req) => {
    const sb = sandbox((req.params as { id: string }).id);
    return { dumps: store.listDumps(sb.id, dumpBrief) };
  });

  app.get('/v1/sandboxes/:id/dumps/:dumpId', async (req) => {
    const { id, dumpId } = req.params as { id: string; dumpId: string };
    sandbox(id);
    const d = dumpOf(id, dumpId);
    return dumpDetail(d, (await dumpBytes(d)).toString('utf8'));
  });

  app.get('/v1/sandboxes/:id/dumps/:dumpId/raw', async (req, reply) => {
    const { id, dumpId } = req.params as { id: string; dumpId: string };
    sandbox(id);
    const d = dumpOf(id, dumpId);
    return (
      reply
        .type('text/plain; charset=utf-8')
        .header('content-disposition', `attachment; filename="${id}-dump-${d.id}-${d.mode}.txt"`)
        // The bytes as the probe sent them.
        .send(await dumpBytes(d))
    );
  });

  app.get('/v1/sandboxes/:id/dumps/:dumpId/diff', async (req) => {
    const { id, dumpId } = req.params as { id: string; dumpId: string };
    sandbox(id);
    const newer = dumpOf(id, dumpId);
    const against = (req.query as { against?: string }).against;
    const older = against ? dumpOf(id, against) : store.previousDump(id, newer.mode, newer.id);
    if (!older) throw new ApiError('NOT_FOUND', `no earlier ${newer.mode} dump of sandbox "${id.slice(0, 140)}" to compare with`);
    try {
      // Unzipped, parsed and compared in the dump worker, within its time limit.
      return dumpDiff(older, newer, await analyzer.diff(older.gz, newer.gz));
    } catch (err) {
      if (err instanceof AnalysisError) throw new ApiError(err.code, err.message);
      throw err;
    }
  });
}
