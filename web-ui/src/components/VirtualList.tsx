// A windowed list: fixed row height, a scroll container, and only the visible rows (plus
// some overscan) in the DOM. Enough for thousands of rows without a library.

import { useEffect, useRef, useState, type ReactNode } from 'react';

export function VirtualList<T>({
  items,
  rowHeight,
  height,
  overscan = 8,
  getKey,
  renderRow,
  className,
  testId,
}: {
  items: readonly T[];
  rowHeight: number;
  /** CSS height of the scroll container (e.g. "60vh" or 480). */
  height: number | string;
  overscan?: number;
  getKey: (item: T, index: number) => string;
  renderRow: (item: T, index: number) => ReactNode;
  className?: string;
  testId?: string;
}) {
  const ref = useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const [viewport, setViewport] = useState(600);
  const frame = useRef<number | null>(null);

  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    setViewport(el.clientHeight);
    const ro = new ResizeObserver(() => setViewport(el.clientHeight));
    ro.observe(el);
    return () => {
      ro.disconnect();
      if (frame.current !== null) cancelAnimationFrame(frame.current);
    };
  }, []);

  const onScroll = () => {
    if (frame.current !== null) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = null;
      if (ref.current) setScrollTop(ref.current.scrollTop);
    });
  };

  const total = items.length * rowHeight;
  // The list may have shrunk below the scroll position (a filter): clamp.
  const top = Math.min(scrollTop, Math.max(0, total - viewport));
  const first = Math.max(0, Math.floor(top / rowHeight) - overscan);
  const last = Math.min(items.length, Math.ceil((top + viewport) / rowHeight) + overscan);
  const rows: ReactNode[] = [];
  for (let i = first; i < last; i++) {
    const item = items[i]!;
    rows.push(
      <div key={getKey(item, i)} className="vrow" style={{ top: i * rowHeight, height: rowHeight }}>
        {renderRow(item, i)}
      </div>,
    );
  }
  return (
    // biome-ignore lint/a11y/useSemanticElements: rows are absolutely positioned divs that a ul/li's list styling would fight
    <div ref={ref} className={`vlist ${className ?? ''}`} style={{ height }} onScroll={onScroll} data-testid={testId} role="list">
      <div className="vlist-inner" style={{ height: total }}>
        {rows}
      </div>
    </div>
  );
}
