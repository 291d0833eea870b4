// Durations as both CLIs take them ("250ms", "5s", "2m", "1h", or a bare number of ms), and
// the one way they are written: in reasons and conditions, the CLI's tables and the
// dashboard alike. This module imports nothing, so the dashboard may bundle it.

export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new Error(`bad duration "${text}": use e.g. 250ms, 5s, 2m`);
  const n = Number(m[1]);
  const unit = m[2] ?? 'ms';
  return Math.round(n * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[unit]!);
}

/** 0.4ms, 12ms, 1.2s, 3m12s, 2h5m, 3d4h (negative: -1.2s). Each unit is chosen on the value
 *  as rounded for writing, so 999.6 ms is 1.0s and 59.96 s is 1m0s, never 1000ms, 60.0s or
 *  1m60s. */
export function formatDuration(ms: number): string {
  if (ms < 0) return `-${formatDuration(-ms)}`;
  // Below 10 ms a fraction says something (a latency, a phase); whole ms stay whole.
  if (ms < 10 && !Number.isInteger(ms)) return `${+ms.toPrecision(2)}ms`;
  if (Math.round(ms) < 1000) return `${Math.round(ms)}ms`;
  const tenths = Math.round(ms / 100);
  if (tenths < 600) return `${(tenths / 10).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3600)}h`;
}
