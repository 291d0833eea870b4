// The target process, its listener (with the health check) and the guest, as cards.

import { useMemo, type ReactNode } from 'react';
import type uPlot from 'uplot';
import type { SandboxDetail } from '../api';
import { clock, fmtInt, fmtKb, fmtMs, since } from '../format';
import { TimeSeriesChart } from './TimeSeriesChart';

function Field({ label, children, testId }: { label: string; children: ReactNode; testId?: string }) {
  return (
    <>
      <dt>{label}</dt>
      <dd data-testid={testId}>{children}</dd>
    </>
  );
}

export function TargetCard({ detail, now }: { detail: SandboxDetail; now: number }) {
  const t = detail.target;
  const threads = useMemo<uPlot.AlignedData>(() => {
    const pts = detail.threads.map((x) => [Date.parse(x.at) / 1000, x.n] as const).sort((a, b) => a[0] - b[0]);
    return [pts.map((p) => p[0]), pts.map((p) => p[1])];
  }, [detail.threads]);
  return (
    <section className="panel card" data-testid="target-card">
      <h3>Target process</h3>
      {!t ? (
        <p className="muted">Not seen yet: the probe has not found the target (envd).</p>
      ) : (
        <>
          <dl className="kv">
            <Field label="process" testId="target-name">
              <span className="mono">{t.name}</span> <span className="muted">pid {t.pid}</span>
            </Field>
            <Field label="status" testId="target-status">
              {t.alive ? (
                <span className="ok">alive</span>
              ) : (
                <span className="bad">
                  gone
                  {t.exitCode !== undefined ? `, exit status ${t.exitCode}` : ''}
                  {t.signal ? `, signal ${t.signal}` : ''}
                </span>
              )}
            </Field>
            <Field label="started">
              {t.startedAt ? (
                <>
                  {clock(t.startedAt)} <span className="muted">({since(t.startedAt, now)} ago)</span>
                </>
              ) : (
                '—'
              )}
            </Field>
            <Field label="threads">{t.threads !== undefined ? fmtInt(t.threads) : '—'}</Field>
            <Field label="memory (RSS)">{fmtKb(t.rssKb)}</Field>
            {t.source && <Field label="found by">{t.source}</Field>}
          </dl>
          {detail.threads.length > 1 && (
            <div className="mini-chart">
              <div className="muted small">threads over time</div>
              <TimeSeriesChart
                series={[{ label: 'threads', color: '#7c3aed', fill: true }]}
                data={threads}
                height={100}
                testId="threads-chart"
                legend={false}
              />
            </div>
          )}
        </>
      )}
    </section>
  );
}

export function ListenerCard({ detail, now }: { detail: SandboxDetail; now: number }) {
  const l = detail.listener;
  const h = detail.health;
  const notAccepting = detail.conditions.some((c) => c.name === 'not-accepting');
  return (
    <section className="panel card" data-testid="listener-card">
      <h3>Listener{l ? ` :${l.port}` : ''}</h3>
      {!l ? (
        <p className="muted">No status from the probe yet.</p>
      ) : (
        <dl className="kv">
          <Field label="bound" testId="listener-bound">
            {l.bound ? (
              <span className="ok">
                yes{l.address ? ` on ${l.address}` : ''}
                {l.since ? <span className="muted"> · {since(l.since, now)} ago</span> : null}
              </span>
            ) : (
              <span className="bad">no, nothing listening on :{l.port}</span>
            )}
          </Field>
          <Field label="owner pid" testId="listener-pid">
            {l.pid ?? '—'}
            {l.pid !== undefined && detail.target && l.pid !== detail.target.pid ? (
              <span className="bad"> (not the target, pid {detail.target.pid})</span>
            ) : null}
          </Field>
          <Field label="accept queue" testId="accept-queue">
            {l.acceptQueue === undefined ? (
              '—'
            ) : (
              <span className={l.acceptQueue > 0 ? (notAccepting ? 'bad' : 'warn') : ''}>
                {fmtInt(l.acceptQueue)} waiting{notAccepting ? ' — not draining' : ''}
              </span>
            )}
          </Field>
        </dl>
      )}
      <h4>Health check</h4>
      {!h ? (
        <p className="muted small">No in-guest health check configured (probe --health-url).</p>
      ) : (
        <dl className="kv" data-testid="health">
          <Field label="url">
            <span className="mono small">{h.url}</span>
          </Field>
          <Field label="result" testId="health-result">
            {h.ok ? (
              <span className="ok">ok{h.status ? ` (HTTP ${h.status})` : ''}</span>
            ) : (
              <span className="bad">
                failing{h.status ? ` (HTTP ${h.status})` : ''}
                {h.error ? `: ${h.error}` : ''}
              </span>
            )}
          </Field>
          <Field label="latency" testId="health-latency">
            {fmtMs(h.latencyMs)}
          </Field>
          <Field label="checked">{h.at ? `${since(h.at, now)} ago` : '—'}</Field>
        </dl>
      )}
    </section>
  );
}

export function GuestCard({ detail, now }: { detail: SandboxDetail; now: number }) {
  const p = detail.probe;
  const s = detail.system;
  const skew = detail.clockSkewMs;
  return (
    <section className="panel card" data-testid="guest-card">
      <h3>Probe and guest</h3>
      <dl className="kv">
        <Field label="probe">
          {p ? (
            <>
              v{p.version} <span className="muted">· connection {p.generation} of this probe process</span>
            </>
          ) : (
            <span className="muted">never connected</span>
          )}
        </Field>
        <Field label="connection">
          {detail.connected ? <span className="ok">connected</span> : <span className="bad">disconnected</span>}
          {detail.connected && detail.connectedAt ? <span className="muted"> · {since(detail.connectedAt, now)}</span> : null}
          {!detail.connected && detail.disconnectedAt ? <span className="muted"> · {since(detail.disconnectedAt, now)} ago</span> : null}
        </Field>
        {p?.listenerSource && (
          <Field label="listener via">
            {p.listenerSource}
            {p.fallbackReason ? <span className="warn"> ({p.fallbackReason})</span> : null}
          </Field>
        )}
        {p && <Field label="pprof">{p.pprof ? 'available' : 'not found'}</Field>}
        <Field label="uptime">{s ? fmtMs(s.uptimeMs) : '—'}</Field>
        <Field label="load">{s ? s.load.map((x) => x.toFixed(2)).join(' ') : '—'}</Field>
        <Field label="memory free">{s ? `${fmtKb(s.memAvailableKb)} of ${fmtKb(s.memTotalKb)}` : '—'}</Field>
        <Field label="clock skew">
          {skew === null || skew === undefined ? '—' : <span className={Math.abs(skew) >= 2000 ? 'bad' : ''}>{fmtMs(skew)}</span>}
        </Field>
        <Field label="vsock">
          <span className="mono small break">{detail.udsPath}</span>
        </Field>
      </dl>
    </section>
  );
}
