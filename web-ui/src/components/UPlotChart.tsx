// uPlot in React: the chart is made when the options change and fed new data in place,
// and follows its container's width. Labels given to uPlot must be static strings: it
// writes them into its legend (as text, but keep guest text out of charts anyway).

import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export function UPlotChart({
  options,
  data,
  className,
  testId,
}: {
  /** Without width: the chart takes its container's. Keep this object stable (useMemo). */
  options: Omit<uPlot.Options, 'width'>;
  data: uPlot.AlignedData;
  className?: string;
  testId?: string;
}) {
  const ref = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const dataRef = useRef(data);
  dataRef.current = data;

  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    const width = () => Math.max(120, Math.floor(el.clientWidth));
    const u = new uPlot({ ...options, width: width() } as uPlot.Options, dataRef.current, el);
    plot.current = u;
    let w = width();
    const ro = new ResizeObserver(() => {
      const nw = width();
      if (nw !== w) {
        w = nw;
        u.setSize({ width: nw, height: options.height });
      }
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      u.destroy();
      plot.current = null;
    };
  }, [options]);

  useEffect(() => {
    const u = plot.current;
    if (u && u.data !== data) u.setData(data);
  }, [data]);

  return <div ref={ref} className={`uplot-wrap ${className ?? ''}`} data-testid={testId} />;
}
