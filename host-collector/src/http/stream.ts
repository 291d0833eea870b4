// GET /v1/stream (WebSocket): the dashboard's live feed. Its messages are declared in
// stream-messages.ts.
// The upgrade passes the same guard as every request (guard.ts: loopback Host, the dashboard's
// own Origin). With a token configured, a client sends `Authorization: Bearer <token>` (the
// CLI) or `?ticket=` from POST /v1/stream/tickets (the dashboard: browsers cannot set headers
// on a WebSocket). A client that reads too slowly is dropped rather than buffered without bound.

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import Compile from 'typebox/compile';
import { WebSocket, WebSocketServer } from 'ws';
import type { Registry } from '../collector/registry.js';
import type { Sandbox } from '../collector/sandbox.js';
import type { EventRecord } from '../collector/store.js';
import { ApiError } from './errors.js';
import { browserCheck, hasToken, type GuardOptions } from './guard.js';
import { eventRecord, summary } from './present.js';
import { ERRORS, StreamTicket } from './schemas.js';
import type { Api } from './base.js';
import { StreamClientMessage, StreamServerMessage } from './stream-messages.js';
import { Tickets } from './tickets.js';

/** A message as it goes out: typed by its schema, serialised once for every client. */
const encode = (m: StreamServerMessage) => JSON.stringify(m);
const clientMessage = Compile(StreamClientMessage);

const SUMMARY_EVERY_MS = 250;
const MAX_SUBSCRIPTIONS = 16;
/** Bytes queued to one client beyond which it is too slow and is dropped. */
const MAX_BUFFERED = 4 * 1024 * 1024;
const MAX_CLIENT_MESSAGE = 4096;

export function streamRoute(app: Api, registry: Registry, guard: GuardOptions): void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_CLIENT_MESSAGE });
  const clients = new Set<Client>();
  const tickets = new Tickets();

  app.post(
    '/v1/stream/tickets',
    {
      schema: {
        operationId: 'createStreamTicket',
        summary: 'A single-use ticket for the stream (for browsers, which cannot send a header)',
        response: { 201: StreamTicket, ...ERRORS },
      },
    },
    async (_req, reply) => reply.code(201).send(tickets.issue()),
  );
  // Upgrades never reach the router (the 'upgrade' handler below takes them): this route is
  // what a plain GET finds, and what documents the stream and its messages.
  app.get(
    '/v1/stream',
    {
      schema: {
        operationId: 'openStream',
        summary: 'The live stream (WebSocket): summaries of every sandbox, events of the subscribed ones',
        querystring: { type: 'object', properties: { ticket: { type: 'string', description: 'from POST /v1/stream/tickets' } } },
        response: {
          101: {
            description: 'switched to WebSocket: text messages, each one StreamServerMessage; send StreamClientMessage',
            content: { 'application/json': { schema: StreamServerMessage } },
          },
          ...ERRORS,
        },
      },
    },
    async () => {
      throw new ApiError('UPGRADE_REQUIRED', 'GET /v1/stream is a WebSocket: send Connection: Upgrade, Upgrade: websocket');
    },
  );

  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    // The target exactly as the router would match it: no decoding, no absolute form.
    const [pathname, query = ''] = (req.url ?? '').split('?', 2) as [string, string?];
    if (pathname !== '/v1/stream') return void refuse(socket, 404, 'Not Found');
    if (browserCheck(req.method ?? 'GET', req.headers, guard, true)) return void refuse(socket, 403, 'Forbidden');
    const ticket = new URLSearchParams(query).get('ticket');
    if (guard.token && !hasToken(req.headers, guard.token) && !(ticket !== null && tickets.redeem(ticket))) {
      return void refuse(socket, 401, 'Unauthorized');
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const client = new Client(ws, registry);
      clients.add(client);
      ws.once('close', () => clients.delete(client));
    });
  });

  // Summaries: coalesced per sandbox, sent to every client.
  const due = new Map<string, NodeJS.Timeout>();
  const watch = (sb: Sandbox) => {
    sb.on('changed', () => {
      // No dashboard open: no summaries to build.
      if (clients.size === 0 || due.has(sb.id)) return;
      due.set(
        sb.id,
        setTimeout(() => {
          due.delete(sb.id);
          if (registry.get(sb.id) !== sb) return;
          const msg = encode({ type: 'sandbox', sandbox: summary(sb) });
          for (const c of clients) c.send(msg);
        }, SUMMARY_EVERY_MS),
      );
    });
    sb.on('stored', (rows: readonly EventRecord[], ids: readonly number[]) => {
      // Every batch of every sandbox passes here: nothing is built unless a client follows it,
      // and then once for all of them.
      let messages: string[] | null = null;
      for (const c of clients) {
        if (!c.follows(sb.id)) continue;
        messages ??= rows.map((r, i) => encode({ type: 'event', id: sb.id, event: eventRecord({ ...r, id: ids[i]! }) }));
        for (const m of messages) c.send(m);
      }
    });
  };
  for (const sb of registry.sandboxes.values()) watch(sb);
  registry.on('added', watch);
  registry.on('removed', (id: string) => {
    const msg = encode({ type: 'removed', id });
    for (const c of clients) c.send(msg);
  });

  // Before the server closes, which waits for every connection: upgraded ones included.
  app.addHook('preClose', async () => {
    for (const t of due.values()) clearTimeout(t);
    for (const c of clients) c.ws.terminate();
    wss.close();
  });
}

function refuse(socket: Duplex, status: number, text: string): void {
  socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
}

class Client {
  private readonly subscriptions = new Set<string>();

  constructor(
    readonly ws: WebSocket,
    registry: Registry,
  ) {
    const now = Date.now();
    this.send(encode({ type: 'snapshot', sandboxes: [...registry.sandboxes.values()].map((sb) => summary(sb, now)) }));
    ws.on('message', (data, isBinary) => {
      if (isBinary) return void ws.close(1003, 'text only');
      let m: unknown;
      try {
        m = JSON.parse(data.toString());
      } catch {
        return void ws.close(1007, 'not JSON');
      }
      // Messages of a newer client, or malformed ones, are ignored (the connection stays).
      if (!clientMessage.Check(m)) return;
      if (m.type === 'subscribe' && this.subscriptions.size < MAX_SUBSCRIPTIONS) {
        this.subscriptions.add(m.id);
        // From here on every event of the sandbox is sent: a client can read history now
        // and know nothing falls between the two.
        this.send(encode({ type: 'subscribed', id: m.id }));
      }
      if (m.type === 'unsubscribe') this.subscriptions.delete(m.id);
    });
    ws.on('error', () => ws.terminate());
  }

  send(text: string): void {
    if (this.ws.readyState !== WebSocket.OPEN) return;
    if (this.ws.bufferedAmount > MAX_BUFFERED) return void this.ws.terminate();
    this.ws.send(text);
  }

  follows(id: string): boolean {
    return this.subscriptions.has(id);
  }
}
