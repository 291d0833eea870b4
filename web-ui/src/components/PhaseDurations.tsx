// How long each phase took across the fleet (GET /v1/phases): per phase a histogram on a
// shared logarithmic time axis, so a slow phase's bars sit visibly to the right of the
// others, with p50/p90/max. Hidden when the collector has no /v1/phases (older collector).

import { memo, useEffect, useMemo, useState } from 'react';
import uPlot from 'uplot';
import { ApiError, Unauthorized, getJson, type PhaseStats } from '../api';
import { fmtMs, fmtMsShort } from '../format';
import { useAuthEpoch } from '../hooks';
import { UPlotChart } from './UPlotChart';

const REFRESH_MS = 10_000;
const BINS_PER_DECADE = 4;
/** Floor of the axis: shorter phases land in the first bin. */
const MIN_MS = 0.01;
/**
 * A phase stands out when it is typically slow compared with the other phases: its median
 * (p50) at least SLOW_FACTOR times the median of all phases' p50s and at least SLOW_MIN_MS.
 * Medians, not p90s: one slow sandbox should not flag every phase it went through.
 */
const SLOW_FACTOR = 10;
const SLOW_MIN_MS = 50;

type Status = { kind: 'loading' } | { kind: 'absent' } | { kind: 'error'; message: string } | { kind: 'ok'; phases: PhaseStats[] };

/** Memoised: the page re-renders every second for its clocks; this only when its data changes. */
export const PhaseDurations = memo(function PhaseDurations() {
  const [status, setStatus] = useState<Status>({ kind: 'loading' });
  const epoch = useAuthEpoch();

  useEffect(() => {
    let alive = true;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const load = async () => {
      try {
        const r = await getJson<{ phases: PhaseStats[] }>('/v1/phases');
        if (!alive) return;
        setStatus({ kind: 'ok', phases: Array.isArray(r.phases) ? r.phases : [] });
      } catch (e) {
        if (!alive) return;
        if (e instanceof ApiError && (e.status === 404 || e.status === 405)) {
          setStatus({ kind: 'absent' });
          return; // No such route on this collector: stop asking.
        }
        if (!(e instanceof Unauthorized)) setStatus({ kind: 'error', message: (e as Error).message });
      }
      if (alive) timer = setTimeout(() => void load(), REFRESH_MS);
    };
    void load();
    return () => {
      alive = false;
      if (timer) clearTimeout(timer);
    };
  }, [epoch]);

  if (status.kind === 'absent') return null;
  return (
    <section className="panel phase-durations" data-testid="phase-durations">
      <h2>Phase durations across the fleet</h2>
      {status.kind === 'loading' && <p className="muted">loading…</p>}
      {status.kind === 'error' && <p className="error">{status.message}</p>}
      {status.kind === 'ok' && <PhaseList phases={status.phases} />}
    </section>
  );
});

function median(xs: number[]): number {
  if (!xs.length) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function PhaseList({ phases }: { phases: PhaseStats[] }) {
  const shown = useMemo(() => phases.filter((p) => p.count > 0), [phases]);
  // One axis for all phases: from the shortest sample's decade to the longest's.
  const axis = useMemo(() => {
    let lo = Infinity;
    let hi = -Infinity;
    for (const p of shown) {
      for (const v of p.samplesMs) {
        if (!Number.isFinite(v)) continue;
        lo = Math.min(lo, Math.max(MIN_MS, v));
        hi = Math.max(hi, Math.max(MIN_MS, v));
      }
      hi = Math.max(hi, p.maxMs);
    }
    if (!Number.isFinite(lo)) return { lo: -1, hi: 3 };
    const l = Math.floor(Math.log10(lo));
    let h = Math.ceil(Math.log10(Math.max(hi, MIN_MS)));
    if (h <= l) h = l + 1;
    return { lo: l, hi: h };
  }, [shown]);

  if (!shown.length) return <p className="muted">No phase has been reported yet.</p>;

  const medP50 = median(shown.map((p) => p.p50Ms));
  const slowest = shown.reduce((a, b) => (b.p50Ms > a.p50Ms ? b : a));
  const isSlow = (p: PhaseStats) => shown.length > 1 && p.p50Ms >= SLOW_MIN_MS && p.p50Ms >= SLOW_FACTOR * medP50;

  return (
    <>
      <p className="muted small">
        How long each phase took on each sandbox's current target: one bar per duration range, on a shared log axis (
        {fmtMsShort(10 ** axis.lo)} to {fmtMsShort(10 ** axis.hi)}). A phase whose median is far above the others' is marked slow.
      </p>
      <ul className="phase-stats">
        {shown.map((p) => {
          const slow = isSlow(p);
          return (
            <li
              key={p.name}
              className={`phase-stat ${slow ? 'slow' : ''}`}
              data-testid="phase-row"
              data-name={p.name}
              data-slow={slow ? 'true' : 'false'}
            >
              <div className="phase-stat-head">
                <span className="phase-name" title={p.name}>
                  {p.name}
                </span>
                {slow && <span className="tag tag-warn">slow</span>}
                {p === slowest && shown.length > 1 && !slow && <span className="tag">slowest</span>}
                <span className="phase-n muted" title="sandboxes that went through this phase">
                  n={p.count}
                </span>
              </div>
              <div className="phase-stat-body">
                <Histogram samples={p.samplesMs} lo={axis.lo} hi={axis.hi} slow={slow} />
                <dl className="phase-nums">
                  <dt>p50</dt>
                  <dd data-testid="p50">{fmtMs(p.p50Ms)}</dd>
                  <dt>p90</dt>
                  <dd data-testid="p90">{fmtMs(p.p90Ms)}</dd>
                  <dt>max</dt>
                  <dd data-testid="max">{fmtMs(p.maxMs)}</dd>
                </dl>
              </div>
            </li>
          );
        })}
      </ul>
    </>
  );
}

function Histogram({ samples, lo, hi, slow }: { samples: number[]; lo: number; hi: number; slow: boolean }) {
  const data = useMemo<uPlot.AlignedData>(() => {
    const n = (hi - lo) * BINS_PER_DECADE;
    const xs: number[] = [];
    const ys: number[] = new Array<number>(n).fill(0);
    for (let i = 0; i < n; i++) xs.push(lo + (i + 0.5) / BINS_PER_DECADE);
    for (const v of samples) {
      if (!Number.isFinite(v)) continue;
      const x = Math.log10(Math.max(MIN_MS, v));
      const i = Math.min(n - 1, Math.max(0, Math.floor((x - lo) * BINS_PER_DECADE)));
      ys[i]!++;
    }
    return [xs, ys];
  }, [samples, lo, hi]);

  const options = useMemo<Omit<uPlot.Options, 'width'>>(() => {
    const color = slow ? '#c2410c' : '#3b6fd8';
    const decades: number[] = [];
    const step = hi - lo > 6 ? 2 : 1;
    for (let d = lo; d <= hi; d += step) decades.push(d);
    return {
      height: 50,
      legend: { show: false },
      cursor: { show: false },
      select: { show: false, left: 0, top: 0, width: 0, height: 0 },
      padding: [2, 14, 0, 14],
      scales: { x: { time: false, range: [lo, hi] }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      axes: [
        {
          size: 16,
          gap: 1,
          ticks: { size: 3 },
          grid: { show: false },
          font: '10px system-ui, sans-serif',
          splits: () => decades,
          values: (_u, splits) => splits.map((v) => fmtMsShort(10 ** v)),
        },
        { show: false },
      ],
      series: [
        {},
        {
          label: 'sandboxes',
          fill: color + 'cc',
          stroke: color,
          width: 0,
          paths: uPlot.paths.bars!({ size: [0.92, Infinity], align: 0 }),
          points: { show: false },
        },
      ],
    };
  }, [lo, hi, slow]);

  return <UPlotChart options={options} data={data} className="phase-hist" />;
}
