// The probe's settings, from (highest first) command-line flags, VSOCKDIAG_* environment
// variables, vsockdiag.* keys on the kernel command line, then defaults. Each value
// remembers where it came from, for --print-config.
//
// Hand-parsed on purpose: the probe ships as one small bundle with no dependencies.

import fs from 'node:fs';
import { DEFAULTS, VSOCK_CID_HOST, parseAddress, parseDuration } from '@vsockdiag/proto';
import { DEFAULT_PHASE_PATTERN, compilePhasePattern } from './logs/phase-pattern.js';
import { BOOT_FAST_FOR_MS } from './sample-loop.js';

type Kind = 'string' | 'address' | 'port' | 'duration' | 'path' | 'url' | 'regex';

const OPTIONS = {
  connect: { kind: 'address', def: `vsock:${VSOCK_CID_HOST}:${DEFAULTS.vsockPort}`, help: 'collector address' },
  listen: {
    kind: 'address',
    def: `vsock:any:${DEFAULTS.probePort}`,
    help: 'command port for host-initiated connections ("off" to disable)',
  },
  target: { kind: 'string', def: DEFAULTS.target, help: 'process name of the target' },
  'pid-file': { kind: 'path', def: '', help: 'read the target pid from this file instead of searching by name' },
  'expect-port': { kind: 'port', def: String(DEFAULTS.expectPort), help: 'TCP port the target must listen on' },
  'notify-socket': { kind: 'path', def: DEFAULTS.notifySocket, help: 'sd_notify datagram socket for phase markers ("off" to disable)' },
  interval: { kind: 'duration', def: `${DEFAULTS.intervalMs}ms`, help: 'sampling period once the target is ready' },
  'boot-interval': { kind: 'duration', def: `${DEFAULTS.bootIntervalMs}ms`, help: 'sampling period until the target is ready' },
  'hung-interval': {
    kind: 'duration',
    def: `${DEFAULTS.hungIntervalMs}ms`,
    help: `sampling period of a boot still not ready after its first ${BOOT_FAST_FOR_MS / 1000} s`,
  },
  'health-url': { kind: 'url', def: '', help: 'in-guest HTTP health check expecting 204, e.g. http://127.0.0.1:49983/health' },
  'pprof-url': {
    kind: 'url',
    def: '',
    help: "the target's goroutine pprof URL, for harmless Go dumps (e.g. http://127.0.0.1:6060/debug/pprof/goroutine?debug=2)",
  },
  'log-file': { kind: 'path', def: '', help: "follow the target's log file (e.g. runit's stderr log) for phase lines" },
  'journal-unit': { kind: 'string', def: '', help: "follow the target's systemd unit in the journal for phase lines" },
  'phase-pattern': { kind: 'regex', def: DEFAULT_PHASE_PATTERN, help: 'log lines matching this regex are phases (group 1 = the phase)' },
  kmsg: { kind: 'path', def: '/dev/kmsg', help: 'kernel message source for OOM kills, hung tasks, segfaults ("off" to disable)' },
  'proc-root': { kind: 'path', def: '/proc', help: 'procfs mount to read (for tests)' },
  cmdline: { kind: 'path', def: '/proc/cmdline', help: 'kernel command line file to read vsockdiag.* keys from' },
} as const satisfies Record<string, { kind: Kind; def: string; help: string }>;

export type OptionName = keyof typeof OPTIONS;
export type Source = 'flag' | 'env' | 'cmdline' | 'default';

export interface ProbeConfig {
  connect: string;
  listen: string | null;
  target: string;
  pidFile: string | null;
  expectPort: number;
  notifySocket: string | null;
  intervalMs: number;
  bootIntervalMs: number;
  hungIntervalMs: number;
  procRoot: string;
  healthUrl: string | null;
  pprofUrl: string | null;
  logFile: string | null;
  journalUnit: string | null;
  phasePattern: RegExp;
  kmsg: string | null;
  /** Wrap mode: the command after "--". */
  command: string[];
  sources: Record<OptionName, Source>;
  raw: Record<OptionName, string>;
}

export class ConfigError extends Error {}

export type ParsedArgs =
  | { action: 'run'; config: ProbeConfig }
  | { action: 'print-config'; config: ProbeConfig }
  | { action: 'help' }
  | { action: 'version' };

const envName = (name: string) => `VSOCKDIAG_${name.toUpperCase().replace(/-/g, '_')}`;

/** vsockdiag.key=value pairs from a kernel command line (dashes or underscores). */
export function parseKernelCmdline(text: string): Map<string, string> {
  const out = new Map<string, string>();
  // Words as the kernel splits them (lib/cmdline.c next_arg): blanks inside double quotes
  // do not end a word, so vsockdiag.pid_file="/run/my dir/x.pid" is one parameter.
  for (const [word] of text.matchAll(/(?:[^\s"]|"[^"]*"?)+/g)) {
    if (!word.startsWith('vsockdiag.')) continue;
    const eq = word.indexOf('=');
    if (eq < 0) continue;
    const key = word.slice('vsockdiag.'.length, eq).replace(/_/g, '-');
    let value = word.slice(eq + 1);
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    out.set(key, value);
  }
  return out;
}

const WHERE: Record<Source, (name: string) => string> = {
  flag: (name) => `--${name}`,
  env: (name) => `${envName(name)} (environment)`,
  cmdline: (name) => `vsockdiag.${name} (kernel command line)`,
  default: (name) => `--${name} default`,
};

function validate(name: OptionName, value: string, source: Source): void {
  const kind: Kind = OPTIONS[name].kind;
  try {
    if (kind === 'address' && value !== 'off') parseAddress(value);
    if (kind === 'duration') {
      if (parseDuration(value) <= 0) throw new Error('must be positive');
    }
    if (kind === 'port' && !(/^\d+$/.test(value) && Number(value) <= 65535)) throw new Error('must be 0..65535');
    if (kind === 'url' && value && new URL(value).protocol !== 'http:') throw new Error('must be an http:// URL');
    if (kind === 'regex') compilePhasePattern(value);
  } catch (err) {
    throw new ConfigError(`${WHERE[source](name)}: ${(err as Error).message}`);
  }
}

export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): ParsedArgs {
  const flags = new Map<string, string>();
  let command: string[] = [];
  let printConfig = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      command = argv.slice(i + 1);
      break;
    }
    if (arg === '-h' || arg === '--help') return { action: 'help' };
    if (arg === '--version') return { action: 'version' };
    if (arg === '--print-config') {
      printConfig = true;
      continue;
    }
    if (!arg.startsWith('--')) throw new ConfigError(`unexpected argument "${arg}" (a command to wrap goes after "--")`);
    const eq = arg.indexOf('=');
    const name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
    if (!Object.hasOwn(OPTIONS, name)) throw new ConfigError(`unknown flag --${name} (see --help)`);
    const value = eq < 0 ? argv[++i] : arg.slice(eq + 1);
    if (value === undefined) throw new ConfigError(`--${name} needs a value`);
    flags.set(name, value);
  }
  if (command.length === 0 && argv.includes('--')) throw new ConfigError('nothing to run after "--"');

  const cmdlinePath = flags.get('cmdline') ?? env[envName('cmdline')] ?? OPTIONS.cmdline.def;
  let kernel = new Map<string, string>();
  try {
    kernel = parseKernelCmdline(fs.readFileSync(cmdlinePath, 'utf8'));
  } catch {
    /* no kernel command line (not in a VM, or a test): nothing to read */
  }

  const raw = {} as Record<OptionName, string>;
  const sources = {} as Record<OptionName, Source>;
  for (const name of Object.keys(OPTIONS) as OptionName[]) {
    const candidates: Array<[Source, string | undefined]> = [
      ['flag', flags.get(name)],
      ['env', env[envName(name)]],
      ['cmdline', kernel.get(name)],
      ['default', OPTIONS[name].def],
    ];
    const [source, value] = candidates.find(([, v]) => v !== undefined) as [Source, string];
    validate(name, value, source);
    raw[name] = value;
    sources[name] = source;
  }
  const config: ProbeConfig = {
    connect: raw.connect,
    listen: raw.listen === 'off' ? null : raw.listen,
    target: raw.target,
    pidFile: raw['pid-file'] || null,
    expectPort: Number(raw['expect-port']),
    notifySocket: raw['notify-socket'] === 'off' || raw['notify-socket'] === '' ? null : raw['notify-socket'],
    intervalMs: parseDuration(raw.interval),
    bootIntervalMs: parseDuration(raw['boot-interval']),
    hungIntervalMs: parseDuration(raw['hung-interval']),
    procRoot: raw['proc-root'],
    healthUrl: raw['health-url'] || null,
    pprofUrl: raw['pprof-url'] || null,
    logFile: raw['log-file'] || null,
    journalUnit: raw['journal-unit'] || null,
    phasePattern: compilePhasePattern(raw['phase-pattern']),
    kmsg: raw.kmsg === 'off' || raw.kmsg === '' ? null : raw.kmsg,
    command,
    sources,
    raw,
  };
  if (config.connect === 'off') throw new ConfigError('--connect cannot be off');
  return printConfig ? { action: 'print-config', config } : { action: 'run', config };
}

export function formatConfig(c: ProbeConfig): string {
  const width = Math.max(...Object.keys(OPTIONS).map((k) => k.length));
  const lines = (Object.keys(OPTIONS) as OptionName[]).map((k) => `${k.padEnd(width)}  ${c.raw[k] || '(none)'}  [${c.sources[k]}]`);
  if (c.command.length) lines.push(`${'command'.padEnd(width)}  ${c.command.join(' ')}  [flag]`);
  return lines.join('\n') + '\n';
}

export function usage(): string {
  const flag = (k: OptionName) => `  --${k} <${OPTIONS[k].kind}>`;
  const width = Math.max(...(Object.keys(OPTIONS) as OptionName[]).map((k) => flag(k).length)) + 2;
  const lines = (Object.keys(OPTIONS) as OptionName[]).map(
    (k) => flag(k).padEnd(width) + `${OPTIONS[k].help} (default ${OPTIONS[k].def || 'none'})`,
  );
  return (
    [
      'usage: vsockdiag-probe [flags] [-- CMD ARGS...]',
      '',
      'Watches the target (envd) from outside and streams what it sees to the vsockdiag collector.',
      'With "-- CMD ARGS...", starts CMD as the target (wrap mode) with NOTIFY_SOCKET set.',
      '',
      ...lines,
      '  --print-config'.padEnd(width) + 'print the resulting settings and where each came from',
      '',
      'Each flag can also be set as VSOCKDIAG_<NAME> in the environment or vsockdiag.<name>=... on the kernel command line.',
      'VSOCKDIAG_CODE_CACHE=report says on stderr whether the start-up code cache (vsockdiag-probe.bundle.cache) was used.',
    ].join('\n') + '\n'
  );
}
