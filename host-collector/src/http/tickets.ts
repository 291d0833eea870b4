// Stream tickets: a browser cannot set an Authorization header on a WebSocket, and a token in
// the stream's URL ends up in proxy logs and browser history. So the dashboard trades its
// token (in a header, on an ordinary authorised request) for a ticket: random, single-use,
// valid for TICKET_TTL_MS, and worth nothing but one stream connection.

import { randomBytes } from 'node:crypto';

export const TICKET_TTL_MS = 30_000;
/** Outstanding tickets kept at most; the oldest is dropped first (it would expire first). */
const MAX_TICKETS = 1024;

export class Tickets {
  /** ticket → expiry (ms); a Map keeps insertion order, so the first entry is the oldest. */
  private readonly live = new Map<string, number>();

  issue(now = Date.now()): { ticket: string; expiresInMs: number } {
    this.sweep(now);
    if (this.live.size >= MAX_TICKETS) this.live.delete(this.live.keys().next().value!);
    const ticket = randomBytes(24).toString('base64url');
    this.live.set(ticket, now + TICKET_TTL_MS);
    return { ticket, expiresInMs: TICKET_TTL_MS };
  }

  /** True once per issued, unexpired ticket. */
  redeem(ticket: string, now = Date.now()): boolean {
    const expires = this.live.get(ticket);
    if (expires === undefined) return false;
    this.live.delete(ticket);
    return expires > now;
  }

  private sweep(now: number): void {
    for (const [t, expires] of this.live) {
      if (expires > now) break; // later entries were issued later
      this.live.delete(t);
    }
  }
}
