// vsockdiag: the host CLI. `collector` runs the service; every other command talks to a
// running collector over its HTTP API (--collector / VSOCKDIAG_URL, --token /
// VSOCKDIAG_TOKEN or --token-file / VSOCKDIAG_TOKEN_FILE). Every collector flag also has
// its VSOCKDIAG_* variable (cli/settings.ts).

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import Compile from 'typebox/compile';
import { WebSocket } from 'ws';
import { DUMP_MODES, parseDuration } from '@vsockdiag/proto';
import { LIFECYCLE_EVENT_NAMES, SETTLED_STATES, type SandboxState } from '../catalogue.js';
import { Collector, DEFAULT_COLLECTOR_OPTIONS } from '../collector/collector.js';
import { DEFAULT_CONDITION_SETTINGS } from '../collector/conditions.js';
import { DUMP_ANALYSIS_TIME_LIMIT_MS } from '../collector/dump-analyzer.js';
import { tuneHeap } from '../collector/heap.js';
import { LOG_LEVELS, createLogger, logProcessWarnings } from '../collector/logger.js';
import { DEFAULT_RETENTION } from '../collector/store.js';
import { analyzeDump, summarizeAnalysis } from '../dumps/analyze.js';
import { analysisOf, type detail, type dumpBrief, type dumpDetail } from '../http/present.js';
import type { EventJson } from '../http/schemas.js';
import { StreamServerMessage } from '../http/stream-messages.js';
import { ClientError, CollectorClient } from './client.js';
import { colorState, sinceText, table, type SandboxSummary } from './format.js';
import { bindEnvironment, resolveToken } from './settings.js';
import { parseSize } from './size.js';
import { VERSION } from '../version.js';

// What the API answers, typed by the collector's own presenters (http/present.ts).
type StatusBody = ReturnType<typeof detail>;
type DumpBody = ReturnType<typeof dumpBrief>;
type TailEvent = EventJson;
/** The stream's messages as the collector declares them (http/stream-messages.ts). */
const streamMessage = Compile(StreamServerMessage);

export const EXIT = { ok: 0, error: 1, timeout: 2, notReady: 3 } as const;
const tty = process.stdout.isTTY === true;

function dashboardDir(): string {
  if (process.env.VSOCKDIAG_UI_DIR) return process.env.VSOCKDIAG_UI_DIR;
  // The bundle lives in host-collector/dist/; the built dashboard in web-ui/dist/.
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../web-ui/dist');
}

const int = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer`);
  return n;
};

/** --socket-group: a number, or a name from /etc/group (Node has no getgrnam). */
function groupId(v: string): number {
  if (/^\d+$/.test(v)) return Number(v);
  const line = fs
    .readFileSync('/etc/group', 'utf8')
    .split('\n')
    .find((l) => l.split(':')[0] === v);
  const gid = line ? Number(line.split(':')[2]) : NaN;
  if (!Number.isInteger(gid)) throw new InvalidArgumentError(`no group "${v}" in /etc/group`);
  return gid;
}

/** An http(s) URL (--otlp-endpoint, --webhook, --public-url). */
function httpUrl(v: string): string {
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new InvalidArgumentError(`not a URL: ${v}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new InvalidArgumentError(`must be http:// or https://: ${v}`);
  return v;
}

const mib = (bytes: number) => `${bytes / 1024 ** 2}MiB`;

/** A client of the collector's API, or of its readiness port instead, with the same token. */
function client(cmd: Command, readinessUrl?: string): CollectorClient {
  const o = cmd.optsWithGlobals<{ collector: string }>();
  const token = resolveToken(cmd);
  const at = readinessUrl ? { url: readinessUrl, urlFrom: '--readiness-url / VSOCKDIAG_READINESS_URL' } : { url: o.collector };
  return new CollectorClient({ ...at, ...(token ? { token } : {}) });
}

function print(json: boolean, value: unknown, human: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : human());
}

export function buildProgram(): Command {
  const program = new Command('vsockdiag')
    .description('Out-of-band diagnostics for Firecracker sandboxes whose agent (envd) boots but never answers.')
    .version(VERSION)
    .addOption(new Option('--collector <url>', 'collector API URL').env('VSOCKDIAG_URL').default('http://127.0.0.1:7070'))
    .addOption(new Option('--token <token>', 'API bearer token').env('VSOCKDIAG_TOKEN'))
    .addOption(new Option('--token-file <file>', 'read the API bearer token from this file').env('VSOCKDIAG_TOKEN_FILE'))
    .showHelpAfterError();

  // Each collector flag, whoever adds it, gets its VSOCKDIAG_* variable (cli/settings.ts).
  bindEnvironment(program.command('collector'))
    .description('run the host collector (vsock listeners, state, API, dashboard)')
    .option('--http <addr>', 'HTTP listen address', DEFAULT_COLLECTOR_OPTIONS.http)
    .option(
      '--readiness-http <addr>',
      'also serve GET /v1/sandboxes/:id/readiness here, from a thread of its own (answers never wait behind ingest)',
    )
    .option('--data <dir>', 'data directory (SQLite)', DEFAULT_COLLECTOR_OPTIONS.dataDir)
    .option(
      '--vsock-port <n>',
      'vsock port the probe connects to (listen on <uds>_<n>)',
      int('--vsock-port'),
      DEFAULT_COLLECTOR_OPTIONS.vsockPort,
    )
    .option(
      '--probe-port <n>',
      "probe's command port (host-initiated connections)",
      int('--probe-port'),
      DEFAULT_COLLECTOR_OPTIONS.probePort,
    )
    .option('--stall-after <d>', 'stuck when no new phase for this long', parseDuration, DEFAULT_COLLECTOR_OPTIONS.stallAfterMs)
    .option(
      '--start-deadline <d>',
      'stuck when not ready this long after the target started',
      parseDuration,
      DEFAULT_COLLECTOR_OPTIONS.startDeadlineMs,
    )
    .addOption(
      new Option(
        '--on-stuck <what>',
        "dumps taken on entering stuck: 'threads' (harmless) or 'quit' (also SIGQUIT's Go dump; envd restarts)",
      )
        .choices(['threads', 'quit'])
        .default('threads'),
    )
    .option(
      '--storm-threshold <n>',
      'raise socket-storm when one remote endpoint holds this many sockets',
      int('--storm-threshold'),
      DEFAULT_CONDITION_SETTINGS.stormThreshold,
    )
    .option('--discover <glob>', 'register every Firecracker vsock socket matching this glob')
    .option('--token <token>', 'require this bearer token on the API (needed for a non-loopback --http)')
    .option('--token-file <file>', 'read that token from this file (not world-readable; a trailing newline is dropped)')
    .addOption(new Option('--log-level <level>', 'least level logged (NDJSON on stderr)').choices(LOG_LEVELS).default('info'))
    .option('--uds-root <dir>', 'accept only udsPaths inside this folder (repeatable)', (v: string, all: string[] = []) => [...all, v])
    .option('--socket-group <group>', "give the vsock sockets this group, mode 0660 (a jailed Firecracker's group); default 0600", groupId)
    .option(
      '--dump-analysis-limit <d>',
      'how long parsing one dump (or a diff) may take; a dump over it is kept unparsed',
      parseDuration,
      DUMP_ANALYSIS_TIME_LIMIT_MS,
    )
    // Event history bounds (the oldest events are pruned first).
    .addOption(
      new Option('--retain-per-sandbox <size>', 'event history kept per sandbox')
        .argParser(parseSize)
        .default(DEFAULT_RETENTION.sandboxBytes, mib(DEFAULT_RETENTION.sandboxBytes)),
    )
    .addOption(
      new Option('--retain-total <size>', 'event history kept across all sandboxes (the largest are cut first)')
        .argParser(parseSize)
        .default(DEFAULT_RETENTION.totalBytes, mib(DEFAULT_RETENTION.totalBytes)),
    )
    // Integrations (README: Prometheus, OTLP, webhooks).
    .option('--metrics-per-sandbox', 'also serve per-sandbox series in /metrics (state, conditions, probe connection)')
    .option('--otlp-endpoint <url>', 'export traces and logs over OTLP/HTTP to this base URL (/v1/traces, /v1/logs)', httpUrl)
    .option(
      '--webhook <url>',
      'POST a JSON notice here on entering stuck, exited or silent (repeatable)',
      (v: string, all: string[] = []) => [...all, httpUrl(v)],
    )
    .option('--webhook-secret-file <file>', 'sign webhooks with the key in this file (X-Vsockdiag-Signature-256)')
    .option('--public-url <url>', 'the collector as others reach it, for links in webhooks (default: the listen URL)', httpUrl)
    .action(async (o, cmd: Command) => {
      const log = createLogger(o.logLevel);
      logProcessWarnings(log);
      // --token and --token-file are also the client commands' options on the program:
      // commander hands them to the program, so the lookup goes up to it.
      let token: string | undefined;
      try {
        token = resolveToken(cmd);
      } catch (err) {
        log.fatal((err as Error).message);
        process.exitCode = EXIT.error;
        return;
      }
      tuneHeap();
      const collector = new Collector(
        {
          http: o.http,
          ...(o.readinessHttp ? { readinessHttp: o.readinessHttp } : {}),
          dataDir: o.data,
          vsockPort: o.vsockPort,
          probePort: o.probePort,
          stallAfterMs: o.stallAfter,
          startDeadlineMs: o.startDeadline,
          stormThreshold: o.stormThreshold,
          onStuck: o.onStuck,
          dumpAnalysisLimitMs: o.dumpAnalysisLimit,
          retention: { sandboxBytes: o.retainPerSandbox, totalBytes: o.retainTotal },
          dashboardDir: dashboardDir(),
          ...(o.discover ? { discover: o.discover } : {}),
          ...(token ? { token } : {}),
          ...(o.udsRoot ? { udsRoots: o.udsRoot } : {}),
          ...(o.socketGroup !== undefined ? { socketGid: o.socketGroup } : {}),
          ...(o.metricsPerSandbox ? { metricsPerSandbox: true } : {}),
          ...(o.otlpEndpoint ? { otlpEndpoint: o.otlpEndpoint } : {}),
          ...(o.webhook ? { webhooks: o.webhook } : {}),
          // The key is the file's content, less a trailing newline an editor leaves.
          ...(o.webhookSecretFile ? { webhookSecret: fs.readFileSync(o.webhookSecretFile, 'utf8').replace(/\r?\n$/, '') } : {}),
          ...(o.publicUrl ? { publicUrl: o.publicUrl } : {}),
        },
        log,
      );
      let url: string;
      try {
        url = await collector.start();
      } catch (err) {
        log.fatal({ err }, 'collector did not start');
        process.exit(EXIT.error);
      }
      let stopping = false;
      const stop = async () => {
        if (stopping) return;
        stopping = true;
        await collector.stop();
        process.exit(0);
      };
      process.on('SIGINT', () => void stop());
      process.on('SIGTERM', () => void stop());
      // For a person at a terminal; stderr carries log records only ("collector ready"). Last,
      // so that whoever waits for it may stop the collector with a signal at once.
      const readiness = collector.readinessUrl ? `; readiness: ${collector.readinessUrl}` : '';
      process.stdout.write(`vsockdiag collector listening on ${url} (dashboard: ${url}/${readiness})\n`);
    });

  program
    .command('register <id>')
    .description('watch a sandbox: <id> and its Firecracker vsock uds_path')
    .requiredOption('--uds <path>', "the VM's vsock uds_path (as given to Firecracker's PUT /vsock)")
    .option('--json', 'JSON output')
    .action(async (id: string, o, cmd: Command) => {
      const res = await client(cmd).request<SandboxSummary>('PUT', `/v1/sandboxes/${encodeURIComponent(id)}`, { udsPath: o.uds });
      print(o.json, res.body, () => `${res.status === 201 ? 'registered' : 'updated'} ${id}: ${res.body.state}\n`);
    });

  program
    .command('unregister <id>')
    .description('stop watching a sandbox and drop its history')
    .option('--json', 'JSON output')
    .action(async (id: string, o, cmd: Command) => {
      await client(cmd).request('DELETE', `/v1/sandboxes/${encodeURIComponent(id)}`);
      print(o.json, { id, unregistered: true }, () => `unregistered ${id}\n`);
    });

  program
    .command('lifecycle <id> <event>')
    .description(`tell the collector the orchestrator's word on the VM: ${LIFECYCLE_EVENT_NAMES.join(', ')}`)
    .option('--json', 'JSON output')
    .action(async (id: string, event: string, o, cmd: Command) => {
      const res = await client(cmd).request<{ state: string; generation: number; session: number; expectNewGeneration: boolean }>(
        'POST',
        `/v1/sandboxes/${encodeURIComponent(id)}/lifecycle`,
        { event },
      );
      const next = res.body.expectNewGeneration ? '; the next connection opens a new generation' : '';
      print(o.json, res.body, () => `${id}: ${res.body.state} (generation ${res.body.generation}, session ${res.body.session})${next}\n`);
    });

  program
    .command('ls')
    .description('list sandboxes with their state and reason')
    .option('--state <state>', 'only this state')
    .option('--json', 'JSON output')
    .action(async (o, cmd: Command) => {
      const q = o.state ? `?state=${encodeURIComponent(o.state)}` : '';
      const res = await client(cmd).request<{ sandboxes: SandboxSummary[] }>('GET', `/v1/sandboxes${q}`);
      print(o.json, res.body.sandboxes, () => table(res.body.sandboxes, tty));
    });

  program
    .command('status <id>')
    .description("one sandbox's state, reason, target, listener and phases")
    .option('--json', 'JSON output')
    .action(async (id: string, o, cmd: Command) => {
      const res = await client(cmd).request<StatusBody>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`);
      print(o.json, res.body, () => formatStatus(res.body));
    });

  program
    .command('wait-ready <id>')
    .description('wait until the sandbox is ready (exit 0), stuck or exited (exit 3), or the timeout passes (exit 2)')
    .option('--timeout <d>', 'how long to wait', parseDuration, 30_000)
    .addOption(
      new Option('--readiness-url <url>', "ask the collector's readiness thread (its --readiness-http) instead of the API")
        .env('VSOCKDIAG_READINESS_URL')
        .argParser(httpUrl),
    )
    .option('--json', 'JSON output')
    .action(async (id: string, o, cmd: Command) => {
      const c = client(cmd, o.readinessUrl);
      const deadline = Date.now() + o.timeout;
      let last = '';
      for (;;) {
        const wait = Math.max(0, Math.min(1000, deadline - Date.now()));
        const res = await c.request<{ ready: boolean; state: SandboxState; reason: string }>(
          'GET',
          `/v1/sandboxes/${encodeURIComponent(id)}/readiness?wait=${wait}`,
          undefined,
          [503],
          wait + 30_000,
        );
        const { state, reason } = res.body;
        if (!o.json && state !== last) process.stderr.write(`${id}: ${colorState(state, process.stderr.isTTY === true)} — ${reason}\n`);
        last = state;
        // Settled but not ready (stuck, exited): the answer will not improve by itself soon.
        const code = state === 'ready' ? EXIT.ok : SETTLED_STATES.has(state) ? EXIT.notReady : Date.now() >= deadline ? EXIT.timeout : -1;
        if (code >= 0) {
          if (o.json) process.stdout.write(`${JSON.stringify({ ...res.body, timedOut: code === EXIT.timeout })}\n`);
          else if (code === EXIT.timeout) process.stderr.write(`${id}: not ready after ${o.timeout} ms\n`);
          process.exitCode = code;
          return;
        }
      }
    });

  program
    .command('dump <id>')
    .description(
      "take a dump of a sandbox's target: threads (harmless), goroutines (pprof or its memory, harmless; SIGQUIT with --destructive), native",
    )
    .addOption(new Option('--mode <mode>', 'what to dump').choices([...DUMP_MODES]).default('threads'))
    .option('--destructive', 'allow SIGQUIT for a Go dump (envd exits; its supervisor restarts it)')
    .option('--out <file>', 'also write the raw dump text to this file')
    .option('--json', 'JSON output (the dump with its parsed groups)')
    .action(async (id: string, o, cmd: Command) => {
      const c = client(cmd);
      const stop = spinner(`taking a ${o.mode} dump of ${id}`);
      let made: { body: DumpBody };
      try {
        made = await c.request<DumpBody>(
          'POST',
          `/v1/sandboxes/${encodeURIComponent(id)}/dumps`,
          { mode: o.mode, destructive: o.destructive === true },
          [],
          120_000,
        );
      } finally {
        stop();
      }
      const full = await c.request<ReturnType<typeof dumpDetail>>('GET', `/v1/sandboxes/${encodeURIComponent(id)}/dumps/${made.body.id}`);
      if (o.out) fs.writeFileSync(o.out, full.body.text);
      if (o.json) return void process.stdout.write(`${JSON.stringify(full.body, null, 2)}\n`);
      const d = full.body;
      // The collector sends the groups it stored with the dump: no need to parse the text again.
      const analysis = analysisOf(d);
      const flags = [
        d.complete ? 'complete' : 'INCOMPLETE',
        `${d.source}`,
        `${Math.round(d.bytes / 1024)} KiB`,
        `generation ${d.generation}`,
      ];
      process.stdout.write(`dump ${d.id} of ${id}: ${d.mode} (${flags.join(', ')})${d.note ? ` — ${d.note}` : ''}\n`);
      if (d.error) process.stdout.write(`error: ${d.error}\n`);
      if (analysis.kind !== 'unknown') process.stdout.write(summarizeAnalysis(analysis));
      if (o.out) process.stdout.write(`raw text written to ${o.out}\n`);
      if (d.error && !d.bytes) process.exitCode = EXIT.error;
    });

  program
    .command('tail <id>')
    .description("follow a sandbox's events live (the last few first); Ctrl-C to stop")
    .option('-n, --lines <n>', 'how many past events to show first', int('--lines'), 20)
    .option('--json', 'one JSON object per event')
    .action(async (id: string, o, cmd: Command) => {
      const c = client(cmd);
      const path = `/v1/sandboxes/${encodeURIComponent(id)}`;
      await c.request('GET', path); // a clear NOT_FOUND before anything else
      const print = (e: TailEvent) => process.stdout.write(o.json ? `${JSON.stringify(e)}\n` : formatEvent(e));
      // Subscribe first and hold live events, then read the history: nothing falls between.
      const g = cmd.optsWithGlobals<{ collector: string }>();
      const token = resolveToken(cmd);
      const url = `${g.collector.replace(/^http/, 'ws').replace(/\/+$/, '')}/v1/stream`;
      const ws = new WebSocket(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
      const held: TailEvent[] = [];
      let live = false;
      const done = new Promise<void>((resolve, reject) => {
        ws.on('close', () => resolve());
        ws.on('error', (err) => reject(new ClientError(`stream: ${err.message}`, null, null)));
      });
      const subscribed = new Promise<void>((resolve) => {
        ws.on('open', () => ws.send(JSON.stringify({ type: 'subscribe', id })));
        ws.on('message', (data) => {
          const m: unknown = JSON.parse(data.toString());
          // A message this client does not know (a newer collector's) is skipped, not guessed at.
          if (!streamMessage.Check(m)) return;
          if (m.type === 'subscribed' && m.id === id) resolve();
          if (m.type === 'event' && m.id === id) {
            if (live) print(m.event);
            else held.push(m.event);
          }
          if (m.type === 'removed' && m.id === id) {
            process.stderr.write(`${id} was unregistered\n`);
            ws.close();
          }
        });
      });
      await Promise.race([subscribed, done]);
      // The last N, read newest first (however long the history), then shown oldest first.
      const recent: TailEvent[] = [];
      for (let before = ''; recent.length < o.lines; ) {
        const limit = Math.min(1000, o.lines - recent.length);
        const r = await c.request<{ events: TailEvent[]; next: number; more: boolean }>(
          'GET',
          `${path}/events?order=desc&limit=${limit}${before}`,
        );
        recent.push(...r.body.events);
        if (!r.body.more) break;
        before = `&before=${r.body.next}`;
      }
      recent.reverse();
      // Streamed events carry the ids the history lists them by.
      const shown = new Set(recent.map((e) => e.id));
      for (const e of recent) print(e);
      for (const e of held) if (!shown.has(e.id)) print(e);
      live = true;
      process.once('SIGINT', () => ws.close());
      await done;
    });

  program
    .command('parse-dump [file]')
    .description('group a Go traceback or a probe threads dump offline (FILE, or - / nothing for stdin)')
    .option('--json', 'JSON output: the same goroutineGroups / threads structure the API returns')
    .action(async (file: string | undefined, o) => {
      const text = !file || file === '-' ? await readStdin() : fs.readFileSync(file, 'utf8');
      const analysis = analyzeDump(text);
      if (o.json) return void process.stdout.write(`${JSON.stringify(analysis, null, 2)}\n`);
      if (analysis.kind === 'unknown') {
        process.stderr.write('vsockdiag: no goroutine or threads dump found in the input\n');
        process.exitCode = EXIT.error;
        return;
      }
      process.stdout.write(summarizeAnalysis(analysis));
    });

  return program;
}

/** One line per event: time, generation/session, kind, and the fields that matter for that kind. */
function formatEvent(e: TailEvent): string {
  // The payload of whatever kind, as JSON gave it.
  const d = (e.data ?? {}) as Record<string, unknown>;
  const time = e.at.slice(11, 23);
  let what: string;
  switch (e.kind) {
    case 'state':
      what = `${d.previous} → ${d.state}: ${d.reason}`;
      break;
    case 'phase':
      what = [d.name, d.status, d.ready ? 'READY=1' : ''].filter(Boolean).join('  ');
      break;
    case 'log.lines':
      what = (d.lines as string[]).map((l, i) => (i ? `${' '.repeat(28)}${l}` : l)).join('\n');
      break;
    default:
      what = JSON.stringify(d);
  }
  return `${time} g${e.generation}/s${e.session} ${e.kind.padEnd(16)} ${what}\n`;
}

/** A spinner on stderr while waiting (a plain line when stderr is not a terminal). */
function spinner(what: string): () => void {
  if (!process.stderr.isTTY) {
    process.stderr.write(`${what}…\n`);
    return () => {};
  }
  const frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
  const started = Date.now();
  let i = 0;
  const timer = setInterval(() => {
    process.stderr.write(`\r${frames[i++ % frames.length]} ${what}… ${((Date.now() - started) / 1000).toFixed(1)}s`);
  }, 100);
  return () => {
    clearInterval(timer);
    process.stderr.write('\r\x1b[K');
  };
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function formatStatus(s: StatusBody): string {
  const lines = [
    `${s.id}  ${colorState(s.state, tty)} for ${sinceText(s.since)}  (generation ${s.generation}, session ${s.session})`,
    `  reason:   ${s.reason}`,
    `  socket:   ${s.udsPath}`,
  ];
  // Why this life of the VM began: a boot, or the evidence of a restore.
  if (s.generationInfo)
    lines.push(`  life:     generation ${s.generationInfo.generation} since ${s.generationInfo.since}: ${s.generationInfo.detail}`);
  if (s.probe) {
    const p = s.probe;
    const source = p.listenerSource === 'proc' ? `, listeners from /proc/net/tcp (${p.fallbackReason ?? 'fallback'})` : '';
    lines.push(
      `  probe:    ${s.connected ? 'connected' : 'disconnected'}, instance ${p.instanceId}, v${p.version}, probe session ${p.generation}${source}`,
    );
  }
  if (s.target) {
    const t = s.target;
    const fate = t.alive ? 'alive' : t.signal ? `killed by ${t.signal}` : t.exitCode !== undefined ? `exited ${t.exitCode}` : 'gone';
    const facts = [
      t.threads !== undefined ? `${t.threads} threads` : '',
      t.rssKb !== undefined ? `${Math.round(t.rssKb / 1024)} MiB RSS` : '',
    ]
      .filter(Boolean)
      .join(', ');
    lines.push(`  target:   ${t.name} pid ${t.pid} ${fate}${facts ? ` (${facts})` : ''}`);
  }
  if (s.listener) {
    const l = s.listener;
    lines.push(
      `  listener: :${l.port} ${l.bound ? `bound on ${l.address ?? '?'}${l.pid ? ` by pid ${l.pid}` : ''}` : 'not bound'}${l.since ? ` since ${l.since}` : ''}`,
    );
  }
  if (s.phases.length) {
    lines.push('  phases:');
    const t0 = Date.parse(s.phases[0]!.at);
    for (const p of s.phases.slice(-20)) {
      const label = p.ready ? 'READY=1' : (p.name ?? p.status ?? '?');
      lines.push(`    +${((Date.parse(p.at) - t0) / 1000).toFixed(3)}s  ${label}${p.name && p.status ? `  ${p.status}` : ''}`);
    }
  }
  return lines.join('\n') + '\n';
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof ClientError) {
      process.stderr.write(`vsockdiag: ${err.message}${err.code ? ` (${err.code})` : ''}\n`);
    } else {
      process.stderr.write(`vsockdiag: ${(err as Error).message}\n`);
    }
    process.exitCode = EXIT.error;
  }
}
