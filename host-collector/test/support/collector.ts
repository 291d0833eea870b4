// A collector run in-process from source, for the collector's own tests: each test gets a
// fresh folder (data and an empty dashboard) and its collectors are stopped and the folder
// removed after it, also when it fails. Host code: guest tests never import this (the
// side-neutral helpers are in test/support/).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach } from 'vitest';
import { Collector, type CollectorOptions } from '../../src/collector/collector.js';

const log = pino({ level: 'silent' });

export interface StartedCollector {
  collector: Collector;
  url: string;
  port: number;
}

export interface Collectors {
  /** This test's folder: data/ (the store) and ui/ (the dashboard) are in it. */
  readonly dir: string;
  /** The options start() uses: loopback on a free port, in `dir`, with `over` applied. */
  options(over?: Partial<CollectorOptions>): CollectorOptions;
  /** A collector not started (for tests that inject requests); stopped after the test too. */
  create(over?: Partial<CollectorOptions>): Collector;
  start(over?: Partial<CollectorOptions>): Promise<StartedCollector>;
  /** Stops one collector before the test ends (to restart on the same data, say). */
  stop(collector: Collector): Promise<void>;
}

/**
 * Registers the hooks; call it at the top of a test file, before the file's own afterEach
 * hooks: vitest runs after-hooks last-registered first, so the file's clients are closed
 * before the collectors they talk to stop.
 */
export function inProcessCollectors(prefix = 'vd-collector-'): Collectors {
  let dir = '';
  const running: Collector[] = [];
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    fs.mkdirSync(path.join(dir, 'ui'));
  });
  afterEach(async () => {
    // Every collector is stopped and the folder removed even if one stop fails.
    const stops = [];
    for (const c of running.splice(0))
      stops.push(
        await c.stop().then(
          () => null,
          (err: unknown) => err,
        ),
      );
    fs.rmSync(dir, { recursive: true, force: true });
    const failed = stops.find((err) => err !== null);
    if (failed !== undefined) throw failed;
  });
  const collectors: Collectors = {
    get dir() {
      return dir;
    },
    options: (over = {}) => ({
      http: '127.0.0.1:0',
      dataDir: path.join(dir, 'data'),
      vsockPort: 52000,
      probePort: 52001,
      stallAfterMs: 5000,
      startDeadlineMs: 30_000,
      dashboardDir: path.join(dir, 'ui'),
      ...over,
    }),
    create(over = {}) {
      const collector = new Collector(collectors.options(over), log);
      running.push(collector);
      return collector;
    },
    async start(over = {}) {
      const collector = collectors.create(over);
      const url = await collector.start();
      return { collector, url, port: Number(new URL(url).port) };
    },
    async stop(collector) {
      const i = running.indexOf(collector);
      if (i >= 0) running.splice(i, 1);
      await collector.stop();
    },
  };
  return collectors;
}
