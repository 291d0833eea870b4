// Commands the collector sends a probe and the answers it waits for: a `result`, after any
// `dump.chunk`s for the same id. Used on the probe's own session and on host-initiated
// command-port connections alike. Every request is bounded in time and in bytes.

import { MAX_DUMP_BYTES, type CollectorMessageOf, type ProbeMessageOf } from '@vsockdiag/proto';
import type { RequestErrorCode } from '../catalogue.js';

export type Result = ProbeMessageOf<'result'>;
/** What a request asks of the probe (the command message without its type and id). */
export type ProbeCommand = Omit<CollectorMessageOf<'command'>, 'type' | 'id'>;

export interface Answer {
  result: Result;
  chunks: Buffer[];
  bytes: number;
  /** Chunks arrived in order with no hole (index 0, 1, 2, …). */
  contiguous: boolean;
  /** More than MAX_DUMP_BYTES arrived; the rest was dropped. */
  cut: boolean;
}

interface Pending {
  chunks: Buffer[];
  bytes: number;
  nextIndex: number;
  contiguous: boolean;
  cut: boolean;
  resolve: (a: Answer) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class RequestError extends Error {
  constructor(
    readonly code: RequestErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export class Requests {
  private nextId = 1;
  private pending = new Map<number, Pending>();

  /** Allocates an id and waits for its result. */
  start(timeoutMs: number): { id: number; answer: Promise<Answer> } {
    const id = this.nextId++;
    const answer = new Promise<Answer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new RequestError('TIMEOUT', `the probe did not answer within ${Math.round(timeoutMs / 1000)} s`));
      }, timeoutMs);
      this.pending.set(id, { chunks: [], bytes: 0, nextIndex: 0, contiguous: true, cut: false, resolve, reject, timer });
    });
    return { id, answer };
  }

  onChunk(m: ProbeMessageOf<'dump.chunk'>): void {
    const p = this.pending.get(m.id);
    if (!p) return; // late, after a timeout: dropped
    if (m.index !== p.nextIndex) p.contiguous = false;
    p.nextIndex = m.index + 1;
    if (p.bytes + m.data.length > MAX_DUMP_BYTES) {
      p.cut = true;
      return;
    }
    p.chunks.push(Buffer.from(m.data.buffer, m.data.byteOffset, m.data.length));
    p.bytes += m.data.length;
  }

  onResult(m: Result): void {
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    clearTimeout(p.timer);
    p.resolve({ result: m, chunks: p.chunks, bytes: p.bytes, contiguous: p.contiguous, cut: p.cut });
  }

  failAll(err: Error): void {
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(err);
    }
  }
}
