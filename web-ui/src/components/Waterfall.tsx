// The boot waterfall: each phase of the current target as a bar from its time to the next
// phase's (the last one runs to now while the sandbox is not ready), with vertical markers
// for generation boundaries (session.open), the listener binding, and state changes to
// stuck / ready / exited. Plain HTML bars: this is a timeline, not a time series.

import { useMemo } from 'react';
import {
  ENDED_STATES,
  OUTCOME_STATES,
  STARTING_UP_STATES,
  isSandboxState,
  type PhaseRecord,
  type SandboxDetail,
  type SandboxEvent,
} from '../api';
import { clock, fmtMs } from '../format';
import type { SandboxEvents } from '../sandboxFeed';

interface Bar {
  key: string;
  label: string;
  status?: string;
  start: number;
  end: number;
  ongoing: boolean;
  milestone: boolean;
  generation: number;
  pre?: boolean;
}

interface Marker {
  key: string;
  t: number;
  label: string;
  cls: string;
  title: string;
  lane?: number;
}

function phaseLabel(p: PhaseRecord): string {
  if (p.name) return p.name;
  if (p.ready) return 'READY=1';
  if (p.stopping) return 'STOPPING=1';
  return p.status ?? '(unnamed)';
}

/** Host time of a phase, sub-millisecond from guest time within the first phase's generation. */
function phaseTimes(phases: PhaseRecord[]): number[] {
  const first = phases[0];
  if (!first) return [];
  const base = Date.parse(first.at);
  return phases.map((p) =>
    p.generation === first.generation && p.tGuest !== null && first.tGuest !== null ? base + (p.tGuest - first.tGuest) : Date.parse(p.at),
  );
}

/** Labels centred on their marker, except at the edges where they would be cut. */
function edgeShift(x: number): string {
  if (x < 0.04) return 'translateX(0)';
  if (x > 0.92) return 'translateX(-100%)';
  return 'translateX(-50%)';
}

/** A tick step of 1, 2 or 5 × 10^k ms giving about `n` ticks over `span`. */
function tickStep(span: number, n = 8): number {
  const raw = span / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

export function Waterfall({ detail, events, now }: { detail: SandboxDetail; events: SandboxEvents; now: number }) {
  const model = useMemo(() => build(detail, events, now), [detail, events, now]);
  if (!model) {
    return (
      <section className="panel" data-testid="waterfall">
        <h2>Boot waterfall</h2>
        <p className="muted">
          {detail.target ? 'The target has not reported any phase yet.' : 'No target process seen yet, so no phases.'}
        </p>
      </section>
    );
  }
  const { bars, markers, origin, span, ticks, lanes } = model;
  const pct = (t: number) => `${((t - origin) / span) * 100}%`;
  return (
    <section className="panel" data-testid="waterfall">
      <h2>
        Boot waterfall{' '}
        <span className="muted small">
          from {clock(origin)}, {fmtMs(span)} shown
        </span>
      </h2>
      <div className="wf">
        <div className="wf-row wf-axis">
          <div className="wf-label" />
          <div className="wf-track">
            {ticks.map((t) => (
              <span key={t} className="wf-tick" style={{ left: pct(origin + t), transform: edgeShift(t / span) }}>
                +{fmtMs(t)}
              </span>
            ))}
          </div>
        </div>
        <div className="wf-row wf-markers-row" style={{ height: 6 + lanes * 16 }}>
          <div className="wf-label muted small">markers</div>
          <div className="wf-track">
            {markers.map((m) => (
              <span
                key={m.key}
                className={`wf-marker-label ${m.cls}`}
                style={{ left: pct(m.t), top: 2 + (m.lane ?? 0) * 16, transform: edgeShift((m.t - origin) / span) }}
                title={m.title}
                data-testid="waterfall-marker"
                data-kind={m.cls}
              >
                {m.label}
              </span>
            ))}
          </div>
        </div>
        <div className="wf-body">
          <div className="wf-lines" aria-hidden="true">
            {ticks.map((t) => (
              <span key={t} className="wf-grid" style={{ left: pct(origin + t) }} />
            ))}
            {markers.map((m) => (
              <span key={m.key} className={`wf-line ${m.cls}`} style={{ left: pct(m.t) }} />
            ))}
          </div>
          {bars.map((b, i) => {
            const prev = bars[i - 1];
            const newGen = prev && !prev.pre && !b.pre && prev.generation !== b.generation;
            const left = ((b.start - origin) / span) * 100;
            const width = ((b.end - b.start) / span) * 100;
            // Duration text: inside a wide bar, else after its end, else (near the right edge) before its start.
            const inside = !b.milestone && width > 14;
            const before = !inside && left + width > 80 && left > 20;
            const durStyle = inside
              ? { left: `${left}%`, marginLeft: 6 }
              : before
                ? { right: `${100 - left}%`, marginRight: 6 }
                : { left: `${left + width}%`, marginLeft: 6 };
            return (
              <div
                key={b.key}
                className={`wf-row wf-bar-row ${b.ongoing ? 'ongoing' : ''} ${b.pre ? 'pre' : ''} ${newGen ? 'new-gen' : ''}`}
                data-testid="waterfall-phase"
                data-name={b.label}
              >
                <div className="wf-label" title={b.status ? `${b.label} — ${b.status}` : b.label}>
                  <span className="wf-name">{b.label}</span>
                  {b.status && b.status !== b.label && <span className="wf-status">{b.status}</span>}
                </div>
                <div className="wf-track">
                  {b.milestone ? (
                    <span className="wf-milestone" style={{ left: `${left}%` }} title={clock(b.start)} />
                  ) : (
                    <span
                      className="wf-bar"
                      style={{ left: `${left}%`, width: `${width}%` }}
                      title={`${clock(b.start)} → ${b.ongoing ? 'now' : clock(b.end)}`}
                    />
                  )}
                  <span className={`wf-dur ${inside ? 'inside' : ''}`} style={durStyle} data-testid="phase-duration">
                    {b.milestone ? `+${fmtMs(b.start - origin)}` : fmtMs(b.end - b.start)}
                    {b.ongoing ? ' so far' : ''}
                  </span>
                </div>
              </div>
            );
          })}
        </div>
      </div>
    </section>
  );
}

function build(detail: SandboxDetail, events: SandboxEvents, now: number) {
  const phases = [...detail.phases].sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  if (!phases.length) return null;
  const times = phaseTimes(phases);
  const first = times[0]!;
  const lastT = times[times.length - 1]!;
  const started = detail.target?.startedAt ? Date.parse(detail.target.startedAt) : NaN;
  // The target's start, when it plausibly precedes the first phase (guest clock, 10 ms ticks).
  const origin = Number.isFinite(started) && started <= first && first - started < 10 * 60_000 ? started : first;

  const state = detail.state;
  const readyAt = detail.readiness?.readyAt ? Date.parse(detail.readiness.readyAt) : NaN;
  const lastPhase = phases[phases.length - 1]!;
  // Start-up is over when the target said READY=1 (or is ready): no bar runs on to now.
  const phasesDone = !!lastPhase.ready || !!lastPhase.stopping || !!detail.readiness?.ready;
  const stillGoing = !phasesDone && STARTING_UP_STATES.has(state);
  let end: number;
  if (phasesDone) end = Math.max(lastT, Number.isFinite(readyAt) ? readyAt : lastT);
  else if (ENDED_STATES.has(state)) end = Math.max(lastT, Date.parse(detail.since));
  else if (stillGoing) end = Math.max(lastT, now);
  else end = lastT;

  const markers: Marker[] = [];
  const mark = (e: SandboxEvent, label: string, cls: string, title: string) => {
    const t = Date.parse(e.at);
    if (Number.isFinite(t)) markers.push({ key: `${e.id}`, t, label, cls, title });
  };
  for (const e of events.sessions) {
    // A session is one connection; a new generation (a boot or a restore) is worth the label.
    const title = `session ${e.session} opened (generation ${e.generation}) at ${clock(e.at)}`;
    mark(e, `g${e.generation}/s${e.session}`, 'm-gen', title);
  }
  for (const e of events.listener) {
    const port = typeof e.data.port === 'number' ? e.data.port : '';
    if (e.kind === 'listener.bound') mark(e, `bound :${port}`, 'm-bound', `listener bound on :${port} at ${clock(e.at)}`);
    else mark(e, `unbound :${port}`, 'm-unbound', `listener gone from :${port} at ${clock(e.at)}`);
  }
  for (const e of events.states) {
    const s = String(e.data.state ?? '');
    if (isSandboxState(s) && OUTCOME_STATES.has(s)) {
      mark(e, s, `m-${s}`, `${s} at ${clock(e.at)}: ${String(e.data.reason ?? '')}`);
    }
  }
  // A stuck verdict after the last phase extends the view so it shows.
  for (const m of markers) if (m.cls === 'm-stuck' && m.t > end && m.t <= now) end = m.t;
  if (end <= origin) end = origin + 1;
  const pad = (end - origin) * 0.04;
  const visible = markers.filter((m) => m.t >= origin - pad && m.t <= end + pad).sort((a, b) => a.t - b.t);
  end += pad;
  const span = end - origin;

  // Marker labels in lanes so close ones do not overlap (~9% of the width per label).
  const laneEnds: number[] = [];
  const laid = visible.map((m) => {
    const x = (m.t - origin) / span;
    let lane = laneEnds.findIndex((e) => e <= x);
    if (lane < 0) {
      lane = laneEnds.length;
      laneEnds.push(0);
    }
    laneEnds[lane] = x + 0.09;
    return { ...m, lane };
  });

  const bars: Bar[] = [];
  if (origin < first) {
    bars.push({
      key: 'pre',
      label: 'process start',
      status: `${detail.target?.name ?? 'target'} started, before its first phase`,
      start: origin,
      end: first,
      ongoing: false,
      milestone: false,
      generation: phases[0]!.generation,
      pre: true,
    });
  }
  phases.forEach((p, i) => {
    const start = times[i]!;
    const isLast = i === phases.length - 1;
    const milestone = !!p.ready || !!p.stopping;
    let stop: number;
    let ongoing = false;
    if (!isLast) stop = times[i + 1]!;
    else if (stillGoing) {
      stop = Math.max(start, now);
      ongoing = true;
    } else if (ENDED_STATES.has(state)) stop = Math.max(start, Date.parse(detail.since));
    else stop = start;
    bars.push({
      key: `${i}`,
      label: phaseLabel(p),
      ...(p.status ? { status: p.status } : {}),
      start,
      end: stop,
      ongoing,
      milestone: milestone || (isLast && stop === start),
      generation: p.generation,
    });
  });

  const step = tickStep(span);
  const ticks: number[] = [];
  for (let t = 0; t <= span; t += step) ticks.push(t);

  return { bars, markers: laid, origin, span, ticks, lanes: Math.max(1, laneEnds.length) };
}
