// The last ~200 lines the probe captured from the target (log.lines events), as text.
// Follows the bottom while the reader is there; stays put when they scrolled up.

import { memo, useLayoutEffect, useMemo, useRef } from 'react';
import type { SandboxEvent } from '../api';
import { clock } from '../format';

const TAIL = 200;

interface Line {
  key: string;
  text: string;
  stream: string;
  at: string;
  dropped?: number;
}

/** Memoised: the page re-renders every second for its clocks; this only when its data changes. */
export const LogTail = memo(function LogTail({ events, loaded }: { events: SandboxEvent[]; loaded: boolean }) {
  const lines = useMemo(() => {
    const out: Line[] = [];
    // Walk back from the newest batch until the tail is full.
    for (let i = events.length - 1; i >= 0 && out.length < TAIL; i--) {
      const e = events[i]!;
      const stream = typeof e.data.stream === 'string' ? e.data.stream : '';
      const batch = Array.isArray(e.data.lines) ? (e.data.lines as unknown[]) : [];
      const dropped = typeof e.data.dropped === 'number' && e.data.dropped > 0 ? e.data.dropped : 0;
      if (dropped)
        out.push({
          key: `${e.id}-d`,
          text: `… ${dropped} line${dropped === 1 ? '' : 's'} dropped by the probe`,
          stream: 'note',
          at: e.at,
          dropped,
        });
      for (let j = batch.length - 1; j >= 0 && out.length < TAIL; j--) {
        out.push({ key: `${e.id}-${j}`, text: String(batch[j]), stream, at: e.at });
      }
    }
    return out.reverse();
  }, [events]);

  const box = useRef<HTMLDivElement>(null);
  const atBottom = useRef(true);
  useLayoutEffect(() => {
    const el = box.current;
    if (el && atBottom.current) el.scrollTop = el.scrollHeight;
  }, [lines]);

  return (
    <section className="panel" data-testid="log-panel">
      <h2>
        Log tail <span className="muted small">{lines.length ? `last ${lines.length} lines` : ''}</span>
      </h2>
      <div
        ref={box}
        className="log-tail"
        data-testid="log-tail"
        onScroll={(e) => {
          const el = e.currentTarget;
          atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
        }}
      >
        {lines.length === 0 ? (
          <div className="muted">{loaded ? 'No output captured from the target (wrap mode, a log file or the journal).' : 'loading…'}</div>
        ) : (
          lines.map((l) => (
            <div key={l.key} className={`log-line log-${l.stream}`} data-testid="log-line" title={`${clock(l.at)} ${l.stream}`}>
              {l.text}
            </div>
          ))
        )}
      </div>
    </section>
  );
});
