// The collector's log: when nobody reads it, what it holds unwritten stays bounded, records
// are dropped whole and counted, and the reader is told how many once it catches up; and
// what one sandbox's guest can make it write is limited, sandbox by sandbox.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import {
  GUEST_LOG_BURST,
  GUEST_LOG_PER_SEC,
  GuestLogBudget,
  LOG_BUFFER_MAX_BYTES,
  type Logger,
  createLogger,
  droppedLogRecords,
} from '../src/collector/logger.js';
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

/** A logger of the collector's kind writing into a pipe the test reads when it likes. */
function logToPipe(): { log: Logger; read: number } {
  const { read, write } = pipe();
  const log = createLogger('info', write);
  const dest = (log as unknown as Record<symbol, { destroy(): void }>)[pino.symbols.streamSym]!;
  cleanup.push(() => dest.destroy());
  return { log, read };
}

describe('createLogger', () => {
  it('drops whole records past LOG_BUFFER_MAX_BYTES while its reader is behind, and says how many', async () => {
    const { log, read } = logToPipe();
    const before = droppedLogRecords().reader_behind;
    // Four times the bound, in ~1 KiB records, with nothing read meanwhile (a pipe holds 64 KiB).
    const records = Math.ceil((4 * LOG_BUFFER_MAX_BYTES) / 1024);
    const pad = 'x'.repeat(1000);
    for (let i = 0; i < records; i++) log.info({ i, pad }, 'record');
    const dropped = droppedLogRecords().reader_behind - before;
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

  it("writes a burst of a sandbox's records, then counts the rest and says how many on the next it writes", async () => {
    const { log, read } = logToPipe();
    const before = droppedLogRecords().sandbox_budget;
    const flood = GUEST_LOG_BURST * 3;
    const session = log.child({ sandbox: 'a' });
    const t0 = performance.now();
    for (let i = 0; i < flood; i++) (i % 2 ? session : log).info(i % 2 ? { i } : { sandbox: 'a', i }, 'probe connected');
    // Another sandbox, the collector's own records and errors are not the flood's to spend.
    for (let i = 0; i < 5; i++) log.info({ sandbox: 'b', i }, 'state changed');
    log.info('collector ready');
    session.error({ i: -1 }, 'unexpected error handling a probe message');
    // A busy machine may have refilled a token or two while the loop ran.
    const refilled = Math.floor(((performance.now() - t0) * GUEST_LOG_PER_SEC) / 1000);
    const dropped = droppedLogRecords().sandbox_budget - before;
    expect(dropped).toBeGreaterThanOrEqual(flood - GUEST_LOG_BURST - refilled);
    expect(dropped).toBeLessThanOrEqual(flood - GUEST_LOG_BURST);
    // A token comes back every 1000 / GUEST_LOG_PER_SEC ms.
    await new Promise((resolve) => setTimeout(resolve, (2 * 1000) / GUEST_LOG_PER_SEC));
    session.info('probe disconnected');

    let text = '';
    await waitFor('the last record', () => (text += drain(read)).includes('probe disconnected'), { timeoutMs: 30_000 });
    const records = text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as { sandbox?: string; msg: string; level: string; suppressed?: number });
    const of = (sandbox: string | undefined, msg: string) => records.filter((r) => r.sandbox === sandbox && r.msg === msg);
    expect(of('a', 'probe connected')).toHaveLength(flood - dropped);
    expect(of('b', 'state changed')).toHaveLength(5);
    expect(of(undefined, 'collector ready')).toHaveLength(1);
    expect(of('a', 'unexpected error handling a probe message')).toHaveLength(1);
    // Every record dropped is counted on one written: those the refills let through in between
    // carry their share.
    const counts = records.filter((r) => r.sandbox === 'a').reduce((n, r) => n + (r.suppressed ?? 0), 0);
    expect(counts).toBe(dropped);
    expect(of('a', 'probe disconnected')).toHaveLength(1);
  });
});

describe('GuestLogBudget', () => {
  it('refills at GUEST_LOG_PER_SEC up to GUEST_LOG_BURST, each sandbox apart', () => {
    const budget = new GuestLogBudget();
    for (let i = 0; i < GUEST_LOG_BURST; i++) expect(budget.take('a', 0)).toBe(0);
    expect(budget.take('a', 0)).toBeNull();
    expect(budget.take('a', 0)).toBeNull();
    expect(budget.take('b', 0)).toBe(0);
    // One token back after 1000 / GUEST_LOG_PER_SEC ms: the record it lets through counts the two.
    expect(budget.take('a', 1000 / GUEST_LOG_PER_SEC)).toBe(2);
    expect(budget.take('a', 1000 / GUEST_LOG_PER_SEC)).toBeNull();
    // However long the quiet, no more than a burst.
    const later = 3_600_000;
    for (let i = 0; i < GUEST_LOG_BURST; i++) expect(budget.take('a', later)).toBe(i === 0 ? 1 : 0);
    expect(budget.take('a', later)).toBeNull();
  });
});
