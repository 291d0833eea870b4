// The fleet: counts per state, filter and search, every sandbox trouble first (a windowed
// list, so 1,000 rows stay smooth), and phase durations across the fleet.

import { useMemo, useState, type MouseEvent } from 'react';
import { STATES_TROUBLE_FIRST, isSandboxState, stateRank, type SandboxSummary } from '../api';
import { ConditionChips } from '../components/ConditionChips';
import { PhaseDurations } from '../components/PhaseDurations';
import { StateBadge } from '../components/StateBadge';
import { VirtualList } from '../components/VirtualList';
import { fleet, useFleet } from '../fleet';
import { since } from '../format';
import { useNow } from '../hooks';
import { Link, navigate, sandboxHref } from '../router';

const ROW_HEIGHT = 58;

function initialParam(name: string): string {
  return new URLSearchParams(location.search).get(name) ?? '';
}

/** Keep filter and search in the address (replaceState), so a filtered view can be shared. */
function writeParams(state: string, q: string): void {
  const p = new URLSearchParams();
  if (state) p.set('state', state);
  if (q) p.set('q', q);
  const s = p.toString();
  history.replaceState(history.state, '', `${location.pathname}${s ? `?${s}` : ''}`);
}

export function Fleet() {
  const version = useFleet();
  const now = useNow(1000);
  const [stateFilter, setStateFilter] = useState(() => initialParam('state'));
  const [query, setQuery] = useState(() => initialParam('q'));

  const all = useMemo(
    () => [...fleet.map.values()].sort((a, b) => stateRank(a.state) - stateRank(b.state) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)),
    [version],
  );
  const counts = useMemo(() => {
    const c = new Map<string, number>();
    for (const s of all) c.set(s.state, (c.get(s.state) ?? 0) + 1);
    return c;
  }, [all]);
  const list = useMemo(() => {
    const q = query.trim().toLowerCase();
    return all.filter((s) => (!stateFilter || s.state === stateFilter) && (!q || s.id.toLowerCase().includes(q)));
  }, [all, stateFilter, query]);

  const setFilter = (s: string) => {
    setStateFilter(s);
    writeParams(s, query);
  };
  const setSearch = (q: string) => {
    setQuery(q);
    writeParams(stateFilter, q);
  };

  const extraStates = [...counts.keys()].filter((s) => !isSandboxState(s));

  return (
    <main className="page fleet">
      <div className="fleet-head">
        <h1>Sandboxes</h1>
        <span className="muted">{all.length} watched</span>
      </div>
      <div className="state-counts" data-testid="state-counts">
        {[...STATES_TROUBLE_FIRST, ...extraStates].map((s) => {
          const n = counts.get(s) ?? 0;
          return (
            <button
              type="button"
              key={s}
              className={`count count-${s} ${n === 0 ? 'zero' : ''} ${stateFilter === s ? 'active' : ''}`}
              data-testid="state-count"
              data-state={s}
              data-count={n}
              aria-pressed={stateFilter === s}
              title={stateFilter === s ? 'Show all states' : `Show only ${s}`}
              onClick={() => setFilter(stateFilter === s ? '' : s)}
            >
              <span className="count-n">{n}</span>
              <span className="count-label">{s}</span>
            </button>
          );
        })}
      </div>
      {fleet.error && <p className="error">Cannot load the fleet: {fleet.error}</p>}
      <div className="fleet-layout">
        <section className="panel fleet-list">
          <div className="toolbar">
            <select data-testid="state-filter" aria-label="Filter by state" value={stateFilter} onChange={(e) => setFilter(e.target.value)}>
              <option value="">all states ({all.length})</option>
              {[...STATES_TROUBLE_FIRST, ...extraStates].map((s) => (
                <option key={s} value={s}>
                  {s} ({counts.get(s) ?? 0})
                </option>
              ))}
            </select>
            <input
              type="search"
              data-testid="search"
              placeholder="Search by id"
              aria-label="Search by sandbox id"
              value={query}
              onChange={(e) => setSearch(e.target.value)}
            />
            <span className="muted small" data-testid="shown-count">
              {list.length === all.length ? `${all.length} sandboxes` : `${list.length} of ${all.length}`}
            </span>
          </div>
          <div className="srow srow-header" aria-hidden="true">
            <span>sandbox</span>
            <span>state</span>
            <span>in state</span>
            <span>last phase</span>
            <span>conditions</span>
          </div>
          {list.length > 0 ? (
            <VirtualList
              items={list}
              rowHeight={ROW_HEIGHT}
              height={`min(${list.length * ROW_HEIGHT}px, calc(100vh - 250px))`}
              getKey={(s) => s.id}
              renderRow={(s) => <Row s={s} now={now} />}
              testId="sandbox-list"
              className="sandbox-list"
            />
          ) : (
            <p className="empty muted" data-testid="empty">
              {!fleet.loaded ? 'loading…' : all.length === 0 ? 'No sandboxes registered yet.' : 'No sandbox matches this filter.'}
            </p>
          )}
        </section>
        <PhaseDurations />
      </div>
    </main>
  );
}

function Row({ s, now }: { s: SandboxSummary; now: number }) {
  const href = sandboxHref(s.id);
  const open = (e: MouseEvent<HTMLDivElement>) => {
    if ((e.target as HTMLElement).closest('a')) return;
    if (window.getSelection()?.toString()) return; // selecting text, not opening
    navigate(href);
  };
  return (
    // biome-ignore lint/a11y/useKeyWithClickEvents lint/a11y/noStaticElementInteractions: a mouse shortcut; the row's link is the keyboard's way in
    <div className={`srow srow-${s.state}`} data-testid="sandbox-row" data-id={s.id} data-state={s.state} onClick={open}>
      <Link to={href} className="sid" title={s.id}>
        {s.id}
      </Link>
      <span>
        <StateBadge state={s.state} />
      </span>
      <span className="for" title={`since ${new Date(s.since).toLocaleString()}`} data-testid="time-in-state">
        {since(s.since, now)}
        {!s.connected && s.state !== 'registered' && <span className="muted small"> · probe off</span>}
      </span>
      <span className="lastphase" title={s.lastPhase ?? ''} data-testid="last-phase">
        {s.lastPhase ?? '—'}
      </span>
      <span className="conds">
        <ConditionChips conditions={s.conditions} />
      </span>
      <span className="reason" data-testid="reason" title={s.reason}>
        {s.reason}
      </span>
    </div>
  );
}
