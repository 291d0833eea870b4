// The rules that tell a new life of the VM from a new connection (collector/lives.ts), each
// piece of evidence on its own, and where resent events are filed.

import { describe, expect, it } from 'vitest';
import { helloMessage } from '../../test/support/hello.js';
import {
  RESTORE_CLOCK_LAG_MS,
  generationOf,
  newLifeEvidence,
  restoreCut,
  type GenerationRecord,
  type LastContact,
} from '../src/collector/lives.js';

const NOW = 1_800_000_000_000;
const BOOT = 'b0d5e1d0-0000-4000-8000-000000000000';

/** The last session: the guest booted 60 s before NOW by the host's clock, its wall clock 20 ms ahead. */
const last: LastContact = { instanceId: '0123456789abcdef', bootId: BOOT, bootOffsetMs: NOW - 60_000, skewMs: 20, guestMs: 59_000 };

/** A hello `elapsed` ms of host time after NOW, from a guest whose clocks ran `ran` ms of it. */
function helloAfter(elapsed: number, ran = elapsed, over: Parameters<typeof helloMessage>[0] = {}) {
  return helloMessage({ bootId: BOOT, clocks: { wallMs: NOW + 20 + ran, sinceBootMs: 60_000 + ran }, ...over });
}

describe('newLifeEvidence', () => {
  it('the first hello opens the first generation', () => {
    expect(newLifeEvidence(null, helloAfter(0), NOW, null)?.cause).toBe('first');
  });

  it('a reconnect of a guest that kept running is the same life, however long it was away', () => {
    expect(newLifeEvidence(last, helloAfter(300), NOW + 300, null)).toBeNull();
    // An hour disconnected (a collector down for an upgrade): its clocks ran all along.
    expect(newLifeEvidence(last, helloAfter(3_600_000), NOW + 3_600_000, null)).toBeNull();
    // A probe restarted in the same boot: another instance, same boot id.
    expect(newLifeEvidence(last, helloAfter(500, 500, { instanceId: 'fedcba9876543210' }), NOW + 500, null)).toBeNull();
  });

  it('tolerates normal skew: a clock that drifted or was slewed by a second', () => {
    const h = helloAfter(10_000, 10_000, { clocks: { wallMs: NOW + 10_000 - 1500, sinceBootMs: 70_000 } });
    expect(newLifeEvidence(last, h, NOW + 10_000, null)).toBeNull();
  });

  it('a new boot id is a new boot', () => {
    const e = newLifeEvidence(last, helloAfter(200, 200, { bootId: 'another-boot' }), NOW + 200, null);
    expect(e).toMatchObject({ cause: 'boot' });
  });

  it('a guest wall clock behind the host by about the time away is a restore', () => {
    // The guest's clocks stood still for 2 minutes (a snapshot restored), and the probe is
    // back before envd's /init set the wall clock. The monotonic clock says so first; with
    // no monotonic baseline the wall clock alone says it.
    const h = helloAfter(120_000, 300);
    expect(newLifeEvidence(last, h, NOW + 120_000, null)?.cause).toBe('monotonic');
    const noBase = { ...last, bootOffsetMs: null, guestMs: null };
    expect(newLifeEvidence(noBase, h, NOW + 120_000, null)).toMatchObject({
      cause: 'clock',
      detail: expect.stringMatching(/119\.\d s behind/),
    });
  });

  it('the wall clock is compared with where it was, not with zero', () => {
    // A guest whose clock was 40 s behind all along (never set) and still is: no restore.
    const behind = { ...last, bootOffsetMs: null, guestMs: null, skewMs: -40_000 };
    const h = helloAfter(1000, 1000, { clocks: { wallMs: NOW + 1000 - 40_000, sinceBootMs: 61_000 } });
    expect(newLifeEvidence(behind, h, NOW + 1000, null)).toBeNull();
    // …and one that falls further behind by the threshold is.
    const further = helloAfter(1000, 1000, { clocks: { wallMs: NOW + 1000 - 40_000 - RESTORE_CLOCK_LAG_MS, sinceBootMs: 61_000 } });
    expect(newLifeEvidence(behind, further, NOW + 1000, null)?.cause).toBe('clock');
  });

  it('the time since boot going back is a restore (of an older snapshot), even after /init set the wall clock', () => {
    const h = helloMessage({ bootId: BOOT, clocks: { wallMs: NOW + 1000, sinceBootMs: 30_000 } });
    expect(newLifeEvidence(last, h, NOW + 1000, null)).toMatchObject({ cause: 'monotonic', detail: expect.stringMatching(/went back/) });
  });

  it('the time since boot standing still while the host ran is a restore', () => {
    // The wall clock was already set (by /init), so only the monotonic clock tells.
    const h = helloMessage({ bootId: BOOT, clocks: { wallMs: NOW + 20 + 30_000, sinceBootMs: 60_000 + 200 } });
    expect(newLifeEvidence(last, h, NOW + 30_000, null)).toMatchObject({
      cause: 'monotonic',
      detail: expect.stringMatching(/stood still/),
    });
    // Just under the threshold: transit and a busy host, not a restore.
    const near = helloMessage({ bootId: BOOT, clocks: { wallMs: NOW + 20 + 4000, sinceBootMs: 60_000 + 200 } });
    expect(newLifeEvidence(last, near, NOW + 4000, null)).toBeNull();
  });

  it('an expected new life (a lifecycle hint, a moved socket) opens one; a new boot id still wins', () => {
    const hint = { cause: 'lifecycle' as const, detail: 'the orchestrator paused the VM' };
    expect(newLifeEvidence(last, helloAfter(300), NOW + 300, hint)).toEqual(hint);
    expect(newLifeEvidence(last, helloAfter(300, 300, { bootId: 'other' }), NOW + 300, hint)?.cause).toBe('boot');
  });
});

describe('restoreCut and generationOf', () => {
  const gens = (over: Partial<GenerationRecord>): GenerationRecord[] => [
    { generation: 1, cause: 'first', detail: '', openedMs: 0, instanceId: 'A', fromSeq: 1, afterGuestMs: null },
    { generation: 2, cause: 'clock', detail: '', openedMs: 1, instanceId: 'A', fromSeq: 6, afterGuestMs: null, ...over },
  ];

  it('cuts where the probe lost its link, else after what is stored and by the last guest time heard', () => {
    const prev = { ...last, instanceId: 'A' };
    expect(restoreCut(prev, helloMessage({ instanceId: 'A', lastSeq: 9, lostAtSeq: 7 }), 4)).toEqual({ fromSeq: 8, afterGuestMs: null });
    expect(restoreCut(prev, helloMessage({ instanceId: 'A', lastSeq: 9 }), 4)).toEqual({ fromSeq: 5, afterGuestMs: 59_000 });
    // Another probe process: all of its events are of the new life.
    expect(restoreCut(prev, helloMessage({ instanceId: 'B', lastSeq: 9, lostAtSeq: 7 }), 0)).toEqual({ fromSeq: 1, afterGuestMs: null });
  });

  it('files an event by the life it was made in', () => {
    const g = gens({});
    expect([3, 5, 6, 9].map((seq) => generationOf(g, 'A', seq, 0))).toEqual([1, 1, 2, 2]);
    // Another probe process of the same boot (restarted) lives in the newest generation.
    expect(generationOf(g, 'C', 1, 0)).toBe(2);
    // By guest time too, where the probe could not say where its link went down.
    const byTime = gens({ fromSeq: 4, afterGuestMs: 1000 });
    expect([generationOf(byTime, 'A', 4, 900), generationOf(byTime, 'A', 5, 1000), generationOf(byTime, 'A', 6, 1001)]).toEqual([1, 1, 2]);
    expect(generationOf([], 'A', 1, 0)).toBe(0);
  });
});
