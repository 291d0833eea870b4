import { describe, expect, it } from 'vitest';
import type { EventBody, ProbeEvent } from '@vsockdiag/proto';
import { DEFAULT_RING_LIMITS, EventRing } from '../src/ring.js';

const notice = (message: string): EventBody => ({ kind: 'probe.notice', level: 'info', message });

function fill(ring: EventRing, n: number, size = 1): ProbeEvent[] {
  const out: ProbeEvent[] = [];
  for (let i = 0; i < n; i++) out.push(ring.push(notice('x'.repeat(size)), i));
  return out;
}

const seqs = (events: ProbeEvent[]) => events.map((e) => e.seq);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
/** The ring's backing array (private): its length is what compaction keeps bounded. */
const backing = (ring: EventRing) => ring as unknown as { events: unknown[]; sizes: unknown[] };

describe('EventRing numbering', () => {
  it('starts empty with lastSeq 0 and oldestSeq 1', () => {
    const ring = new EventRing();
    expect(ring.lastSeq).toBe(0);
    expect(ring.oldestSeq).toBe(1);
    expect(ring.size).toBe(0);
    expect(ring.after(0)).toEqual({ gap: null, events: [] });
  });

  it('numbers events from 1, consecutively, and stamps t and the body', () => {
    const ring = new EventRing();
    const a = ring.push(notice('a'), 12.5);
    const b = ring.push({ kind: 'listener.unbound', port: 80 }, 13);
    const c = ring.push(notice('c'), 14);
    expect(a).toEqual({ kind: 'probe.notice', level: 'info', message: 'a', seq: 1, t: 12.5 });
    expect(b).toEqual({ kind: 'listener.unbound', port: 80, seq: 2, t: 13 });
    expect(c.seq).toBe(3);
    expect(ring.lastSeq).toBe(3);
    expect(ring.oldestSeq).toBe(1);
    expect(ring.size).toBe(3);
  });

  it('does not alias the pushed body', () => {
    const ring = new EventRing();
    const body = notice('a');
    const ev = ring.push(body, 1);
    expect(ev).not.toBe(body);
    expect(body).not.toHaveProperty('seq');
  });

  it('has sane default limits', () => {
    expect(DEFAULT_RING_LIMITS.maxEvents).toBeGreaterThan(0);
    expect(DEFAULT_RING_LIMITS.maxBytes).toBeGreaterThan(0);
  });
});

describe('EventRing bounds', () => {
  it('is bounded by count, evicting the oldest first', () => {
    const ring = new EventRing({ maxEvents: 5, maxBytes: 1e9 });
    fill(ring, 12);
    expect(ring.size).toBe(5);
    expect(ring.lastSeq).toBe(12);
    expect(ring.oldestSeq).toBe(8);
    expect(seqs(ring.after(7).events)).toEqual([8, 9, 10, 11, 12]);
  });

  it('is bounded by bytes, evicting the oldest first', () => {
    const ring = new EventRing({ maxEvents: 1000, maxBytes: 3500 });
    fill(ring, 20, 1000); // each event is a bit over 1000 bytes
    expect(ring.size).toBe(3);
    expect(ring.oldestSeq).toBe(18);
    expect(ring.lastSeq).toBe(20);
    // Small events can fill the room again: count follows bytes.
    const small = new EventRing({ maxEvents: 1000, maxBytes: 3500 });
    fill(small, 20, 1);
    expect(small.size).toBe(20);
  });

  it('makes room by bytes as soon as a big event arrives', () => {
    const ring = new EventRing({ maxEvents: 1000, maxBytes: 5000 });
    fill(ring, 50, 1); // about 80 bytes each
    expect(ring.size).toBe(50);
    ring.push(notice('y'.repeat(2500)), 99);
    expect(ring.lastSeq).toBe(51);
    expect(ring.size).toBeLessThan(50);
    expect(ring.size).toBeGreaterThan(1);
    // What is left is a contiguous tail ending in the big one.
    const { events } = ring.after(0);
    expect(seqs(events)).toEqual(range(ring.oldestSeq, 51));
  });

  it('never evicts the newest event, even when it alone exceeds the byte limit', () => {
    const ring = new EventRing({ maxEvents: 10, maxBytes: 100 });
    fill(ring, 3, 1);
    const big = ring.push(notice('z'.repeat(5000)), 5);
    expect(ring.size).toBe(1);
    expect(ring.oldestSeq).toBe(4);
    expect(ring.after(3).events).toEqual([big]);
    // The next event pushes the oversized one out, and is kept itself.
    ring.push(notice('small'), 6);
    expect(ring.size).toBe(1);
    expect(ring.oldestSeq).toBe(5);
  });

  it('never evicts the newest event with maxEvents 1', () => {
    const ring = new EventRing({ maxEvents: 1, maxBytes: 1e9 });
    fill(ring, 4);
    expect(ring.size).toBe(1);
    expect(seqs(ring.after(0).events)).toEqual([4]);
  });
});

describe('EventRing.after', () => {
  it('returns the events after ack, in order', () => {
    const ring = new EventRing({ maxEvents: 100, maxBytes: 1e9 });
    fill(ring, 10);
    expect(seqs(ring.after(0).events)).toEqual(range(1, 10));
    expect(seqs(ring.after(4).events)).toEqual(range(5, 10));
    expect(seqs(ring.after(9).events)).toEqual([10]);
    expect(ring.after(4).gap).toBeNull();
  });

  it('returns nothing when everything is acked (or the ack is ahead)', () => {
    const ring = new EventRing({ maxEvents: 100, maxBytes: 1e9 });
    fill(ring, 10);
    expect(ring.after(10)).toEqual({ gap: null, events: [] });
    expect(ring.after(50)).toEqual({ gap: null, events: [] });
  });

  it('reports a gap {from, to} for unacked events that fell out', () => {
    const ring = new EventRing({ maxEvents: 5, maxBytes: 1e9 });
    fill(ring, 20); // holds 16..20
    expect(ring.after(0)).toMatchObject({ gap: { from: 1, to: 15 } });
    expect(seqs(ring.after(0).events)).toEqual(range(16, 20));
    expect(ring.after(10).gap).toEqual({ from: 11, to: 15 });
    expect(seqs(ring.after(10).events)).toEqual(range(16, 20));
    expect(ring.after(14).gap).toEqual({ from: 15, to: 15 });
    // Acked up to just before the oldest held: no gap.
    expect(ring.after(15).gap).toBeNull();
    expect(seqs(ring.after(15).events)).toEqual(range(16, 20));
    expect(ring.after(17).gap).toBeNull();
    expect(seqs(ring.after(17).events)).toEqual([18, 19, 20]);
  });

  it('limits the batch with max, from the first unacked event', () => {
    const ring = new EventRing({ maxEvents: 1000, maxBytes: 1e9 });
    fill(ring, 600);
    expect(seqs(ring.after(0, 256).events)).toEqual(range(1, 256));
    expect(seqs(ring.after(256, 256).events)).toEqual(range(257, 512));
    expect(seqs(ring.after(512, 256).events)).toEqual(range(513, 600));
    expect(ring.after(598, 1).events.map((e) => e.seq)).toEqual([599]);
  });

  it('limits the batch with max when there is a gap too', () => {
    const ring = new EventRing({ maxEvents: 10, maxBytes: 1e9 });
    fill(ring, 30); // holds 21..30
    const { gap, events } = ring.after(3, 4);
    expect(gap).toEqual({ from: 4, to: 20 });
    expect(seqs(events)).toEqual([21, 22, 23, 24]);
  });

  it('keeps acked events until space is needed', () => {
    const ring = new EventRing({ maxEvents: 5, maxBytes: 1e9 });
    fill(ring, 5);
    // A collector acked everything...
    expect(ring.after(5).events).toEqual([]);
    // ...but a different collector (a clone's) that saw nothing still gets it all.
    expect(ring.after(0)).toMatchObject({ gap: null });
    expect(seqs(ring.after(0).events)).toEqual(range(1, 5));
    expect(ring.size).toBe(5);
    // Space is needed: only then does the oldest go.
    fill(ring, 1);
    expect(ring.oldestSeq).toBe(2);
    expect(ring.after(0).gap).toEqual({ from: 1, to: 1 });
  });

  it('returns copies of the slice, not the live backing array', () => {
    const ring = new EventRing({ maxEvents: 10, maxBytes: 1e9 });
    fill(ring, 3);
    const first = ring.after(0).events;
    first.length = 0;
    expect(ring.after(0).events).toHaveLength(3);
  });
});

describe('EventRing over long runs', () => {
  it('keeps size ≤ maxEvents and the backing array bounded over 100k pushes (count-bound)', () => {
    const ring = new EventRing({ maxEvents: 100, maxBytes: 1e9 });
    let maxBacking = 0;
    let maxSize = 0;
    for (let i = 1; i <= 100_000; i++) {
      ring.push(notice('m'), i);
      maxSize = Math.max(maxSize, ring.size);
      maxBacking = Math.max(maxBacking, backing(ring).events.length);
    }
    expect(maxSize).toBe(100);
    expect(ring.size).toBe(100);
    expect(ring.lastSeq).toBe(100_000);
    expect(ring.oldestSeq).toBe(99_901);
    // Compaction keeps the backing arrays within a small multiple of the live window.
    expect(maxBacking).toBeLessThan(2 * (1025 + 100));
    expect(backing(ring).events.length).toBeLessThan(2 * (1025 + 100));
    expect(backing(ring).sizes.length).toBe(backing(ring).events.length);
    // And it still answers correctly after many compactions.
    const { gap, events } = ring.after(99_950);
    expect(gap).toBeNull();
    expect(seqs(events)).toEqual(range(99_951, 100_000));
    expect(ring.after(0).gap).toEqual({ from: 1, to: 99_900 });
    expect(ring.after(0).events[0]!.seq).toBe(99_901);
  });

  it('keeps the backing array bounded over 100k pushes (byte-bound)', () => {
    const ring = new EventRing({ maxEvents: 1_000_000, maxBytes: 20_000 });
    for (let i = 1; i <= 100_000; i++) ring.push(notice('payload-' + (i % 10)), i);
    const size = ring.size;
    expect(size).toBeGreaterThan(100);
    expect(size).toBeLessThan(1000);
    expect(backing(ring).events.length).toBeLessThan(2 * (1025 + size));
    expect(seqs(ring.after(0).events)).toEqual(range(100_001 - size, 100_000));
  });

  it('keeps the default-sized ring at 4096 events over 100k pushes', () => {
    const ring = new EventRing();
    for (let i = 1; i <= 100_000; i++) ring.push({ kind: 'listener.unbound', port: i % 65536 }, i);
    expect(ring.size).toBe(DEFAULT_RING_LIMITS.maxEvents);
    expect(backing(ring).events.length).toBeLessThanOrEqual(2 * DEFAULT_RING_LIMITS.maxEvents + 2);
    expect(ring.after(100_000 - 3).events.map((e) => e.t)).toEqual([99_998, 99_999, 100_000]);
  });
});

describe('EventRing after acks', () => {
  it('keeps only the newest keepAckedEvents of what the collector acked, and all it has not', () => {
    const ring = new EventRing({ keepAckedEvents: 3 });
    fill(ring, 10);
    ring.acked(7);
    expect(ring.oldestSeq).toBe(5); // 5, 6, 7 acked and kept; 8-10 not acked
    expect(seqs(ring.after(7).events)).toEqual([8, 9, 10]);
    ring.acked(10);
    expect(ring.oldestSeq).toBe(8);
    expect(ring.size).toBe(3);
  });

  it('keeps acked events within keepAckedBytes', () => {
    const ring = new EventRing({ keepAckedEvents: 100, keepAckedBytes: 2500 });
    fill(ring, 6, 1000);
    ring.acked(6);
    expect(ring.size).toBe(2);
    expect(ring.oldestSeq).toBe(5);
  });

  it('replays to a collector that never saw them (a clone) what it kept, and names the rest a gap', () => {
    const ring = new EventRing({ keepAckedEvents: 4 });
    fill(ring, 10);
    ring.acked(10);
    ring.acked(0); // the clone's collector has nothing
    expect(ring.after(0)).toMatchObject({ gap: { from: 1, to: 6 } });
    expect(seqs(ring.after(0).events)).toEqual([7, 8, 9, 10]);
  });

  it('lets evicted events go at once, not when the array is compacted', () => {
    const ring = new EventRing({ keepAckedEvents: 2 });
    fill(ring, 10);
    ring.acked(10);
    expect(backing(ring).events.filter((e) => e !== undefined)).toHaveLength(2);
  });

  it('by default keeps far fewer acked events than it can hold for a collector away', () => {
    expect(DEFAULT_RING_LIMITS.keepAckedEvents * 8).toBeLessThanOrEqual(DEFAULT_RING_LIMITS.maxEvents);
    const ring = new EventRing();
    fill(ring, 2000);
    expect(ring.size).toBe(2000);
    ring.acked(2000);
    expect(ring.size).toBe(DEFAULT_RING_LIMITS.keepAckedEvents);
    expect(ring.lastSeq).toBe(2000);
  });
});
