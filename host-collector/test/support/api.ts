// Talking to an in-process collector the way its clients do, for the API's tests: JSON
// requests, the one error shape, and probes speaking the real protocol over a sandbox's
// socket, closed after each test.

import type { Hello } from '@vsockdiag/proto';
import { afterEach, expect } from 'vitest';
import { ProbeClient } from '../../../test/harness/probe-client.js';

export type Json = Record<string, any>;

/** A request with an optional JSON body; the answer's JSON is null when it is none. */
export async function call(url: string, method: string, route: string, body?: unknown, headers: Record<string, string> = {}) {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] = 'application/json';
  }
  const res = await fetch(url + route, init);
  const text = await res.text();
  let json: Json | null = null;
  try {
    json = text ? (JSON.parse(text) as Json) : null;
  } catch {
    json = null;
  }
  return { status: res.status, json, text, headers: res.headers };
}

/** Every API error is exactly {"error": {"code", "message"}}. */
export function expectError(r: { status: number; json: Json | null }, status: number, code: string): void {
  expect(r.status).toBe(status);
  expect(r.json).not.toBeNull();
  expect(Object.keys(r.json!)).toEqual(['error']);
  expect(Object.keys(r.json!.error).sort()).toEqual(['code', 'message']);
  expect(r.json!.error.code).toBe(code);
  expect(typeof r.json!.error.message).toBe('string');
  expect(r.json!.error.message.length).toBeGreaterThan(0);
}

/** envd alive and listening on :49983 since 500 ms after it started (guest ms). */
export const readyStatus: Hello['status'] = {
  target: { pid: 42, name: 'envd', startedAt: 1000, source: 'name', alive: true },
  listener: { port: 49983, bound: true, since: 1500, pid: 42, address: '0.0.0.0' },
  phases: { reported: false, ready: false },
};

/**
 * Registers the hook that closes this file's probes after each test; call it after
 * inProcessCollectors() (hooks run last-registered first: the probes close before the
 * collectors stop). Returns probe(): a probe for the sandbox at `udsPath` on vsock port
 * `vsockPort`, its target started with `status` and its clock at 2,000 ms since boot;
 * connect() says hello and resolves with the welcome's ack.
 */
export function probeClients(vsockPort = 52000): (udsPath: string, status: Hello['status']) => ProbeClient {
  const clients: ProbeClient[] = [];
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });
  return (udsPath, status) => {
    const client = new ProbeClient({ path: `${udsPath}_${vsockPort}`, status, sinceBootMs: () => 2000 });
    clients.push(client);
    return client;
  };
}
