// The live heap of a collector under test: what V8 still holds after a full collection,
// read on request through the preload heap-after-gc.mjs. Start the collector with
// `heapAfterGc.nodeArgs` and `heapAfterGc.env`, then `read` it as often as needed.

import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { waitFor } from '../support/wait.js';
import { ROOT } from './collector.js';

const PRELOAD = path.join(ROOT, 'test/harness/heap-after-gc.mjs');

export interface HeapAfterGc {
  nodeArgs: string[];
  env: NodeJS.ProcessEnv;
  /** Runs a full GC in `proc` and returns the bytes of heap objects (not code) still alive. */
  read: (proc: ChildProcess) => Promise<number>;
}

/** Readings go to a file in `dir`, which the caller owns and removes. */
export function heapAfterGc(dir: string): HeapAfterGc {
  const file = path.join(dir, 'heap-after-gc');
  const readings = () => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);
  return {
    nodeArgs: ['--expose-gc', '--import', PRELOAD],
    env: { VD_HEAP_AFTER_GC_FILE: file },
    read: async (proc) => {
      const before = readings().length;
      proc.kill('SIGUSR2');
      // A full GC of a few hundred MiB takes well under a second; a loaded machine gets 30.
      const after = await waitFor(
        'the heap after a full GC',
        () => {
          const now = readings();
          return now.length > before ? now : null;
        },
        { timeoutMs: 30_000 },
      );
      return Number(after[after.length - 1]);
    },
  };
}
