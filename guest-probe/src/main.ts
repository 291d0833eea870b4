// vsockdiag-probe: entry point of the bundled guest binary.

import { ConfigError, formatConfig, parseArgs, usage } from './config.js';
import { PROBE_VERSION, Probe } from './probe.js';

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
