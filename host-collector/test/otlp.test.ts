// --otlp-endpoint against an in-test OTLP/HTTP receiver that decodes what it gets (the JSON
// encoding): each generation is a trace with a `boot` root span and a child span per phase;
// a new generation links to the previous one; stuck verdicts and dumps are span events with
// error status; state changes are log records in the boot's trace. An endpoint that never
// answers slows nothing, and what does not fit the bounded queue is counted as dropped.

import http from 'node:http';
import type net from 'node:net';
import { initialStatus } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';
import { helloMessage } from '../../test/support/hello.js';
import { waitFor } from '../../test/support/wait.js';
import { buildFleet, fakeProbes } from './support/fleet.js';
import { inProcessCollectors } from './support/collector.js';
import { serversClosedAfterEach } from './support/servers.js';

const collectors = inProcessCollectors('vd-otlp-');
const probe = fakeProbes();
const servers = serversClosedAfterEach();

type AnyValue = { stringValue?: string; intValue?: number | string; boolValue?: boolean; arrayValue?: { values: AnyValue[] } };
type KeyValue = { key: string; value: AnyValue };
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: KeyValue[];
  events: { name: string; attributes: KeyValue[] }[];
  links: { traceId: string; spanId: string; attributes: KeyValue[] }[];
  status: { code?: number; message?: string };
}
interface OtlpLog {
  timeUnixNano: string;
  severityNumber: number;
  severityText: string;
  body: AnyValue;
  attributes: KeyValue[];
  traceId?: string;
  spanId?: string;
}

const attr = (kvs: KeyValue[], key: string) => {
  const v = kvs.find((a) => a.key === key)?.value;
  return v?.stringValue ?? (v?.intValue !== undefined ? Number(v.intValue) : v?.boolValue);
};
const ERROR = 2;

/** Decodes OTLP/HTTP JSON export requests into spans and log records. `hang`: never answers. */
async function otlpReceiver(hang = false) {
  const spans: OtlpSpan[] = [];
  const logs: OtlpLog[] = [];
  const types = new Set<string>();
  let requests = 0;
  const s = http.createServer((req, res) => {
    requests++;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (hang) return;
      types.add(String(req.headers['content-type']));
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (req.url === '/v1/traces') {
        for (const rs of body.resourceSpans) {
          expect(attr(rs.resource.attributes, 'service.name')).toBe('vsockdiag-collector');
          for (const ss of rs.scopeSpans) spans.push(...ss.spans);
        }
      } else if (req.url === '/v1/logs') {
        for (const rl of body.resourceLogs) for (const sl of rl.scopeLogs) logs.push(...sl.logRecords);
      } else return void res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(s.address() as net.AddressInfo).port}`, spans, logs, types, requests: () => requests };
}

const rootOf = (spans: OtlpSpan[], id: string, generation = 1) =>
  spans.find(
    (s) =>
      s.name === 'boot' && attr(s.attributes, 'vsockdiag.sandbox.id') === id && attr(s.attributes, 'vsockdiag.generation') === generation,
  );

describe('OTLP export', { timeout: 60_000 }, () => {
  it('each generation is a trace: boot, phases, links, stuck and dump events, logs', async () => {
    const r = await otlpReceiver();
    const { collector } = await collectors.start({ otlpEndpoint: r.url, exportTuning: { otlpFlushMs: 50, stuckWaitMs: 20_000 } });
    await buildFleet(collector, collectors.dir, probe, { dumps: true });

    // A healthy boot: root span, two phase children in its trace, ended at READY.
    const boot = await waitFor('the healthy boot span', () => rootOf(r.spans, 'healthy'));
    expect(boot.parentSpanId ?? '').toBe('');
    expect(attr(boot.attributes, 'vsockdiag.boot_id')).toBe(helloMessage().bootId);
    expect(attr(boot.attributes, 'vsockdiag.state')).toBe('ready');
    expect(boot.status.code ?? 0).not.toBe(ERROR);
    expect(boot.events.map((e) => e.name)).toContain('ready');
    const phases = r.spans.filter((s) => s.parentSpanId === boot.spanId);
    expect(phases.map((p) => p.name).sort()).toEqual(['phase api', 'phase cgroups']);
    for (const p of phases) expect(p.traceId).toBe(boot.traceId);
    const cg = phases.find((p) => p.name === 'phase cgroups')!;
    // 1100 → 1300 guest ms: 200 ms.
    expect(Number((BigInt(cg.endTimeUnixNano) - BigInt(cg.startTimeUnixNano)) / 1_000_000n)).toBe(200);

    // Stuck: the event with error status, and the automatic dump on the same span.
    const hung = await waitFor('the stuck boot span, with its dump', () => {
      const s = rootOf(r.spans, 'hung');
      return s?.events.some((e) => e.name === 'dump') ? s : undefined;
    });
    expect(hung.status.code).toBe(ERROR);
    const stuck = hung.events.find((e) => e.name === 'stuck')!;
    expect(String(attr(stuck.attributes, 'vsockdiag.reason'))).toMatch(/start deadline/);
    const dump = hung.events.find((e) => e.name === 'dump')!;
    expect(attr(dump.attributes, 'vsockdiag.dump.trigger')).toBe('auto');
    expect(typeof attr(dump.attributes, 'vsockdiag.dump.id')).toBe('number');

    const crashed = await waitFor('the exited boot span', () => rootOf(r.spans, 'crashed'));
    expect(crashed.status.code).toBe(ERROR);

    // A reconnect in the same boot is a new session of the same life: an event on its
    // trace, not a new trace.
    const sb = collector.registry.get('healthy')!;
    const rejoined = await probe(sb.socketPath, initialStatus(49983));
    await waitFor('session 2', () => sb.intake.sessionNumber === 2);
    rejoined.close();
    // A new boot is a new generation: its trace links to the first one's boot span.
    const again = await probe(sb.socketPath, initialStatus(49983), 2000, { bootId: 'b0d5e1d0-0000-4000-8000-000000000002' });
    await waitFor('generation 2', () => sb.generation === 2);
    again.close();
    const second = await waitFor('the second boot span', () => rootOf(r.spans, 'healthy', 2));
    expect(second.traceId).not.toBe(boot.traceId);
    expect(second.links).toHaveLength(1);
    expect(second.links[0]).toMatchObject({ traceId: boot.traceId, spanId: boot.spanId });
    expect(attr(second.attributes, 'vsockdiag.generation.cause')).toBe('boot');
    const first = r.spans.filter((s) => s.name === 'boot' && attr(s.attributes, 'vsockdiag.sandbox.id') === 'healthy');
    expect(first.map((s) => attr(s.attributes, 'vsockdiag.generation'))).toEqual([1, 2]);

    // State changes as log records, in the boot's trace.
    const stuckLog = await waitFor('the stuck log record', () =>
      r.logs.find((l) => attr(l.attributes, 'vsockdiag.sandbox.id') === 'hung' && attr(l.attributes, 'vsockdiag.state') === 'stuck'),
    );
    expect(stuckLog.severityText).toBe('ERROR');
    expect(stuckLog.severityNumber).toBe(17);
    expect(stuckLog.body.stringValue).toMatch(/^hung: registered → stuck: /);
    expect(stuckLog.traceId).toBe(hung.traceId);
    const states = r.logs
      .filter((l) => attr(l.attributes, 'vsockdiag.sandbox.id') === 'healthy')
      .map((l) => attr(l.attributes, 'vsockdiag.state'));
    expect(states).toEqual(expect.arrayContaining(['starting', 'ready', 'booting', 'silent']));
    expect([...r.types]).toEqual(['application/json']);
  });

  it('an endpoint that never answers slows nothing; what overflows the queue is counted', async () => {
    const r = await otlpReceiver(true);
    const { url, collector } = await collectors.start({ otlpEndpoint: r.url, exportTuning: { otlpFlushMs: 10, otlpQueueBound: 1 } });
    const started = Date.now();
    await buildFleet(collector, collectors.dir, probe);
    await waitFor('an export attempt', () => r.requests() > 0);
    // Ingest went on while the exports hang: the fleet is all there, the API answers.
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(((await (await fetch(`${url}/v1/sandboxes/healthy`)).json()) as { state: string }).state).toBe('ready');
    const text = await (await fetch(`${url}/metrics`)).text();
    // One record in flight (hanging), one waiting, and the fleet's other state changes dropped.
    const dropped = Number(/^vsockdiag_otlp_dropped_total\{signal="logs"\} (\S+)$/m.exec(text)?.[1]);
    expect(dropped).toBeGreaterThanOrEqual(3);
  });
});
