import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULTS } from '@vsockdiag/proto';
import { ConfigError, formatConfig, parseArgs, parseKernelCmdline, usage, type OptionName, type ProbeConfig } from '../src/config.js';

const OPTION_NAMES: OptionName[] = [
  'connect',
  'listen',
  'target',
  'pid-file',
  'expect-port',
  'notify-socket',
  'interval',
  'boot-interval',
  'hung-interval',
  'health-url',
  'pprof-url',
  'log-file',
  'journal-unit',
  'phase-pattern',
  'kmsg',
  'proc-root',
  'cmdline',
];

let dir: string;
let noCmdline: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'vd-config-'));
  noCmdline = join(dir, 'absent-cmdline');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function cmdlineFile(text: string): string {
  const p = join(dir, `cmdline-${++n}`);
  writeFileSync(p, text);
  return p;
}

/** parseArgs for a 'run' result, never reading the real /proc/cmdline nor process.env. */
function run(argv: string[], env: NodeJS.ProcessEnv = {}): ProbeConfig {
  const hasCmdline = argv.some((a) => a === '--cmdline' || a.startsWith('--cmdline=')) || 'VSOCKDIAG_CMDLINE' in env;
  const r = parseArgs(hasCmdline ? argv : ['--cmdline', noCmdline, ...argv], env);
  if (r.action !== 'run') throw new Error(`expected run, got ${r.action}`);
  return r.config;
}

function configError(argv: string[], env: NodeJS.ProcessEnv = {}): ConfigError {
  try {
    parseArgs(['--cmdline', noCmdline, ...argv], env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`parseArgs(${JSON.stringify(argv)}) did not throw`);
}

describe('parseArgs defaults', () => {
  it('uses the documented defaults', () => {
    const c = run([]);
    expect(c.connect).toBe(`vsock:2:${DEFAULTS.vsockPort}`);
    expect(c.listen).toBe(`vsock:any:${DEFAULTS.probePort}`);
    expect(c.target).toBe(DEFAULTS.target);
    expect(c.pidFile).toBeNull();
    expect(c.expectPort).toBe(DEFAULTS.expectPort);
    expect(c.notifySocket).toBe(DEFAULTS.notifySocket);
    expect(c.intervalMs).toBe(DEFAULTS.intervalMs);
    expect(c.bootIntervalMs).toBe(DEFAULTS.bootIntervalMs);
    expect(c.hungIntervalMs).toBe(DEFAULTS.hungIntervalMs);
    expect(c.procRoot).toBe('/proc');
    expect(c.command).toEqual([]);
  });

  it('marks every option not given as default', () => {
    const c = parseArgs([], { VSOCKDIAG_CMDLINE: noCmdline });
    expect(c.action).toBe('run');
    if (c.action !== 'run') return;
    expect(Object.keys(c.config.sources).sort()).toEqual([...OPTION_NAMES].sort());
    for (const name of OPTION_NAMES) {
      expect(c.config.sources[name], name).toBe(name === 'cmdline' ? 'env' : 'default');
    }
  });

  it('ignores a missing kernel command line file', () => {
    expect(() => run(['--cmdline', join(dir, 'nope', 'cmdline')])).not.toThrow();
  });
});

describe('parseArgs flag syntax', () => {
  it('accepts --name=value and --name value', () => {
    const a = run(['--target=foo', '--expect-port', '8080', '--interval=250ms', '--boot-interval', '2s', '--hung-interval=3s']);
    expect(a.target).toBe('foo');
    expect(a.expectPort).toBe(8080);
    expect(a.intervalMs).toBe(250);
    expect(a.bootIntervalMs).toBe(2000);
    expect(a.hungIntervalMs).toBe(3000);
    expect(a.sources.target).toBe('flag');
    expect(a.sources['expect-port']).toBe('flag');
  });

  it('keeps "=" inside a --name=value value, and allows an empty value', () => {
    const c = run(['--target=a=b', '--pid-file=']);
    expect(c.target).toBe('a=b');
    expect(c.pidFile).toBeNull();
    expect(c.sources['pid-file']).toBe('flag');
  });

  it('lets the last occurrence of a flag win', () => {
    expect(run(['--target', 'a', '--target=b']).target).toBe('b');
  });

  it('parses durations in every unit', () => {
    expect(run(['--interval', '1500']).intervalMs).toBe(1500);
    expect(run(['--interval', '3s']).intervalMs).toBe(3000);
    expect(run(['--interval', '2m']).intervalMs).toBe(120_000);
    expect(run(['--interval', '0.5s']).intervalMs).toBe(500);
  });

  it('accepts unix and tcp addresses', () => {
    expect(run(['--connect', 'unix:/run/c.sock']).connect).toBe('unix:/run/c.sock');
    expect(run(['--connect', 'tcp:127.0.0.1:7000', '--listen', 'tcp:[::1]:7001']).listen).toBe('tcp:[::1]:7001');
  });

  it('turns "off" into null for --listen and --notify-socket', () => {
    const c = run(['--listen', 'off', '--notify-socket=off']);
    expect(c.listen).toBeNull();
    expect(c.notifySocket).toBeNull();
    expect(c.raw.listen).toBe('off');
    expect(c.sources.listen).toBe('flag');
    expect(c.sources['notify-socket']).toBe('flag');
  });

  it('"off" works from the environment too', () => {
    const c = run([], { VSOCKDIAG_LISTEN: 'off', VSOCKDIAG_NOTIFY_SOCKET: 'off' });
    expect(c.listen).toBeNull();
    expect(c.notifySocket).toBeNull();
  });

  it('takes --pid-file as a path', () => {
    const c = run(['--pid-file', '/run/envd.pid']);
    expect(c.pidFile).toBe('/run/envd.pid');
  });

  it('answers --help, -h, --version and --print-config', () => {
    expect(parseArgs(['--help'], {})).toEqual({ action: 'help' });
    expect(parseArgs(['--target', 'x', '-h'], {})).toEqual({ action: 'help' });
    expect(parseArgs(['--version'], {})).toEqual({ action: 'version' });
    const p = parseArgs(['--print-config', '--cmdline', noCmdline, '--target', 'x'], {});
    expect(p.action).toBe('print-config');
    if (p.action === 'print-config') expect(p.config.target).toBe('x');
  });
});

describe('parseArgs wrap command', () => {
  it('captures everything after -- as the command', () => {
    const c = run(['--target', 'envd', '--', '/usr/bin/envd', '-port', '49983']);
    expect(c.command).toEqual(['/usr/bin/envd', '-port', '49983']);
    expect(c.target).toBe('envd');
  });

  it('gives flags after -- to the command, not to the probe', () => {
    const c = run(['--', 'envd', '--target', 'other', '--help', '--bogus', '--', 'x']);
    expect(c.command).toEqual(['envd', '--target', 'other', '--help', '--bogus', '--', 'x']);
    expect(c.target).toBe(DEFAULTS.target);
    expect(c.sources.target).toBe('default');
  });

  it('rejects -- with nothing after it', () => {
    expect(configError(['--target', 'x', '--']).message).toMatch(/nothing to run after "--"/);
  });

  it('rejects a bare word before -- and says where a command goes', () => {
    expect(configError(['envd']).message).toMatch(/unexpected argument "envd".*after "--"/);
  });
});

describe('parseArgs errors', () => {
  it('rejects an unknown flag by name', () => {
    const err = configError(['--colour', 'red']);
    expect(err.message).toMatch(/unknown flag --colour/);
    expect(configError(['--target=x', '--nope=1']).message).toMatch(/unknown flag --nope/);
  });

  it('rejects a flag with no value', () => {
    expect(configError(['--target']).message).toBe('--target needs a value');
    expect(configError(['--interval', '1s', '--expect-port']).message).toBe('--expect-port needs a value');
  });

  it('rejects a bad address, naming the flag', () => {
    expect(configError(['--connect', 'nowhere']).message).toMatch(/^--connect: .*unknown address "nowhere"/);
    expect(configError(['--listen', 'vsock:x:1']).message).toMatch(/^--listen: .*vsock:CID:PORT/);
    expect(configError(['--connect', 'tcp:host:99999']).message).toMatch(/^--connect: bad port "99999"/);
    expect(configError(['--connect', 'unix:']).message).toMatch(/^--connect: empty path/);
  });

  it('rejects --connect off', () => {
    expect(configError(['--connect', 'off']).message).toMatch(/--connect cannot be off/);
  });

  it('rejects a bad or non-positive duration', () => {
    expect(configError(['--interval', 'fast']).message).toMatch(/^--interval: bad duration "fast"/);
    expect(configError(['--boot-interval', '10 ms']).message).toMatch(/^--boot-interval: bad duration/);
    expect(configError(['--interval', '0']).message).toBe('--interval: must be positive');
    expect(configError(['--interval=-5ms']).message).toMatch(/^--interval: bad duration/);
  });

  it('rejects a bad port', () => {
    for (const bad of ['65536', '-1', 'http', '80x', '']) {
      expect(configError(['--expect-port', bad]).message, bad).toBe('--expect-port: must be 0..65535');
    }
    expect(run(['--expect-port', '0']).expectPort).toBe(0);
    expect(run(['--expect-port', '65535']).expectPort).toBe(65535);
  });

  it('validates values from the environment and the kernel command line too', () => {
    // The message names where the bad value came from.
    expect(configError([], { VSOCKDIAG_EXPECT_PORT: '99999' }).message).toMatch(/^VSOCKDIAG_EXPECT_PORT \(environment\): /);
    const file = cmdlineFile('vsockdiag.interval=soon');
    expect(() => parseArgs(['--cmdline', file], {})).toThrow(ConfigError);
    expect(() => parseArgs(['--cmdline', file], {})).toThrow(/vsockdiag.interval \(kernel command line\): bad duration "soon"/);
  });

  it('throws nothing but ConfigError for bad input', () => {
    for (const argv of [['--connect', 'tcp:a'], ['--interval', '1y'], ['x'], ['--a']]) {
      expect(() => parseArgs(['--cmdline', noCmdline, ...argv], {})).toThrow(ConfigError);
    }
  });
});

describe('parseArgs precedence', () => {
  it('flag > env > kernel cmdline > default, with sources', () => {
    const file = cmdlineFile(
      'console=ttyS0 reboot=k vsockdiag.target=from-kernel vsockdiag.expect_port=1111 vsockdiag.interval=3s vsockdiag.boot-interval=30ms\n',
    );
    const env = {
      VSOCKDIAG_CMDLINE: file,
      VSOCKDIAG_TARGET: 'from-env',
      VSOCKDIAG_EXPECT_PORT: '2222',
      HOME: '/root',
    };
    const c = run(['--target', 'from-flag'], env);
    expect(c.target).toBe('from-flag');
    expect(c.sources.target).toBe('flag');
    expect(c.expectPort).toBe(2222);
    expect(c.sources['expect-port']).toBe('env');
    expect(c.intervalMs).toBe(3000);
    expect(c.sources.interval).toBe('cmdline');
    expect(c.bootIntervalMs).toBe(30);
    expect(c.sources['boot-interval']).toBe('cmdline');
    expect(c.procRoot).toBe('/proc');
    expect(c.sources['proc-root']).toBe('default');
    expect(c.sources.cmdline).toBe('env');
    expect(c.raw.cmdline).toBe(file);
  });

  it('env beats the kernel command line, which beats the default', () => {
    const file = cmdlineFile('vsockdiag.target=kern vsockdiag.listen=off');
    const onlyKernel = run(['--cmdline', file]);
    expect(onlyKernel.target).toBe('kern');
    expect(onlyKernel.sources.target).toBe('cmdline');
    expect(onlyKernel.listen).toBeNull();
    expect(onlyKernel.sources.listen).toBe('cmdline');
    const withEnv = run(['--cmdline', file], { VSOCKDIAG_TARGET: 'envv' });
    expect(withEnv.target).toBe('envv');
    expect(withEnv.sources.target).toBe('env');
  });

  it('reads every option from VSOCKDIAG_* (dashes become underscores)', () => {
    const c = run([], {
      VSOCKDIAG_CONNECT: 'unix:/tmp/c.sock',
      VSOCKDIAG_PID_FILE: '/run/t.pid',
      VSOCKDIAG_NOTIFY_SOCKET: '@vd-notify',
      VSOCKDIAG_BOOT_INTERVAL: '15ms',
      VSOCKDIAG_PROC_ROOT: '/fake/proc',
    });
    expect(c.connect).toBe('unix:/tmp/c.sock');
    expect(c.pidFile).toBe('/run/t.pid');
    expect(c.notifySocket).toBe('@vd-notify');
    expect(c.bootIntervalMs).toBe(15);
    expect(c.procRoot).toBe('/fake/proc');
    for (const k of ['connect', 'pid-file', 'notify-socket', 'boot-interval', 'proc-root'] as const) expect(c.sources[k]).toBe('env');
  });

  it('ignores lower-case or unprefixed environment variables', () => {
    const c = run([], { vsockdiag_target: 'x', TARGET: 'y', VSOCKDIAG_target: 'z' });
    expect(c.target).toBe(DEFAULTS.target);
  });

  it('reads the kernel command line from --cmdline over VSOCKDIAG_CMDLINE', () => {
    const fromEnv = cmdlineFile('vsockdiag.target=env-file');
    const fromFlag = cmdlineFile('vsockdiag.target=flag-file');
    const c = run(['--cmdline', fromFlag], { VSOCKDIAG_CMDLINE: fromEnv });
    expect(c.target).toBe('flag-file');
    expect(c.sources.cmdline).toBe('flag');
    expect(run([], { VSOCKDIAG_CMDLINE: fromEnv }).target).toBe('env-file');
  });

  it('does not let an unrelated kernel parameter or a foreign prefix set anything', () => {
    const file = cmdlineFile('target=no xvsockdiag.target=no vsockdiag.unknown=1 vsockdiag.target');
    const c = run(['--cmdline', file]);
    expect(c.target).toBe(DEFAULTS.target);
    expect(c.sources.target).toBe('default');
  });

  it('reads the process environment when no env is passed', () => {
    const saved = process.env.VSOCKDIAG_TARGET;
    process.env.VSOCKDIAG_TARGET = 'from-process-env';
    try {
      const r = parseArgs(['--cmdline', noCmdline]);
      expect(r.action === 'run' && r.config.target).toBe('from-process-env');
    } finally {
      if (saved === undefined) delete process.env.VSOCKDIAG_TARGET;
      else process.env.VSOCKDIAG_TARGET = saved;
    }
  });
});

describe('parseKernelCmdline', () => {
  it('picks vsockdiag.* keys and ignores the rest', () => {
    const m = parseKernelCmdline('console=ttyS0 reboot=k panic=1 vsockdiag.target=envd pci=off\n');
    expect([...m]).toEqual([['target', 'envd']]);
  });

  it('turns underscores in keys into dashes', () => {
    const m = parseKernelCmdline('vsockdiag.expect_port=80 vsockdiag.notify_socket=/run/n.sock vsockdiag.boot-interval=10ms');
    expect(m.get('expect-port')).toBe('80');
    expect(m.get('notify-socket')).toBe('/run/n.sock');
    expect(m.get('boot-interval')).toBe('10ms');
  });

  it('strips double quotes around a value', () => {
    expect(parseKernelCmdline('vsockdiag.target="envd"').get('target')).toBe('envd');
    expect(parseKernelCmdline('vsockdiag.target=""').get('target')).toBe('');
  });

  it('runs an unterminated quote to the end of the line (as the kernel does)', () => {
    const m = parseKernelCmdline('vsockdiag.target=x vsockdiag.pid_file="/a b vsockdiag.listen=off');
    expect(m.get('target')).toBe('x');
    expect(m.get('pid-file')).toMatch(/\/a b vsockdiag\.listen=off$/);
    expect(m.has('listen')).toBe(false);
  });

  it('is fast on a long line full of quotes', () => {
    const text = 'vsockdiag.target=' + 'a"b"'.repeat(20_000) + ' x'.repeat(20_000);
    const t0 = performance.now();
    expect(parseKernelCmdline(text).get('target')).toHaveLength(80_000);
    expect(performance.now() - t0).toBeLessThan(1000);
  });

  it('keeps blanks inside a quoted value (as the kernel does)', () => {
    const m = parseKernelCmdline('quiet vsockdiag.pid_file="/run/my app/envd.pid" vsockdiag.target=envd init=/sbin/init');
    expect(m.get('pid-file')).toBe('/run/my app/envd.pid');
    expect(m.get('target')).toBe('envd');
    expect(m.size).toBe(2);
  });

  it('keeps "=" in values and skips keys with no value', () => {
    const m = parseKernelCmdline('vsockdiag.target=a=b vsockdiag.listen');
    expect(m.get('target')).toBe('a=b');
    expect(m.has('listen')).toBe(false);
  });

  it('lets a later key win and copes with any whitespace', () => {
    const m = parseKernelCmdline('  vsockdiag.target=one\tvsockdiag.target=two\n\n');
    expect(m.get('target')).toBe('two');
    expect(parseKernelCmdline('').size).toBe(0);
    expect(parseKernelCmdline('   \n').size).toBe(0);
  });
});

describe('formatConfig', () => {
  it('lists every option with its value and source', () => {
    const file = cmdlineFile('vsockdiag.interval=2s');
    const c = run(['--cmdline', file, '--target', 'myd'], { VSOCKDIAG_EXPECT_PORT: '8080' });
    const text = formatConfig(c);
    const lines = text.trimEnd().split('\n');
    expect(lines).toHaveLength(OPTION_NAMES.length);
    expect(text.endsWith('\n')).toBe(true);
    for (const name of OPTION_NAMES) {
      const line = lines.find((l) => l.split(/\s+/)[0] === name);
      expect(line, name).toBeDefined();
      expect(line!.endsWith(`[${c.sources[name]}]`), line).toBe(true);
    }
    expect(text).toMatch(/^target\s+myd\s+\[flag\]$/m);
    expect(text).toMatch(/^expect-port\s+8080\s+\[env\]$/m);
    expect(text).toMatch(/^interval\s+2s\s+\[cmdline\]$/m);
    expect(text).toMatch(/^proc-root\s+\/proc\s+\[default\]$/m);
    expect(text).toMatch(/^pid-file\s+\(none\)\s+\[default\]$/m);
  });

  it('adds the wrapped command', () => {
    const text = formatConfig(run(['--', '/usr/bin/envd', '-v']));
    expect(text).toMatch(/^command\s+\/usr\/bin\/envd -v\s+\[flag\]$/m);
  });

  it('aligns the values in one column', () => {
    const lines = formatConfig(run([])).trimEnd().split('\n');
    // Every value starts after the longest name ('notify-socket', 13) plus two spaces.
    const starts = new Set(lines.map((l) => /^\S+\s+/.exec(l)![0].length));
    expect([...starts]).toEqual(['notify-socket'.length + 2]);
  });
});

describe('usage', () => {
  it('mentions every flag and the env/kernel forms', () => {
    const text = usage();
    for (const name of OPTION_NAMES) expect(text).toContain(`--${name} `);
    expect(text).toContain('--print-config');
    expect(text).toContain('VSOCKDIAG_');
    expect(text).toContain('vsockdiag.');
  });
});
