// What deploy/ ships for Prometheus and Grafana holds against the collector it is for: the
// alert rules pass promtool's check and their unit tests, and every metric the rules and the
// Grafana dashboard query is one a real collector exports (scraped from one with sandboxes
// in several states and every integration on, the readiness thread too).

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildFleet, fakeProbes } from './support/fleet.js';
import { inProcessCollectors } from './support/collector.js';
import { READINESS_WORKER, bundleWorker } from './support/workers.js';

const deploy = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../deploy');
const collectors = inProcessCollectors('vd-deploy-');
const probe = fakeProbes();
let readinessWorker: { url: URL; remove: () => void };

beforeAll(async () => {
  readinessWorker = await bundleWorker(READINESS_WORKER);
}, 60_000);
afterAll(() => readinessWorker?.remove());

function promtool(...args: string[]): { status: number | null; out: string } {
  const r = spawnSync('promtool', args, { cwd: path.join(deploy, 'prometheus'), encoding: 'utf8' });
  if (r.error) throw new Error(`promtool: ${r.error.message} (Debian's prometheus package; scripts/install-system-deps.sh)`);
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'offset',
  'and',
  'or',
  'unless',
  'inf',
  'nan',
]);

/** The metric names a PromQL expression reads: not functions, label names, strings, ranges, variables. */
function metricNames(expr: string): string[] {
  const lv = /label_values\(\s*([a-zA-Z_:][\w:]*)/.exec(expr);
  if (lv) return [lv[1]!];
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '')
    .replace(/\$\{?\w+\}?/g, '');
  const names = new Set<string>();
  for (const m of bare.matchAll(/([a-zA-Z_:][\w:]*)(\s*\()?/g)) {
    if (m[2] || KEYWORDS.has(m[1]!.toLowerCase()) || /^\d/.test(m[1]!)) continue;
    names.add(m[1]!);
  }
  return [...names];
}

/** Every query in a Grafana dashboard: panel targets and query variables. */
function dashboardQueries(d: { panels: { title: string; targets?: { expr: string }[] }[]; templating: { list: { query?: unknown }[] } }) {
  const q: { where: string; expr: string }[] = [];
  for (const p of d.panels) for (const t of p.targets ?? []) q.push({ where: p.title, expr: t.expr });
  for (const v of d.templating.list) {
    const query = typeof v.query === 'object' && v.query !== null ? (v.query as { query: string }).query : undefined;
    if (query) q.push({ where: 'variable', expr: query });
  }
  return q;
}

/** A loopback port nothing listens on (bound, then closed). */
async function deadPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

describe('deploy/prometheus and deploy/grafana', { timeout: 60_000 }, () => {
  it('the alert rules pass promtool check rules and promtool test rules', () => {
    const check = promtool('check', 'rules', 'alerts.yml');
    expect(check.out).toContain('SUCCESS');
    expect(check.status).toBe(0);
    const test = promtool('test', 'rules', 'alerts.test.yml');
    expect(test.out).toContain('SUCCESS');
    expect(test.status).toBe(0);
  });

  it('the metric-name parser finds names and nothing else', () => {
    expect(
      metricNames('histogram_quantile(0.95, sum by (le, phase) (rate(a_bucket{x="y",instance=~"$instance"}[$__rate_interval])))'),
    ).toEqual(['a_bucket']);
    expect(metricNames('sum by (instance) (increase(a_total[10m])) + sum(b) > 0 or c == 1')).toEqual(['a_total', 'b', 'c']);
    expect(metricNames('label_values(vsockdiag_build_info, instance)')).toEqual(['vsockdiag_build_info']);
  });

  it('every metric the dashboard and the alerts query is one the collector exports', async () => {
    const port = await deadPort();
    const { url, collector } = await collectors.start({
      metricsPerSandbox: true,
      otlpEndpoint: `http://127.0.0.1:${port}`,
      webhooks: [`http://127.0.0.1:${port}/hook`],
      readinessHttp: '127.0.0.1:0',
      readinessWorkerUrl: readinessWorker.url,
    });
    await buildFleet(collector, collectors.dir, probe);
    const text = await (await fetch(`${url}/metrics`)).text();
    const exported = new Set([...text.matchAll(/^([a-zA-Z_:][\w:]*)[{ ]/gm)].map((m) => m[1]!));

    const dashboard = JSON.parse(fs.readFileSync(path.join(deploy, 'grafana/vsockdiag.json'), 'utf8'));
    const queries = dashboardQueries(dashboard);
    expect(queries.length).toBeGreaterThan(20);
    const rules = fs.readFileSync(path.join(deploy, 'prometheus/alerts.yml'), 'utf8');
    for (const m of rules.matchAll(/^\s+expr: (?:>-\n)?([\s\S]*?)\n\s+(?:for|labels):/gm))
      queries.push({ where: 'alerts.yml', expr: m[1]! });
    // Every rule's expression was found (the pattern above missed none).
    expect(queries.filter((q) => q.where === 'alerts.yml').length).toBe(rules.match(/^\s+- alert: /gm)!.length);

    const missing: string[] = [];
    for (const q of queries) {
      const names = metricNames(q.expr);
      expect(names.length, `${q.where}: ${q.expr}`).toBeGreaterThan(0);
      for (const n of names) if (!exported.has(n)) missing.push(`${q.where}: ${n}`);
    }
    expect(missing).toEqual([]);
  });
});
