// vsockdiag-probe: entry point of the bundled guest binary.

import { parseAddress } from '@vsockdiag/proto';
import { ConfigError, formatConfig, parseArgs, usage, type ProbeConfig } from './config.js';
import { PROBE_VERSION, Probe } from './probe.js';
import { enableVsock } from './vsock/index.js';

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

  await prepareVsock(parsed.config);
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
}

/**
 * vsock needs the addon and a working Pipe handle. The collector address is the probe's
 * reason to live: if it is vsock and vsock cannot work, say why and exit non-zero rather
 * than misbehave. A vsock command port alone is optional: warn and carry on without it.
 */
async function prepareVsock(config: ProbeConfig): Promise<void> {
  const usesVsock = (a: string | null) => a !== null && parseAddress(a).kind === 'vsock';
  if (!usesVsock(config.connect) && !usesVsock(config.listen)) return;
  try {
    await enableVsock();
  } catch (err) {
    const why = (err as Error).message;
    if (usesVsock(config.connect)) {
      process.stderr.write(`vsockdiag-probe: cannot use vsock (${config.connect}): ${why}\n`);
      process.exit(1);
    }
    log('warn', `command port ${config.listen} disabled: cannot use vsock: ${why}`);
    config.listen = null;
  }
}
