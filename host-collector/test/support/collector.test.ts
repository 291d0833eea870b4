import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { inProcessCollectors } from './collector.js';

describe('inProcessCollectors', () => {
  const collectors = inProcessCollectors('vd-fixture-');
  let before: { dir: string; url: string } | null = null;

  it('starts collectors on loopback in a fresh folder, with options overridden', async () => {
    const a = await collectors.start();
    const b = await collectors.start({ stallAfterMs: 1234 });
    expect(a.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(a.port).toBe(Number(new URL(a.url).port));
    expect(b.port).not.toBe(a.port);
    expect(collectors.options({ stallAfterMs: 1234 })).toMatchObject({ stallAfterMs: 1234, dataDir: path.join(collectors.dir, 'data') });
    expect((await fetch(`${a.url}/healthz`)).status).toBe(200);
    expect(fs.existsSync(path.join(collectors.dir, 'data'))).toBe(true);
    expect(fs.readdirSync(path.join(collectors.dir, 'ui'))).toEqual([]);
    before = { dir: collectors.dir, url: a.url };
  });

  it('has stopped them and removed the folder after the test', async () => {
    expect(collectors.dir).not.toBe(before!.dir);
    expect(fs.existsSync(before!.dir)).toBe(false);
    await expect(fetch(`${before!.url}/healthz`)).rejects.toThrow();
  });

  it('stops one early, once', async () => {
    const a = await collectors.start();
    await collectors.stop(a.collector);
    await expect(fetch(`${a.url}/healthz`)).rejects.toThrow();
    const b = await collectors.start();
    expect((await fetch(`${b.url}/healthz`)).status).toBe(200);
  });
});
