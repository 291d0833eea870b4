// The probe's memory of what it observed: numbered events in a ring bounded by count and
// by bytes. Anything that falls out before the collector acked it is reported as a gap,
// never dropped silently. Of what the collector acked, only the newest few stay (a clone
// restored from a snapshot may connect to a collector that never saw them): kept to the
// ring's bounds, they were what a probe that had run for hours held most of, about 2.6 MiB
// of V8's heap for 4,096 events, where the probe's whole RssAnon is meant to be 8.

import type { EventBody, ProbeEvent } from '@vsockdiag/proto';

export interface RingLimits {
  maxEvents: number;
  maxBytes: number;
  /** Of the events the collector acked, at most this many stay, and within keepAckedBytes. */
  keepAckedEvents: number;
  keepAckedBytes: number;
}

/** Four hours of a settled probe's events (about fifteen a minute) could wait for a collector;
 *  twenty minutes of them stay once acked. */
export const DEFAULT_RING_LIMITS: RingLimits = {
  maxEvents: 4096,
  maxBytes: 1024 * 1024,
  keepAckedEvents: 256,
  keepAckedBytes: 128 * 1024,
};

export class EventRing {
  /** Evicted entries are cleared (undefined) at once, so that their events can be collected
   *  before the array is compacted. */
  private events: Array<ProbeEvent | undefined> = [];
  private sizes: number[] = [];
  private head = 0; // index of the oldest live entry; compacted lazily
  private bytes = 0;
  private seq = 0;

  private readonly limits: RingLimits;

  constructor(limits: Partial<RingLimits> = {}) {
    this.limits = { ...DEFAULT_RING_LIMITS, ...limits };
  }

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
    while (this.size > 1 && (this.size > this.limits.maxEvents || this.bytes > this.limits.maxBytes)) this.evictOldest();
    this.compact();
    return event;
  }

  /**
   * The collector has durably stored everything up to `ack` (which may be lower than before:
   * a clone's collector, or one that lost what it had not committed). The oldest acked events
   * go until keepAckedEvents and keepAckedBytes hold.
   */
  acked(ack: number): void {
    let count = Math.min(Math.max(0, ack - this.oldestSeq + 1), this.size);
    let bytes = 0;
    for (let i = this.head; i < this.head + count; i++) bytes += this.sizes[i]!;
    while (count > 0 && (count > this.limits.keepAckedEvents || bytes > this.limits.keepAckedBytes)) {
      bytes -= this.sizes[this.head]!;
      this.evictOldest();
      count--;
    }
    this.compact();
  }

  private evictOldest(): void {
    this.bytes -= this.sizes[this.head]!;
    this.events[this.head] = undefined;
    this.head++;
  }

  /** Drops the evicted entries once they are most of the arrays. */
  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.events.length) {
      this.events = this.events.slice(this.head);
      this.sizes = this.sizes.slice(this.head);
      this.head = 0;
    }
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
    // Entries from head on are never cleared.
    return { gap, events: this.events.slice(start, Math.min(this.events.length, start + max)) as ProbeEvent[] };
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
