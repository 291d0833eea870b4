// Settings from VSOCKDIAG_* variables and token files (cli/settings.ts), checked on the real
// program: its collector command runs a stand-in action that records what it was given.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildProgram } from '../src/cli/main.js';
import { SettingsError, bindEnvironment, envName, readTokenFile, resolveToken } from '../src/cli/settings.js';

const saved = { ...process.env };
let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-settings-'));
});
afterEach(() => {
  for (const k of Object.keys(process.env)) if (k.startsWith('VSOCKDIAG_') && !(k in saved)) delete process.env[k];
  Object.assign(process.env, saved);
  fs.rmSync(dir, { recursive: true, force: true });
});

/** The collector command's options and token as the real program parses `args`. */
async function collectorSettings(args: string[]): Promise<{ opts: Record<string, unknown>; token: string | undefined }> {
  const program = buildProgram().exitOverride();
  const collector = program.commands.find((c) => c.name() === 'collector')!.exitOverride();
  let seen: { opts: Record<string, unknown>; token: string | undefined } | undefined;
  collector.action((opts: Record<string, unknown>, cmd: Command) => {
    seen = { opts, token: resolveToken(cmd) };
  });
  await program.parseAsync(['node', 'vsockdiag', 'collector', ...args]);
  return seen!;
}

function tokenFile(content: string, mode = 0o600): string {
  const file = path.join(dir, 'token');
  fs.writeFileSync(file, content, { mode });
  fs.chmodSync(file, mode);
  return file;
}

describe('VSOCKDIAG_* variables', () => {
  it('every collector flag has one, named after it', () => {
    const collector = buildProgram().commands.find((c) => c.name() === 'collector')!;
    const flags = collector.options.filter((o) => o.long && o.long !== '--help');
    expect(flags.length).toBeGreaterThan(10);
    for (const o of flags) expect(o.envVar, o.long).toBe(envName(o.long!));
    expect(envName('--retain-per-sandbox')).toBe('VSOCKDIAG_RETAIN_PER_SANDBOX');
  });

  it('sets what the command line leaves out; a flag beats its variable', async () => {
    process.env.VSOCKDIAG_STALL_AFTER = '3s';
    process.env.VSOCKDIAG_STORM_THRESHOLD = '42';
    process.env.VSOCKDIAG_ON_STUCK = 'quit';
    process.env.VSOCKDIAG_LOG_LEVEL = 'debug';
    const { opts } = await collectorSettings(['--stall-after', '7s', '--log-level', 'warn']);
    expect(opts).toMatchObject({ stallAfter: 7000, stormThreshold: 42, onStuck: 'quit', logLevel: 'warn' });
  });

  it('is checked like the flag it stands for', async () => {
    process.env.VSOCKDIAG_STALL_AFTER = 'soon';
    await expect(collectorSettings([])).rejects.toThrow(/soon/);
    delete process.env.VSOCKDIAG_STALL_AFTER;
    process.env.VSOCKDIAG_LOG_LEVEL = 'loud';
    await expect(collectorSettings([])).rejects.toThrow(/loud/);
  });

  it('says yes or no for a flag without a value ("0" is off, not on)', async () => {
    const run = async (env: Record<string, string>, args: string[] = []) => {
      Object.assign(process.env, env);
      let got: Record<string, unknown> = {};
      const cmd = bindEnvironment(new Command('t'))
        .exitOverride()
        .option('--per-sandbox', 'a switch')
        .option('--no-color', 'a negated switch')
        .action((o) => void (got = o));
      await cmd.parseAsync(['node', 't', ...args]);
      for (const k of Object.keys(env)) delete process.env[k];
      return got;
    };
    expect(await run({ VSOCKDIAG_PER_SANDBOX: '0' })).toMatchObject({ perSandbox: false });
    expect(await run({ VSOCKDIAG_PER_SANDBOX: 'yes' })).toMatchObject({ perSandbox: true });
    expect(await run({ VSOCKDIAG_PER_SANDBOX: '0' }, ['--per-sandbox'])).toMatchObject({ perSandbox: true });
    expect(await run({ VSOCKDIAG_NO_COLOR: '1' })).toMatchObject({ color: false });
    expect(await run({ VSOCKDIAG_NO_COLOR: 'false' })).toMatchObject({ color: true });
    await expect(run({ VSOCKDIAG_PER_SANDBOX: 'maybe' })).rejects.toThrow(/VSOCKDIAG_PER_SANDBOX=maybe: give 1 or 0/);
  });
});

describe('the token', () => {
  it('comes from a file, without its trailing newline', async () => {
    const file = tokenFile('s3cret\n');
    expect((await collectorSettings(['--token-file', file])).token).toBe('s3cret');
    process.env.VSOCKDIAG_TOKEN_FILE = file;
    expect((await collectorSettings([])).token).toBe('s3cret');
  });

  it('from the command line beats the environment, whichever way each is given', async () => {
    process.env.VSOCKDIAG_TOKEN = 'from-env';
    expect((await collectorSettings(['--token-file', tokenFile('from-file\n')])).token).toBe('from-file');
    delete process.env.VSOCKDIAG_TOKEN;
    process.env.VSOCKDIAG_TOKEN_FILE = path.join(dir, 'token');
    expect((await collectorSettings(['--token', 'from-cli'])).token).toBe('from-cli');
  });

  it('given twice by one source is refused', async () => {
    await expect(collectorSettings(['--token', 'a', '--token-file', tokenFile('b')])).rejects.toThrow(SettingsError);
  });

  it('file: clear errors when unreadable, empty, several lines or readable by everyone', () => {
    expect(() => readTokenFile(path.join(dir, 'missing'))).toThrow(/token file .*missing: ENOENT/);
    expect(() => readTokenFile(dir)).toThrow(/not a regular file/);
    expect(() => readTokenFile(tokenFile('\n'))).toThrow(/is empty/);
    expect(() => readTokenFile(tokenFile('a\nb\n'))).toThrow(/more than one line/);
    expect(() => readTokenFile(tokenFile('t\n', 0o644))).toThrow(/readable by every user \(mode 0644\)/);
    expect(readTokenFile(tokenFile('t\r\n', 0o640))).toBe('t');
  });
});
