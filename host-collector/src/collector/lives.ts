// Generations and sessions. A generation is a life of the VM: a boot, or a restore from a
// snapshot. A session is one connection of a probe. A reconnect after a collector restart, a
// probe restarted within the same boot, or a dropped link opens a new session in the same
// generation; only evidence of a new life opens a new generation (seed 003: what belongs to
// one runtime generation must not be mixed with the next). Pure: the intake (intake.ts)
// feeds it what it knows and files events where it says.
//
// The evidence, each piece on its own enough:
//   - boot:      the hello's boot id is not the one the last session had;
//   - lifecycle: the orchestrator said it paused or snapshotted the VM (POST …/lifecycle);
//   - uds-moved: the sandbox was registered again with another uds_path (a restore with
//                vsock_override);
//   - monotonic: the guest's time since boot went backwards, or ran RESTORE_CLOCK_LAG_MS or
//                more behind the host's time since the last session (a restored guest's
//                clocks stood still from the snapshot to the restore; a running or merely
//                disconnected one's kept pace);
//   - clock:     the guest's wall clock fell RESTORE_CLOCK_LAG_MS or more further behind the
//                host's than it was at the last contact (a restored clock runs from the
//                snapshot moment until envd's /init sets it);
//   - vmgenid:   the probe reported the kernel's NEW_VMGENID uevent (event `vm.genid`).
//
// Where a new life begins in the probe's numbered events: a restore does not renumber them,
// and events the probe made before the snapshot may still arrive (resent after the
// reconnect). They belong to the life they were made in, so each generation records where it
// starts in its probe's sequence (fromSeq, and for lack of better a guest time), and every
// event is filed by that.

import type { Hello } from '@vsockdiag/proto';
import type { GenerationCause } from '../catalogue.js';

/**
 * How far the guest's clocks must fall behind the host's before a reconnect counts as a
 * restore. Normal skew moves by milliseconds between two sessions (NTP slews at most 0.5 ms
 * a second; transit and a busy event loop add tens of ms), so 5 s is far outside it, while a
 * restore's pause (a snapshot written, the VM started elsewhere) is seconds to days. Shorter
 * pauses are still caught by the other evidence (the lifecycle hint, vmgenid, a moved socket).
 */
export const RESTORE_CLOCK_LAG_MS = 5000;

/** A guest's time since boot that went back by more than this is a fact, not jitter. */
const MONOTONIC_BACK_SLACK_MS = 50;

/** What the collector knew of the last session when the next hello comes. */
export interface LastContact {
  instanceId: string;
  bootId: string;
  /** Host ms at guest boot as the last session's clock placed it (GuestClock's offset). */
  bootOffsetMs: number | null;
  /** Guest wall clock minus host wall clock when last seen. */
  skewMs: number | null;
  /** The guest's time since boot (ms) in the last frame heard. */
  guestMs: number | null;
}

/** A new life announced from outside the guest, waiting for the next hello to open it. */
export interface Expectation {
  cause: Extract<GenerationCause, 'lifecycle' | 'uds-moved'>;
  detail: string;
}

export interface Evidence {
  cause: GenerationCause;
  detail: string;
}

const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** Why this hello begins a new life of the VM, or null: a new session of the same one. */
export function newLifeEvidence(prev: LastContact | null, hello: Hello, now: number, expected: Expectation | null): Evidence | null {
  if (!prev) return { cause: 'first', detail: 'the first probe session of this sandbox' };
  if (prev.bootId !== '' && hello.bootId !== '' && prev.bootId !== hello.bootId) {
    return { cause: 'boot', detail: `boot id ${hello.bootId} (was ${prev.bootId})` };
  }
  if (expected) return expected;
  const since = hello.clocks.sinceBootMs;
  if (prev.guestMs !== null && since < prev.guestMs - MONOTONIC_BACK_SLACK_MS) {
    return { cause: 'monotonic', detail: `guest time since boot went back from ${s(prev.guestMs)} to ${s(since)}` };
  }
  if (prev.bootOffsetMs !== null) {
    // The guest booted at host time `offset` by the last session's clock; by this hello's, later
    // by however long the guest stood still in between.
    const stood = now - since - prev.bootOffsetMs;
    if (stood >= RESTORE_CLOCK_LAG_MS) {
      return { cause: 'monotonic', detail: `the guest's clock stood still for ${s(stood)} while the host's ran` };
    }
  }
  const behind = now - hello.clocks.wallMs;
  const behindBefore = prev.skewMs === null ? 0 : -prev.skewMs;
  if (behind - behindBefore >= RESTORE_CLOCK_LAG_MS) {
    return { cause: 'clock', detail: `the guest's wall clock is ${s(behind)} behind the host's (was ${s(behindBefore)})` };
  }
  return null;
}

/** Where a generation begins. */
export interface GenerationRecord {
  generation: number;
  cause: GenerationCause;
  detail: string;
  openedMs: number;
  /** The probe process whose numbered events the cut below applies to. */
  instanceId: string;
  /** Its events with a lower seq were made in an earlier life. */
  fromSeq: number;
  /** And so were those made at or before this guest time (ms since boot): the last one heard
   *  from before the restore, used when the probe could not say where its link was lost. */
  afterGuestMs: number | null;
}

/** Where a restore found by this hello begins in its probe's events: after the ones made
 *  before the link was lost (hello.lostAtSeq), or else after those already stored. */
export function restoreCut(prev: LastContact, hello: Hello, ack: number): Pick<GenerationRecord, 'fromSeq' | 'afterGuestMs'> {
  if (prev.instanceId !== hello.instanceId) return { fromSeq: 1, afterGuestMs: null };
  if (hello.lostAtSeq !== undefined) return { fromSeq: hello.lostAtSeq + 1, afterGuestMs: null };
  return { fromSeq: ack + 1, afterGuestMs: prev.guestMs };
}

/**
 * The generation an event of probe `instanceId` (seq, guest time t) was made in, given the
 * generations newest last. Another probe process's cut does not apply to it: it lives in the
 * newest generation it can belong to.
 */
export function generationOf(gens: readonly GenerationRecord[], instanceId: string, seq: number, t: number): number {
  for (let i = gens.length - 1; i >= 0; i--) {
    const g = gens[i]!;
    if (g.instanceId !== instanceId) return g.generation;
    if (seq >= g.fromSeq && (g.afterGuestMs === null || t > g.afterGuestMs)) return g.generation;
  }
  return gens[0]?.generation ?? 0;
}
