// GET /v1/stream (WebSocket): the dashboard's live feed.
//   server → client: {type:'snapshot', sandboxes} on connect; {type:'sandbox', sandbox} when a
//   sandbox's summary changed (at most every SUMMARY_EVERY_MS per sandbox); {type:'removed', id};
//   {type:'event', id, event} for every event of a sandbox the client subscribed to.
//   client → server: {type:'subscribe', id} (answered {type:'subscribed', id}) / {type:'unsubscribe', id}.
// The upgrade passes the same guard as every request (guard.ts: loopback Host, the dashboard's
// own Origin). With a token configured, a client sends `Authorization: Bearer <token>` (the
// CLI) or `?ticket=` from POST /v1/stream/tickets (the dashboard: browsers cannot set headers
// on a WebSocket). A client that reads too slowly is dropped rather than buffered without bound.

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { WebSocket, WebSocketServer } from 'ws';
import type { Registry } from '../collector/registry.js';
import type { Sandbox } from '../collector/sandbox.js';
import type { EventRecord } from '../collector/store.js';
import { browserCheck, hasToken, type GuardOptions } from './guard.js';
import { eventRecord, summary } from './present.js';
import { Tickets } from './tickets.js';

const SUMMARY_EVERY_MS = 250;
const MAX_SUBSCRIPTIONS = 16;
/** Bytes queued to one client beyond which it is too slow and is dropped. */
const MAX_BUFFERED = 4 * 1024 * 1024;
const MAX_CLIENT_MESSAGE = 4096;

export function streamRoute(app: FastifyInstance, registry: Registry, guard: GuardOptions): void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_CLIENT_MESSAGE });
  const clients = new Set<Client>();
  const tickets = new Tickets();

  app.post('/v1/stream/tickets', async (_req, reply) => reply.code(201).send(tickets.issue()));

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
          const msg = JSON.stringify({ type: 'sandbox', sandbox: summary(sb) });
          for (const c of clients) c.send(msg);
        }, SUMMARY_EVERY_MS),
      );
    });
    sb.on('recorded', (rows: EventRecord[]) => {
      // Every batch of every sandbox passes here: nothing is built unless a client follows it,
      // and then once for all of them.
      let messages: string[] | null = null;
      for (const c of clients) {
        if (!c.follows(sb.id)) continue;
        messages ??= rows.map((r) => JSON.stringify({ type: 'event', id: sb.id, event: eventRecord(r) }));
        for (const m of messages) c.send(m);
      }
    });
  };
  for (const sb of registry.sandboxes.values()) watch(sb);
  registry.on('added', watch);
  registry.on('removed', (id: string) => {
    const msg = JSON.stringify({ type: 'removed', id });
    for (const c of clients) c.send(msg);
  });

  app.addHook('onClose', async () => {
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
    this.send(JSON.stringify({ type: 'snapshot', sandboxes: [...registry.sandboxes.values()].map((sb) => summary(sb, now)) }));
    ws.on('message', (data, isBinary) => {
      if (isBinary) return void ws.close(1003, 'text only');
      let m: { type?: unknown; id?: unknown };
      try {
        m = JSON.parse(data.toString()) as typeof m;
      } catch {
        return void ws.close(1007, 'not JSON');
      }
      if (typeof m.id !== 'string') return;
      if (m.type === 'subscribe' && this.subscriptions.size < MAX_SUBSCRIPTIONS) {
        this.subscriptions.add(m.id);
        // From here on every event of the sandbox is sent: a client can read history now
        // and know nothing falls between the two.
        this.send(JSON.stringify({ type: 'subscribed', id: m.id }));
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
