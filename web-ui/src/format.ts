// Numbers and times as an operator reads them.

/** 0.4 ms, 12 ms, 1.2 s, 3m 12s, 2h 5m. */
export function fmtMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—';
  const a = Math.abs(ms);
  const sign = ms < 0 ? '-' : '';
  if (a < 1) return `${sign}${a.toFixed(2)} ms`;
  if (a < 10) return `${sign}${a.toFixed(1)} ms`;
  if (a < 1000) return `${sign}${Math.round(a)} ms`;
  if (a < 10_000) return `${sign}${(a / 1000).toFixed(2)} s`;
  if (a < 60_000) return `${sign}${(a / 1000).toFixed(1)} s`;
  const s = Math.floor(a / 1000);
  if (s < 3600) return `${sign}${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86_400) return `${sign}${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${sign}${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3600)}h`;
}

/** Short axis labels: 100µs, 1ms, 10ms, 1s, 10s, 2m. */
export function fmtMsShort(ms: number): string {
  if (ms < 1) return `${Math.round(ms * 1000)}µs`;
  if (ms < 1000) return `${+ms.toPrecision(2)}ms`;
  if (ms < 1_000_000) return `${+(ms / 1000).toPrecision(2)}s`;
  return `${Math.round(ms / 60_000)}m`;
}

/** How long since an ISO time: 4s, 3m 12s, 2h 5m. */
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
