// A time series chart (uPlot) with static series labels. x in unix seconds.

import { useMemo } from 'react';
import type uPlot from 'uplot';
import { fmtInt, pad } from '../format';
import { UPlotChart } from './UPlotChart';

/** One-line local time labels: HH:MM:SS, or HH:MM when the ticks are minutes apart. */
function timeLabels(_u: uPlot, splits: number[], _axis: number, _space: number, incr: number): string[] {
  return splits.map((s) => {
    const d = new Date(s * 1000);
    const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
    return incr >= 60 ? hm : `${hm}:${pad(d.getSeconds())}`;
  });
}

/** Whole seconds and up: samples are about a second apart at best. */
const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400];

export interface SeriesSpec {
  /** Static text only (never guest-supplied). */
  label: string;
  color: string;
  dash?: number[];
  fill?: boolean;
  width?: number;
}

export function TimeSeriesChart({
  series,
  data,
  height,
  testId,
  yLabel,
  legend = true,
}: {
  series: SeriesSpec[];
  data: uPlot.AlignedData;
  height: number;
  testId?: string;
  yLabel?: string;
  /** uPlot's legend (series labels and the values under the cursor). */
  legend?: boolean;
}) {
  const key = JSON.stringify(series) + height + (yLabel ?? '') + legend;
  // biome-ignore lint/correctness/useExhaustiveDependencies: key stands for every input, compared by value
  const options = useMemo<Omit<uPlot.Options, 'width'>>(
    () => ({
      height,
      legend: { show: legend },
      cursor: { drag: { x: true, y: false } },
      scales: { y: { range: (_u, _min, max) => [0, Math.max(4, max * 1.08)] } },
      axes: [
        { grid: { stroke: '#eef0f3' }, ticks: { stroke: '#d8dce2' }, values: timeLabels, space: 72, incrs: TIME_INCRS },
        {
          grid: { stroke: '#eef0f3' },
          ticks: { stroke: '#d8dce2' },
          size: 56,
          space: height < 150 ? 16 : 30,
          // Counts: integer steps only.
          incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1e6],
          values: (_u, splits) => splits.map((v) => (Math.abs(v - Math.round(v)) < 1e-6 ? fmtInt(Math.round(v)) : '')),
          ...(yLabel ? { label: yLabel, labelSize: 18, labelFont: '11px system-ui, sans-serif' } : {}),
        },
      ],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: s.width ?? 1.75,
          ...(s.dash ? { dash: s.dash } : {}),
          ...(s.fill ? { fill: s.color + '22' } : {}),
          spanGaps: true,
          points: { show: false },
          value: (_u: uPlot, v: number | null) => (v === null ? '—' : fmtInt(v)),
        })),
      ],
    }),
    // Rebuilt only when the (static) description changes, not on every render.
    [key],
  );
  return <UPlotChart options={options} data={data} testId={testId} className="ts-chart" />;
}
