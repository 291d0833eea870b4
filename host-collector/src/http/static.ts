// Serves the built dashboard (web-ui/dist): files under /assets, and index.html for the
// page routes (/ and /sandboxes/:id) so deep links work.

import fs from 'node:fs';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { errorBody } from './errors.js';
import { ErrorBody } from './schemas.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.json': 'application/json',
  '.ico': 'image/x-icon',
};

export function serveDashboard(app: FastifyInstance, dir: string): void {
  const index = path.join(dir, 'index.html');
  const page = async (_req: unknown, reply: import('fastify').FastifyReply) => {
    if (!fs.existsSync(index)) {
      return reply.code(503).type('text/plain').send(`dashboard not built: run "make build" (looked in ${dir})\n`);
    }
    return reply.type(TYPES['.html']!).header('cache-control', 'no-cache').send(fs.createReadStream(index));
  };
  // The pages and their assets hold no data (that comes from the API): open without a token.
  // They are not part of the API, so not in its document (schema.hide).
  const html = {
    200: { description: 'the dashboard', content: { 'text/html': { schema: { type: 'string' } } } },
    503: { description: 'not built', content: { 'text/plain': { schema: { type: 'string' } } } },
    '4xx': ErrorBody,
  };
  const open = (params?: object) => ({
    config: { access: 'public' as const },
    schema: { hide: true, ...(params ? { params } : {}), response: html },
  });
  app.get('/', open(), page);
  app.get('/sandboxes/:id', open({ type: 'object', properties: { id: { type: 'string' } }, required: ['id'] }), page);
  app.get('/assets/*', open({ type: 'object', properties: { '*': { type: 'string' } } }), async (req, reply) => {
    const rel = (req.params as { '*': string })['*'];
    const file = path.resolve(dir, 'assets', rel);
    if (!file.startsWith(path.resolve(dir, 'assets') + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      return reply.code(404).send(errorBody('NOT_FOUND', 'no such asset'));
    }
    return reply
      .type(TYPES[path.extname(file)] ?? 'application/octet-stream')
      .header('cache-control', 'public, max-age=31536000, immutable')
      .send(fs.createReadStream(file));
  });
}
