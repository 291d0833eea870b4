// The one address syntax both sides accept: vsock:CID:PORT, unix:PATH, tcp:HOST:PORT.

import type { AddressErrorCode } from './codes.js';

export type Address =
  | { kind: 'vsock'; cid: number; port: number }
  | { kind: 'unix'; path: string }
  | { kind: 'tcp'; host: string; port: number };

/** VMADDR_CID_ANY, written `any` (for listening). */
export const VSOCK_CID_ANY = 0xffffffff;
/** The host as seen from a guest. */
export const VSOCK_CID_HOST = 2;

export class AddressError extends Error {
  override readonly name = 'AddressError';
  readonly code: AddressErrorCode = 'ERR_BAD_ADDRESS';
}

function parsePort(text: string, whole: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) > 65535) throw new AddressError(`bad port "${text}" in address "${whole}"`);
  return Number(text);
}

export function parseAddress(text: string): Address {
  const colon = text.indexOf(':');
  const scheme = colon < 0 ? '' : text.slice(0, colon);
  const rest = text.slice(colon + 1);
  switch (scheme) {
    case 'unix':
      if (!rest) throw new AddressError(`empty path in address "${text}"`);
      return { kind: 'unix', path: rest };
    case 'vsock': {
      const m = /^(any|\d{1,10}):(\d+)$/.exec(rest);
      if (!m) throw new AddressError(`expected vsock:CID:PORT, got "${text}"`);
      const cid = m[1] === 'any' ? VSOCK_CID_ANY : Number(m[1]);
      if (cid > VSOCK_CID_ANY) throw new AddressError(`CID out of range in "${text}"`);
      const port = Number(m[2]);
      if (port > 0xffffffff) throw new AddressError(`vsock port out of range in "${text}"`);
      return { kind: 'vsock', cid, port };
    }
    case 'tcp': {
      const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(rest);
      if (!m) throw new AddressError(`expected tcp:HOST:PORT, got "${text}"`);
      return { kind: 'tcp', host: (m[1] ?? m[2])!, port: parsePort(m[3]!, text) };
    }
    default:
      throw new AddressError(`unknown address "${text}": use vsock:CID:PORT, unix:PATH or tcp:HOST:PORT`);
  }
}

export function formatAddress(a: Address): string {
  switch (a.kind) {
    case 'unix':
      return `unix:${a.path}`;
    case 'vsock':
      return `vsock:${a.cid === VSOCK_CID_ANY ? 'any' : a.cid}:${a.port}`;
    case 'tcp':
      return `tcp:${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`;
  }
}
