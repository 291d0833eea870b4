import { describe, expect, it } from 'vitest';

import { loadNative, type NativeAddon } from '../src/native.js';
import { pipeSelfTest } from '../src/vsock/self-test.js';

describe('pipeSelfTest', () => {
  it('passes on this Node version', async () => {
    const t0 = Date.now();
    await expect(pipeSelfTest()).resolves.toBeUndefined();
    expect(Date.now() - t0).toBeLessThan(1000);
  });

  it('leaves no fds behind', async () => {
    const { readdirSync } = await import('node:fs');
    const before = readdirSync('/proc/self/fd').length;
    for (let i = 0; i < 5; i++) await pipeSelfTest();
    await new Promise((r) => setTimeout(r, 10));
    expect(readdirSync('/proc/self/fd').length).toBeLessThanOrEqual(before);
  });

  const PREFIX = /^this Node version's internal Pipe handle does not work with foreign sockets: /;

  // Two sockets that are not each other's peer stand in for a handle that cannot carry bytes.
  function mismatchedPair(real: NativeAddon, keep: number[]): NativeAddon {
    return {
      ...real,
      socketPair: () => {
        const [a, b] = real.socketPair();
        const [c, d] = real.socketPair();
        keep.push(b, d);
        return [a, c];
      },
    };
  }

  it('fails at its 1 s bound, with the explanatory message, when nothing arrives', async () => {
    const real = loadNative();
    const peers: number[] = [];
    const t0 = Date.now();
    const err = (await pipeSelfTest(mismatchedPair(real, peers)).catch((e: unknown) => e)) as Error;
    const took = Date.now() - t0;
    peers.forEach((fd) => real.closeFd(fd));
    expect(err.message).toMatch(PREFIX);
    expect(err.message).toContain('no result within 1000 ms');
    expect(took).toBeGreaterThanOrEqual(990);
    expect(took).toBeLessThan(1500);
  });

  it('fails fast, with the explanatory message, when the peer is gone', async () => {
    const real = loadNative();
    const peers: number[] = [];
    const broken = mismatchedPair(real, peers);
    const socketPair = broken.socketPair;
    broken.socketPair = () => {
      const pair = socketPair();
      peers.splice(0).forEach((fd) => real.closeFd(fd));
      return pair;
    };
    const t0 = Date.now();
    await expect(pipeSelfTest(broken)).rejects.toThrow(PREFIX);
    expect(Date.now() - t0).toBeLessThan(500);
  });
});
