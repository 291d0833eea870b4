// Facts about the guest as a whole (uptime, load, memory, boot id, wall clock), sent as a
// 'system' event every few seconds. The wall clock lets the collector measure the guest's
// clock skew against its own receive time (envd steps the clock in /init).
//
// Cost per sample: four small /proc reads through the shared buffer; between samples, tick()
// is a clock read and a compare.

import type { EventBody } from '@vsockdiag/proto';
import { readBootId, readLoadAvg, readMemInfo, readUptimeMs } from './proc/index.js';
import { monotonicMs } from './clock.js';

export type SystemEvent = Extract<EventBody, { kind: 'system' }>;

export const SYSTEM_EVERY_MS = 10_000;
/** bootId when /proc/sys/kernel/random/boot_id is unreadable (the probe's hello says the same). */
export const UNKNOWN_BOOT_ID = 'unknown';

export interface SystemSamplerOptions {
  procRoot: string;
  emit: (body: EventBody) => void;
  /** Least time between two samples (ms). */
  everyMs?: number;
  /** Clock for the rate limit; monotonic by default, so a stepped wall clock cannot stall it. */
  now?: () => number;
  /** The guest's wall clock, reported as wallMs. */
  wallNow?: () => number;
}

/** Reads one sample; null when uptime is unknown (nothing useful to say without it). */
export function readSystem(procRoot: string, wallNow: () => number = Date.now): SystemEvent | null {
  const uptimeMs = readUptimeMs(procRoot);
  if (uptimeMs === null) return null;
  const load = readLoadAvg(procRoot);
  const mem = readMemInfo(procRoot);
  const bootId = readBootId(procRoot);
  return {
    kind: 'system',
    uptimeMs,
    load: load ?? [],
    memTotalKb: mem?.totalKb ?? 0,
    memAvailableKb: mem?.availableKb ?? 0,
    bootId: (bootId ?? UNKNOWN_BOOT_ID).slice(0, 64),
    wallMs: wallNow(),
  };
}

export class SystemSampler {
  private readonly everyMs: number;
  private readonly now: () => number;
  private readonly wallNow: () => number;
  private lastAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly opts: SystemSamplerOptions) {
    this.everyMs = opts.everyMs ?? SYSTEM_EVERY_MS;
    this.now = opts.now ?? (() => monotonicMs());
    this.wallNow = opts.wallNow ?? Date.now;
  }

  /**
   * Call on every probe tick: samples on the first call and then at most every `everyMs`.
   * A failed sample (uptime unreadable) is retried only after `everyMs` too. Never throws;
   * returns true when an event was emitted.
   */
  tick(): boolean {
    const now = this.now();
    if (now - this.lastAt < this.everyMs) return false;
    this.lastAt = now;
    let event: SystemEvent | null;
    try {
      event = readSystem(this.opts.procRoot, this.wallNow);
    } catch {
      return false; // EACCES and the like: /proc is not what we expect; try again later
    }
    if (!event) return false;
    this.opts.emit(event);
    return true;
  }

  /** Samples on the next tick, whatever the time (e.g. right after a snapshot restore). */
  soon(): void {
    this.lastAt = Number.NEGATIVE_INFINITY;
  }
}
