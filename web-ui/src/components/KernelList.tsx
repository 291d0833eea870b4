// Kernel messages about the guest's processes (OOM kills, hung tasks, segfaults), as text.

import { memo } from 'react';
import type { KernelMessage } from '../api';
import { clock } from '../format';

/** Memoised: the page re-renders every second for its clocks; this only when its data changes. */
export const KernelList = memo(function KernelList({ messages }: { messages: KernelMessage[] }) {
  const list = [...messages].sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
  return (
    <section className="panel" data-testid="kernel">
      <h2>Kernel messages</h2>
      {list.length === 0 ? (
        <p className="muted">No OOM kill, hung task or segfault reported by the guest kernel.</p>
      ) : (
        <ul className="kernel-list">
          {list.map((k, i) => (
            <li key={`${k.at}-${i}`} data-testid="kernel-message" data-what={k.what}>
              <span className="mono muted">{clock(k.at)}</span> <span className={`chip chip-severe`}>{k.what}</span>{' '}
              {k.process && (
                <span className="mono">
                  {k.process}
                  {k.pid ? ` (pid ${k.pid})` : ''}
                </span>
              )}
              <div className="kernel-msg mono">{k.message}</div>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
});
