// Socket counts over time from the probe's `sockets` events: TCP in use, TIME_WAIT, and the
// busiest remote endpoint's count when a census named one. A storm to one endpoint (the
// MMDS poll storm) shows as the TIME_WAIT and top-remote lines climbing into the thousands.

import { memo, useMemo } from 'react';
import type uPlot from 'uplot';
import type { RemoteCount, SandboxDetail, SandboxEvent } from '../api';
import { fmtInt } from '../format';
import { TimeSeriesChart, type SeriesSpec } from './TimeSeriesChart';

const SERIES: SeriesSpec[] = [
  { label: 'TCP in use', color: '#2563eb', width: 2 },
  { label: 'TIME_WAIT', color: '#ea580c', width: 2, fill: true },
  { label: 'top remote', color: '#dc2626', dash: [6, 4], width: 1.5 },
];

function topOf(data: Record<string, unknown>): RemoteCount | null | undefined {
  const top = data.top;
  if (!Array.isArray(top)) return undefined; // no census in this sample
  const t = top[0] as RemoteCount | undefined;
  return t && typeof t.count === 'number' ? t : null;
}

/** Memoised: the page re-renders every second for its clocks; this only when its data changes. */
export const SocketsChart = memo(function SocketsChart({
  detail,
  events,
  loaded,
}: {
  detail: SandboxDetail;
  events: SandboxEvent[];
  loaded: boolean;
}) {
  const { data, peakTop } = useMemo(() => {
    const rows = events
      .map((e) => ({ t: Date.parse(e.at) / 1000, d: e.data }))
      .filter((r) => Number.isFinite(r.t))
      .sort((a, b) => a.t - b.t);
    const xs: number[] = [];
    const inUse: Array<number | null> = [];
    const tw: Array<number | null> = [];
    const top: Array<number | null> = [];
    let peak: RemoteCount | null = null;
    for (const r of rows) {
      // uPlot wants strictly increasing x: samples in the same millisecond keep the last.
      if (xs.length && xs[xs.length - 1] === r.t) {
        xs.pop();
        inUse.pop();
        tw.pop();
        top.pop();
      }
      xs.push(r.t);
      inUse.push(typeof r.d.tcpInUse === 'number' ? r.d.tcpInUse : null);
      tw.push(typeof r.d.timeWait === 'number' ? r.d.timeWait : null);
      const t = topOf(r.d);
      top.push(t === undefined ? null : t === null ? 0 : t.count);
      if (t && (!peak || t.count > peak.count)) peak = t;
    }
    return { data: [xs, inUse, tw, top] as uPlot.AlignedData, peakTop: peak as RemoteCount | null };
  }, [events]);

  const now = detail.sockets;
  const storm = detail.conditions.find((c) => c.name === 'socket-storm');
  const currentTop = now?.top?.[0];
  return (
    <section className={`panel ${storm ? 'storm' : ''}`} data-testid="sockets-panel">
      <h2>Sockets over time</h2>
      {storm && (
        <p className="banner banner-bad" data-testid="storm-banner">
          <b>Socket storm:</b> {storm.detail}
        </p>
      )}
      <div className="stat-row">
        <span className="stat">
          <span className="stat-n" data-testid="tcp-in-use">
            {fmtInt(now?.tcpInUse)}
          </span>
          <span className="stat-l">TCP in use</span>
        </span>
        <span className="stat">
          <span className={`stat-n ${storm ? 'bad' : ''}`} data-testid="time-wait">
            {fmtInt(now?.timeWait)}
          </span>
          <span className="stat-l">TIME_WAIT</span>
        </span>
        <span className="stat">
          <span className={`stat-n ${storm ? 'bad' : ''}`}>{currentTop ? fmtInt(currentTop.count) : '—'}</span>
          <span className="stat-l">
            top remote{' '}
            {currentTop ? (
              <span className="mono" data-testid="top-remote">
                {currentTop.address}:{currentTop.port}
              </span>
            ) : null}
          </span>
        </span>
        {now?.byState && (
          <span className="stat by-state">
            {Object.entries(now.byState)
              .sort((a, b) => b[1] - a[1])
              .slice(0, 6)
              .map(([k, v]) => (
                <span key={k} className="kvchip">
                  {k} {fmtInt(v)}
                </span>
              ))}
          </span>
        )}
      </div>
      {data[0].length >= 2 ? (
        <TimeSeriesChart series={SERIES} data={data} height={220} testId="sockets-chart" yLabel="sockets" />
      ) : (
        <div className="chart-empty" data-testid="sockets-chart" style={{ height: 220 + 34 }}>
          {loaded ? 'Not enough socket samples yet.' : 'loading…'}
        </div>
      )}
      {peakTop && (
        <p className="muted small">
          "top remote" follows the busiest remote endpoint in each census; peak{' '}
          <span className="mono">
            {peakTop.address}:{peakTop.port}
          </span>{' '}
          with {fmtInt(peakTop.count)} sockets.
        </p>
      )}
    </section>
  );
});
