// The probe's memory of what it observed: numbered events in a ring bounded by count and
// by bytes. Acked events stay until space is needed (a clone restored from a snapshot
// may connect to a collector that never saw them); anything that falls out before the
// collector acked it is reported as a gap, never dropped silently.

import type { EventBody, ProbeEvent } from '@vsockdiag/proto';

export interface RingLimits {
  maxEvents: number;
  maxBytes: number;
}

export const DEFAULT_RING_LIMITS: RingLimits = { maxEvents: 4096, maxBytes: 1024 * 1024 };

export class EventRing {
  private events: ProbeEvent[] = [];
  private sizes: number[] = [];
  private head = 0; // index of the oldest live entry; compacted lazily
  private bytes = 0;
  private seq = 0;

  constructor(private readonly limits: RingLimits = DEFAULT_RING_LIMITS) {}

  /** Highest sequence number assigned (0 before the first event). */
  get lastSeq(): number {
    return this.seq;
  }

  /** Oldest sequence number still held, or lastSeq + 1 when empty. */
  get oldestSeq(): number {
    return this.head < this.events.length ? this.events[this.head]!.seq : this.seq + 1;
  }

  get size(): number {
    return this.events.length - this.head;
  }

  push(body: EventBody, t: number): ProbeEvent {
    const event = { ...body, seq: ++this.seq, t } as ProbeEvent;
    const size = estimateBytes(event);
    this.events.push(event);
    this.sizes.push(size);
    this.bytes += size;
    while (this.size > 1 && (this.size > this.limits.maxEvents || this.bytes > this.limits.maxBytes)) {
      this.bytes -= this.sizes[this.head]!;
      this.head++;
    }
    if (this.head > 1024 && this.head * 2 > this.events.length) {
      this.events = this.events.slice(this.head);
      this.sizes = this.sizes.slice(this.head);
      this.head = 0;
    }
    return event;
  }

  /**
   * What to send a collector that has durably stored everything up to `ack`: the events
   * after it, and the range it can never get because it fell out of the ring.
   */
  after(ack: number, max = Infinity): { gap: { from: number; to: number } | null; events: ProbeEvent[] } {
    const oldest = this.oldestSeq;
    const gap = ack + 1 < oldest ? { from: ack + 1, to: oldest - 1 } : null;
    const from = Math.max(ack + 1, oldest);
    const start = this.head + (from - oldest);
    return { gap, events: this.events.slice(start, Math.min(this.events.length, start + max)) };
  }
}

/** A cheap upper-bound-ish estimate of an event's encoded size, without encoding it. */
function estimateBytes(value: unknown): number {
  if (typeof value === 'string') return value.length + 5;
  if (typeof value !== 'object' || value === null) return 9;
  let n = 5;
  for (const [k, v] of Object.entries(value)) n += k.length + 1 + estimateBytes(v);
  return n;
}
