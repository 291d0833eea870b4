// The collector's log when nobody reads it: what it holds unwritten stays bounded, records
// are dropped whole and counted, and the reader is told how many once it catches up.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LOG_BUFFER_MAX_BYTES, createLogger, droppedLogRecords } from '../src/collector/logger.js';
import { waitFor } from '../../test/support/wait.js';

const cleanup: Array<() => void> = [];
afterEach(() => {
  while (cleanup.length) cleanup.pop()!();
});

/** A FIFO's two ends, both non-blocking: the logger writes to one, the test reads the other when it likes. */
function pipe(): { read: number; write: number } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-log-'));
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const fifo = path.join(dir, 'log');
  execFileSync('mkfifo', [fifo]);
  const read = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  const write = fs.openSync(fifo, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK);
  cleanup.push(() => fs.closeSync(read));
  return { read, write };
}

/** Everything the pipe holds now. */
function drain(fd: number): string {
  const chunks: Buffer[] = [];
  const buf = Buffer.alloc(64 * 1024);
  for (;;) {
    let n = 0;
    try {
      n = fs.readSync(fd, buf);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') break;
      throw err;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
  return Buffer.concat(chunks).toString('utf8');
}

describe('createLogger', () => {
  it('drops whole records past LOG_BUFFER_MAX_BYTES while its reader is behind, and says how many', async () => {
    const { read, write } = pipe();
    const log = createLogger('info', write);
    const dest = (log as unknown as Record<symbol, { destroy(): void }>)[pino.symbols.streamSym]!;
    cleanup.push(() => dest.destroy());
    const before = droppedLogRecords();
    // Four times the bound, in ~1 KiB records, with nothing read meanwhile (a pipe holds 64 KiB).
    const records = Math.ceil((4 * LOG_BUFFER_MAX_BYTES) / 1024);
    const pad = 'x'.repeat(1000);
    for (let i = 0; i < records; i++) log.info({ i, pad }, 'record');
    const dropped = droppedLogRecords() - before;
    // At most the bound and the pipe's 64 KiB were kept; the rest was dropped.
    expect(dropped).toBeGreaterThanOrEqual(records - (LOG_BUFFER_MAX_BYTES + 64 * 1024) / 1000);

    // The reader catches up: what was kept arrives whole and in order, then the count.
    let text = '';
    await waitFor(
      'the warning with the count',
      () => {
        text += drain(read);
        return text.includes('"dropped"');
      },
      { timeoutMs: 30_000 },
    );
    const lines = text.split('\n').filter((l) => l !== '');
    const parsed = lines.map((l) => JSON.parse(l) as { i?: number; dropped?: number; level: string });
    const kept = parsed.filter((r) => r.i !== undefined).map((r) => r.i!);
    expect(kept).toEqual([...kept].sort((a, b) => a - b));
    const warning = parsed.find((r) => r.dropped !== undefined)!;
    expect(warning.level).toBe('warn');
    expect(warning.dropped).toBe(dropped);
    expect(kept.length + dropped).toBe(records);
  }, 60_000);
});
