// Numbers and times as an operator reads them. Durations are written as the collector's
// reasons and the CLI write them (proto's formatDuration, a pure module), so one page never
// shows one span two ways.

import { formatDuration } from '../../proto/src/duration';

/** 0.4ms, 12ms, 1.2s, 3m12s, 2h5m; a dash for no value. */
export function fmtMs(ms: number | null | undefined): string {
  return ms === null || ms === undefined || !Number.isFinite(ms) ? '—' : formatDuration(ms);
}

/** Axis labels at powers of ten (100µs, 1ms, 10ms, 1s, 10s, 2m): as short as a tick allows,
 *  where fmtMs would write 1.0s and 1m40s. */
export function fmtMsShort(ms: number): string {
  if (ms < 1) return `${Math.round(ms * 1000)}µs`;
  if (ms < 1000) return `${+ms.toPrecision(2)}ms`;
  if (ms < 1_000_000) return `${+(ms / 1000).toPrecision(2)}s`;
  return `${Math.round(ms / 60_000)}m`;
}

/** How long since an ISO time, in whole seconds (it ticks on screen): 4s, 3m12s, 2h5m. */
export function since(iso: string | null | undefined, now: number): string {
  if (!iso) return '—';
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return '—';
  const s = Math.max(0, Math.floor((now - t) / 1000));
  return s < 60 ? `${s}s` : fmtMs(s * 1000);
}

const int = new Intl.NumberFormat('en-US');
export const fmtInt = (n: number | null | undefined) => (n === null || n === undefined ? '—' : int.format(n));

/** Zero-padded to two digits (or `w`): 09, 007. */
export const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** 12:28:49.888 (local time), from an ISO time or epoch ms. */
export function clock(t: string | number | null | undefined): string {
  if (t === null || t === undefined || t === '') return '—';
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return '—';
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function fmtKb(kb: number | null | undefined): string {
  if (kb === null || kb === undefined) return '—';
  if (kb < 1024) return `${kb} KiB`;
  if (kb < 1024 * 1024) return `${(kb / 1024).toFixed(1)} MiB`;
  return `${(kb / 1024 / 1024).toFixed(2)} GiB`;
}

export function fmtBytes(b: number | null | undefined): string {
  if (b === null || b === undefined) return '—';
  return b < 1024 ? `${b} B` : fmtKb(Math.round(b / 1024));
}
