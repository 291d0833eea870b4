// A keep-alive HTTP/1.1 GET client for the readiness load (collector-load.ts), lean on purpose.
//
// Why not node:http: at 1,000 requests a second its client took 27–30 % of a core on the
// 2-core bench host, and on an idle machine with no fleet at all its p99 against the readiness
// thread was 5–10 ms; the figure measured the client as much as the server. This one writes a
// preformatted request and reads only what a latency figure needs: the status line and a
// Content-Length body (fastify answers every route it serves this way). No pipelining: a
// request waits for an idle connection, or opens one while fewer than `maxSockets` are open.
// Anything else it does not understand (no Content-Length, a malformed status line, a header
// past MAX_HEAD_BYTES) fails that request as 'error' and drops the connection.

import net from 'node:net';

/** A response head longer than this is not one the collector sends. */
const MAX_HEAD_BYTES = 16 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i;
const STATUS_LINE = /^HTTP\/1\.[01] (\d{3}) /;

/** The status code, or 'error' when the connection failed or the reply was not understood. */
export type LeanResult = number | 'error';
type Done = (result: LeanResult) => void;

class Connection {
  readonly socket: net.Socket;
  done: Done | null = null;
  private buf: Buffer = Buffer.alloc(0);
  /** Set once the head is parsed: the status and the bytes the whole reply takes. */
  private status = 0;
  private total = 0;

  constructor(
    host: string,
    port: number,
    private readonly idle: (c: Connection) => void,
    private readonly gone: (c: Connection) => void,
  ) {
    this.socket = net.connect({ host, port, noDelay: true });
    this.socket.on('data', (d: Buffer) => this.read(d));
    this.socket.on('error', () => {});
    this.socket.on('close', () => {
      this.finish('error');
      this.gone(this);
    });
  }

  send(request: string, done: Done): void {
    this.done = done;
    this.socket.write(request);
  }

  private read(d: Buffer): void {
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    if (this.total === 0) {
      const end = this.buf.indexOf(HEAD_END);
      if (end < 0) {
        if (this.buf.length > MAX_HEAD_BYTES) this.fail();
        return;
      }
      const head = this.buf.toString('latin1', 0, end);
      const status = STATUS_LINE.exec(head);
      const length = CONTENT_LENGTH.exec(head);
      if (!status || !length) return this.fail();
      this.status = Number(status[1]);
      this.total = end + HEAD_END.length + Number(length[1]);
    }
    if (this.buf.length < this.total) return;
    // A reply with bytes after it answered nothing we asked (no pipelining): not understood.
    if (this.buf.length > this.total) return this.fail();
    this.buf = Buffer.alloc(0);
    this.total = 0;
    this.finish(this.status);
    this.idle(this);
  }

  private finish(result: LeanResult): void {
    const done = this.done;
    this.done = null;
    done?.(result);
  }

  private fail(): void {
    this.finish('error');
    this.socket.destroy();
  }
}

export class LeanHttpPool {
  private readonly idle: Connection[] = [];
  private readonly open = new Set<Connection>();
  private readonly queue: Array<{ path: string; done: Done }> = [];

  constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly maxSockets = 64,
  ) {}

  /** GET `path`; `done` is called once, with the status or 'error'. */
  get(path: string, done: Done): void {
    const c = this.idle.pop();
    if (c) return c.send(this.request(path), done);
    if (this.open.size < this.maxSockets) {
      const fresh = new Connection(
        this.host,
        this.port,
        (x) => this.release(x),
        (x) => this.drop(x),
      );
      this.open.add(fresh);
      return fresh.send(this.request(path), done);
    }
    this.queue.push({ path, done });
  }

  /** Drops every connection with a request in flight (their callbacks are not called) and the
   *  queue: what a deadline does to requests it no longer waits for. */
  abandon(): void {
    this.queue.length = 0;
    for (const c of this.open) {
      if (!c.done) continue;
      c.done = null;
      c.socket.destroy();
    }
  }

  destroy(): void {
    this.abandon();
    for (const c of this.open) c.socket.destroy();
  }

  private request(path: string): string {
    return `GET ${path} HTTP/1.1\r\nHost: ${this.host}:${this.port}\r\n\r\n`;
  }

  private release(c: Connection): void {
    const next = this.queue.shift();
    if (next) c.send(this.request(next.path), next.done);
    else this.idle.push(c);
  }

  private drop(c: Connection): void {
    this.open.delete(c);
    const i = this.idle.indexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
    // A queued request gets the freed slot.
    const next = this.queue.shift();
    if (next) this.get(next.path, next.done);
  }
}
