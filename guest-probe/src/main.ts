// vsockdiag-probe: entry point of the bundled guest binary.

import { parseAddress, useUnixListener } from '@vsockdiag/proto';
import { useLessMemory } from './v8-flags.js';
import { ConfigError, formatConfig, parseArgs, usage, type ProbeConfig } from './config.js';
import { PROBE_VERSION, Probe } from './probe.js';
import { enableVsock, serverAtPath, vsockUsable } from './vsock/index.js';

function log(level: 'info' | 'warn', message: string): void {
  process.stderr.write(`vsockdiag-probe: ${level === 'warn' ? 'warning: ' : ''}${message}\n`);
}

function parse(argv: string[]): ReturnType<typeof parseArgs> {
  try {
    return parseArgs(argv);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`vsockdiag-probe: ${err.message}\n`);
    process.exit(2);
  }
}

export async function main(argv: string[]): Promise<void> {
  const parsed = parse(argv);
  if (parsed.action === 'help') return void process.stdout.write(usage());
  if (parsed.action === 'version') return void process.stdout.write(`${PROBE_VERSION}\n`);
  if (parsed.action === 'print-config') return void process.stdout.write(formatConfig(parsed.config));

  const vsock = prepareVsock(parsed.config);
  // A command port on a Unix path without node:cluster and what it loads (pipe.ts says why).
  useUnixListener(serverAtPath);
  const probe = new Probe(parsed.config, log);
  if (!parsed.config.command.length) {
    // Not wrapping: a stop request is for the probe itself.
    for (const s of ['SIGTERM', 'SIGINT'] as const) {
      process.on(s, () => {
        probe.stop();
        process.exit(0);
      });
    }
  }
  await probe.start();
  // Process-wide, so here rather than in Probe: tests start Probes inside the test runner.
  useLessMemory();
  if (vsock) await requireVsock(parsed.config);
}

/**
 * vsock needs the addon. The collector address is the probe's reason to live: if it is vsock
 * and the addon does not load, say why and exit non-zero rather than misbehave. A vsock
 * command port alone is optional: warn and carry on without it. True when vsock is in use.
 */
function prepareVsock(config: ProbeConfig): boolean {
  const usesVsock = (a: string | null) => a !== null && parseAddress(a).kind === 'vsock';
  if (!usesVsock(config.connect) && !usesVsock(config.listen)) return false;
  try {
    enableVsock();
    return true;
  } catch (err) {
    const why = (err as Error).message;
    if (usesVsock(config.connect)) {
      process.stderr.write(`vsockdiag-probe: cannot use vsock (${config.connect}): ${why}\n`);
      process.exit(1);
    }
    log('warn', `command port ${config.listen} disabled: cannot use vsock: ${why}`);
    config.listen = null;
    return false;
  }
}

/**
 * The Pipe handle's self-test (vsock/index.ts), run by the first vsock connection once its
 * hello is out (or now, if none got that far): over a collector address on vsock, a Node
 * whose handle misbehaves is no use, so the probe exits 1 with the reason. (A command port
 * that could not open has said so itself.)
 */
async function requireVsock(config: ProbeConfig): Promise<void> {
  if (parseAddress(config.connect).kind !== 'vsock') return;
  try {
    await vsockUsable();
  } catch (err) {
    process.stderr.write(`vsockdiag-probe: cannot use vsock (${config.connect}): ${(err as Error).message}\n`);
    process.exit(1);
  }
}
