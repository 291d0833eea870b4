// What the reliability scenarios check the same way: whether a probe's numbered events all
// arrived once, a seeded random source, and a process's resident memory.

import fs from 'node:fs';

export interface SeqCheck {
  /** Events the probe numbered (1..sent). */
  sent: number;
  /** Sequence numbers in 1..sent that are not stored. */
  lost: number;
  /** Stored rows beyond the first for the same sequence number. */
  duplicated: number;
  /** Stored sequence numbers the probe never sent (above `sent`). */
  unexpected: number;
}

/** Compares the seqs a probe sent (1..sent) with the seqs stored for it, row by row. */
export function checkSeqs(sent: number, stored: Iterable<number>): SeqCheck {
  const seen = new Map<number, number>();
  for (const s of stored) seen.set(s, (seen.get(s) ?? 0) + 1);
  let lost = 0;
  let duplicated = 0;
  let unexpected = 0;
  for (let s = 1; s <= sent; s++) if (!seen.has(s)) lost++;
  for (const [s, n] of seen) {
    duplicated += n - 1;
    if (s < 1 || s > sent) unexpected++;
  }
  return { sent, lost, duplicated, unexpected };
}

/** Adds several probes' checks together. */
export function sumSeqs(checks: SeqCheck[]): SeqCheck {
  return checks.reduce(
    (a, c) => ({
      sent: a.sent + c.sent,
      lost: a.lost + c.lost,
      duplicated: a.duplicated + c.duplicated,
      unexpected: a.unexpected + c.unexpected,
    }),
    { sent: 0, lost: 0, duplicated: 0, unexpected: 0 },
  );
}

/** mulberry32: a small seeded generator, so a scenario's "random" points repeat run to run. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Resident set size of a process in bytes (VmRSS), or null when it is gone. */
export function rssOf(pid: number): number | null {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

export const mib = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
export const secs = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
