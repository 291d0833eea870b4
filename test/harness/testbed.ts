// One collector process for a test file, a folder for the file's sockets, and the simulated
// sandboxes its tests start, each registered with the collector. The collector starts before
// the first test and stops after the last; a sandbox stops after the test that started it,
// also when the test fails. Call testBed() at the top of a file or of a describe block.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { startCollector, type CollectorProcess } from './collector.js';
import { startSandbox, type Sandbox, type SandboxOptions } from './sandbox.js';

export interface TestBed {
  /** The file's collector (from its beforeAll on). */
  readonly collector: CollectorProcess;
  /** A folder for the file's sandboxes and sockets, removed after the last test. */
  readonly root: string;
  /** Starts a sandbox under root and registers it (201); it stops after this test. */
  sandbox(opts: Omit<SandboxOptions, 'root'>): Promise<Sandbox>;
}

/** `args`: the collector's flags (--stall-after, say). */
export function testBed(args: string[] = []): TestBed {
  let collector: CollectorProcess | undefined;
  let root = '';
  const running: Sandbox[] = [];
  beforeAll(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-'));
    collector = await startCollector({ args });
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((s) => s.stop()));
  });
  afterAll(async () => {
    await collector?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });
  const bed: TestBed = {
    get collector() {
      if (!collector) throw new Error('testBed: the collector starts in beforeAll');
      return collector;
    },
    get root() {
      return root;
    },
    async sandbox(opts) {
      const sb = await startSandbox({ ...opts, root });
      running.push(sb);
      expect((await bed.collector.api('PUT', `/v1/sandboxes/${opts.id}`, { udsPath: sb.udsPath })).status).toBe(201);
      return sb;
    },
  };
  return bed;
}
