// /metrics as Prometheus sees it: promtool's lint passes on a real scrape of a collector
// with sandboxes in several states; the state gauge shows every state of the catalogue;
// per-sandbox series only with the flag; counters are counters, monotonic across an
// unregister; histograms fed by the fleet's events.

import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { STATES } from '../src/catalogue.js';
import { droppedLogRecords } from '../src/collector/logger.js';
import { buildFleet, fakeProbes } from './support/fleet.js';
import { inProcessCollectors } from './support/collector.js';

const collectors = inProcessCollectors('vd-metrics-');
const probe = fakeProbes();

async function scrape(url: string): Promise<{ type: string | null; text: string }> {
  const r = await fetch(`${url}/metrics`);
  return { type: r.headers.get('content-type'), text: await r.text() };
}

/** `name{labels} value` lines of one metric, as label text → value. */
function series(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name) out.set(m[2] ?? '', Number(m[3]));
  }
  return out;
}

const typeOf = (text: string, name: string) => new RegExp(`^# TYPE ${name} (\\w+)$`, 'm').exec(text)?.[1];

describe('/metrics', { timeout: 60_000 }, () => {
  it('passes promtool check metrics, with every state counted and real counters', async () => {
    const { url, collector } = await collectors.start();
    await buildFleet(collector, collectors.dir, probe);
    const { type, text } = await scrape(url);
    expect(type).toMatch(/^text\/plain/);

    const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect(lint.error).toBeUndefined();
    expect(`${lint.stdout}${lint.stderr}`.trim()).toBe('');
    expect(lint.status).toBe(0);

    const counts = series(text, 'vsockdiag_sandboxes');
    expect([...counts.keys()].sort()).toEqual(STATES.map((s) => `{state="${s}"}`).sort());
    for (const s of ['registered', 'starting', 'ready', 'stuck', 'exited', 'silent']) expect(counts.get(`{state="${s}"}`)).toBe(1);
    expect(counts.get('{state="booting"}')).toBe(0);
    // No per-sandbox series by default.
    expect(text).not.toMatch(/sandbox="/);

    for (const name of [
      'events_received',
      'sessions',
      'protocol_errors',
      'gaps',
      'connections_refused',
      'state_transitions',
      'dumps',
      'log_records_dropped',
    ]) {
      expect(typeOf(text, `vsockdiag_${name}_total`)).toBe('counter');
    }
    // Only counters end in _total.
    for (const m of text.matchAll(/^# TYPE (\S+) (\w+)$/gm)) if (m[1]!.endsWith('_total')) expect(m[2]).toBe('counter');
    expect(series(text, 'vsockdiag_sessions_total').get('')).toBe(5);
    const drops = series(text, 'vsockdiag_log_records_dropped_total');
    expect(drops.get('{reason="reader_behind"}')).toBe(droppedLogRecords().reader_behind);
    expect(drops.get('{reason="sandbox_budget"}')).toBe(droppedLogRecords().sandbox_budget);

    for (const h of ['time_to_ready', 'phase_duration', 'verdict_lag', 'dump_duration'])
      expect(typeOf(text, `vsockdiag_${h}_seconds`)).toBe('histogram');
    expect(series(text, 'vsockdiag_time_to_ready_seconds_count').get('')).toBe(1);
    // cgroups 1100 → api 1300 → READY=1 1600 (guest ms).
    expect(series(text, 'vsockdiag_phase_duration_seconds_sum').get('{phase="cgroups"}')).toBeCloseTo(0.2, 5);
    expect(series(text, 'vsockdiag_phase_duration_seconds_sum').get('{phase="api"}')).toBeCloseTo(0.3, 5);
    expect(series(text, 'vsockdiag_verdict_lag_seconds_count').get('{state="stuck"}')).toBe(1);
    // The stuck sandbox's automatic dumps failed (the fake probe cannot dump): timed all the same.
    expect(series(text, 'vsockdiag_dump_duration_seconds_count').get('{mode="goroutines",outcome="failed"}')).toBeGreaterThanOrEqual(1);

    expect(series(text, 'vsockdiag_build_info').get(`{version="0.1.0",nodejs="${process.version}"}`)).toBe(1);
    expect(typeOf(text, 'process_cpu_user_seconds_total')).toBe('counter');
    expect(typeOf(text, 'nodejs_eventloop_lag_seconds')).toBe('gauge');
  });

  it('counters do not go down when a sandbox is unregistered', async () => {
    const { url, collector } = await collectors.start();
    await buildFleet(collector, collectors.dir, probe);
    const before = series((await scrape(url)).text, 'vsockdiag_events_received_total').get('')!;
    expect(before).toBeGreaterThan(0);
    await collector.registry.unregister('healthy');
    expect(series((await scrape(url)).text, 'vsockdiag_events_received_total').get('')).toBe(before);
  });

  it('per-sandbox series, 0/1 for every state, only with metricsPerSandbox', async () => {
    const { url, collector } = await collectors.start({ metricsPerSandbox: true });
    await buildFleet(collector, collectors.dir, probe);
    const { text } = await scrape(url);
    const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect(`${lint.stdout}${lint.stderr}`.trim()).toBe('');
    const st = series(text, 'vsockdiag_sandbox_state');
    for (const s of STATES) expect(st.get(`{sandbox="hung",state="${s}"}`)).toBe(s === 'stuck' ? 1 : 0);
    expect(series(text, 'vsockdiag_probe_connected').get('{sandbox="healthy"}')).toBe(1);
    expect(series(text, 'vsockdiag_probe_connected').get('{sandbox="quiet"}')).toBe(0);
  });
});
