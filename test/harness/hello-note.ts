// Reading what hello-note.cjs wrote: for each process started with helloNote(prefix).args and
// .env, when it wrote its first bytes to a socket and which of Node's modules it had loaded.
import fs from 'node:fs';
import path from 'node:path';
import { ROOT } from './collector.js';

export interface HelloNote {
  /** 'hello': noted at the first write(2) to a socket; 'exit': the process never made one. */
  at: 'hello' | 'exit';
  /** process.hrtime in µs at that moment (CPU profiles use the same clock). */
  us: number;
  /** Node's own public modules loaded by then (`net`, `stream`, …). */
  loaded: string[];
}

const PRELOAD = path.join(ROOT, 'test/harness/hello-note.cjs');

/** Node flags and environment that make a process note into files starting with `prefix`,
 *  and the notes found there, by pid. */
export function helloNote(prefix: string): {
  args: string[];
  env: Record<string, string>;
  notes: () => Map<number, HelloNote>;
} {
  const dir = path.dirname(prefix);
  const base = `${path.basename(prefix)}.`;
  return {
    args: ['--require', PRELOAD],
    env: { VD_HELLO_NOTE: prefix },
    notes: () => {
      const out = new Map<number, HelloNote>();
      for (const f of fs.readdirSync(dir)) {
        const pid = f.startsWith(base) && f.endsWith('.json') ? Number(f.slice(base.length, -'.json'.length)) : Number.NaN;
        if (Number.isInteger(pid)) out.set(pid, JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as HelloNote);
      }
      return out;
    },
  };
}
