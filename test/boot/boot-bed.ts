// What the runit and systemd boot tests share: an overlay of the cached Debian image with the
// probe installed by scripts/rootfs-install.sh for one init system and the fake envd as
// /usr/bin/envd (mode 0777, as E2B ships envd), and a collector on this machine that the
// probe reaches over a Unix socket in the folder bound into the guest. Made before the file's
// first test, removed after its last, with the guest of the last boot.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { ROOT, requireBuilt, startCollector, type CollectorProcess } from '../harness/collector.js';
import { buildFakeEnvd } from '../harness/fake-envd.js';
import { cachedImage, overlay, type Guest, type Overlay } from '../harness/guest-image.js';

export interface BootBed {
  /** The image overlay (from the file's beforeAll on). */
  readonly ov: Overlay;
  /** The collector (from the file's beforeAll on). */
  readonly collector: CollectorProcess;
  /** The guest of the current boot: set it when booting; stopped after the file. */
  guest: Guest | undefined;
  /** Registers sandbox `id` with its socket `socketName` in the folder bound into the guest. */
  register(id: string, socketName: string): Promise<void>;
}

/**
 * Call inside the file's describe block. `prepare` finishes the image once the probe and
 * envd are in (an init system's service for envd, say); it gets the install script's output.
 */
export function bootBed(init: 'runit' | 'systemd', prepare: (ov: Overlay, installed: string) => void): BootBed {
  let ov: Overlay | undefined;
  let collector: CollectorProcess | undefined;
  const bed: BootBed = {
    get ov() {
      if (!ov) throw new Error('bootBed: the image is made in beforeAll');
      return ov;
    },
    get collector() {
      if (!collector) throw new Error('bootBed: the collector starts in beforeAll');
      return collector;
    },
    guest: undefined,
    async register(id, socketName) {
      const r = await bed.collector.api('PUT', `/v1/sandboxes/${id}`, { udsPath: path.join(bed.ov.hostDir, socketName) });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
    },
  };

  beforeAll(async () => {
    requireBuilt();
    const [image, envd] = await Promise.all([cachedImage(), buildFakeEnvd()]);
    ov = overlay(image);
    const r = spawnSync('bash', [path.join(ROOT, 'scripts/rootfs-install.sh'), ov.root, 'x64', init], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`rootfs-install failed: ${r.stderr}`);
    fs.copyFileSync(envd, path.join(ov.root, 'usr/bin/envd'));
    fs.chmodSync(path.join(ov.root, 'usr/bin/envd'), 0o777);
    prepare(ov, r.stdout);
    collector = await startCollector({ args: ['--stall-after', '2s'] });
  }, 15 * 60_000);

  afterAll(async () => {
    await bed.guest?.stop();
    await collector?.stop();
    ov?.remove();
  }, 60_000);

  return bed;
}
