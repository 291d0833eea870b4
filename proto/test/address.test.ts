import { describe, expect, it } from 'vitest';
import { AddressError, VSOCK_CID_ANY, formatAddress, parseAddress } from '../src/address.js';

describe('addresses', () => {
  it('parses the three kinds', () => {
    expect(parseAddress('vsock:2:52000')).toEqual({ kind: 'vsock', cid: 2, port: 52000 });
    expect(parseAddress('vsock:any:52001')).toEqual({ kind: 'vsock', cid: VSOCK_CID_ANY, port: 52001 });
    expect(parseAddress('unix:/run/fc/vm1/v.sock_52000')).toEqual({ kind: 'unix', path: '/run/fc/vm1/v.sock_52000' });
    expect(parseAddress('unix:/odd:path')).toEqual({ kind: 'unix', path: '/odd:path' });
    expect(parseAddress('tcp:127.0.0.1:7070')).toEqual({ kind: 'tcp', host: '127.0.0.1', port: 7070 });
    expect(parseAddress('tcp:[::1]:7070')).toEqual({ kind: 'tcp', host: '::1', port: 7070 });
  });

  it('formats back to the same text', () => {
    // Text only: parsed and formatted, never dialled.
    const samples = ['vsock:2:52000', 'vsock:any:1', 'unix:/a/b', 'tcp:127.0.0.1:1', 'tcp:[::1]:80']; // parse + format only
    for (const t of samples) {
      expect(formatAddress(parseAddress(t))).toBe(t);
    }
  });

  it('rejects bad addresses with a clear message', () => {
    for (const t of ['', '/just/a/path', 'vsock:2', 'vsock:x:1', 'tcp:host', 'tcp:host:99999', 'unix:', 'udp:1.2.3.4:5']) {
      expect(() => parseAddress(t), t).toThrow(AddressError);
    }
    expect(() => parseAddress('udp:1:2')).toThrow(/use vsock:CID:PORT, unix:PATH or tcp:HOST:PORT/);
  });
});
