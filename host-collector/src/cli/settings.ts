// Settings from the environment and from files, for a collector run by systemd or Nomad:
// every flag of a command has a VSOCKDIAG_* variable derived from its name (so a flag added
// later gets one without a line here), a flag given on the command line beats its variable,
// and the API token can come from a file, never from the command line where `ps` shows it.

import fs from 'node:fs';
import type { Command } from 'commander';

/** --stall-after → VSOCKDIAG_STALL_AFTER (the probe's rule too: guest-probe/src/config.ts). */
export function envName(flag: string): string {
  return `VSOCKDIAG_${flag.replace(/^--/, '').toUpperCase().replace(/-/g, '_')}`;
}

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off', '']);

/**
 * From now on, each long flag added to `cmd` without a variable gets its VSOCKDIAG_* one
 * (commander subscribes an option to its variable as the option is added, so this wraps
 * addOption, which .option() calls too). Commander applies a variable only where the
 * command line gave nothing. For a flag without a value commander takes any value, "0"
 * too, as on: here the value must say yes or no.
 */
export function bindEnvironment(cmd: Command): Command {
  const addOption = cmd.addOption.bind(cmd);
  cmd.addOption = (option) => addOption(option.long && !option.envVar ? option.env(envName(option.long)) : option);
  cmd.hook('preAction', (self) => {
    for (const option of self.options) {
      const key = option.attributeName();
      if (option.required || option.optional || !option.envVar || self.getOptionValueSource(key) !== 'env') continue;
      const given = process.env[option.envVar] ?? '';
      const value = given.trim().toLowerCase();
      if (!TRUE.has(value) && !FALSE.has(value)) {
        throw new SettingsError(`${option.envVar}=${given}: give 1 or 0 (true/false, yes/no, on/off)`);
      }
      // A negated flag (--no-x) stores false when given: the variable says whether it is.
      self.setOptionValueWithSource(key, TRUE.has(value) !== option.negate, 'env');
    }
  });
  return cmd;
}

export class SettingsError extends Error {}

/**
 * The API token: --token or --token-file (or VSOCKDIAG_TOKEN / VSOCKDIAG_TOKEN_FILE), looked
 * up on the command and its parents. The command line beats the environment; one source
 * giving both is an error, as the two could disagree.
 */
export function resolveToken(cmd: Command): string | undefined {
  let best: { rank: number; token?: string; file?: string; where: string } | undefined;
  for (let c: Command | null = cmd; c; c = c.parent) {
    for (const key of ['token', 'tokenFile'] as const) {
      const value = c.getOptionValue(key) as string | undefined;
      const source = c.getOptionValueSource(key);
      if (value === undefined || (source !== 'cli' && source !== 'env')) continue;
      const rank = source === 'cli' ? 2 : 1;
      const where = source === 'cli' ? 'the command line' : 'the environment';
      if (!best || rank > best.rank) best = { rank, where };
      if (rank < best.rank) continue;
      if (key === 'token') best.token ??= value;
      else best.file ??= value;
    }
  }
  if (!best) return undefined;
  if (best.token !== undefined && best.file !== undefined) {
    throw new SettingsError(`both a token and a token file come from ${best.where}: give one`);
  }
  return best.file !== undefined ? readTokenFile(best.file) : best.token;
}

/**
 * A token file: its content, without the trailing newline an editor or `echo` leaves. The
 * file must be a regular file that not everyone can read (as ssh requires of a private key):
 * a token every local user can read protects nothing.
 */
export function readTokenFile(file: string): string {
  let text: string;
  try {
    const st = fs.statSync(file);
    if (!st.isFile()) throw new Error('not a regular file');
    if (st.mode & 0o004) {
      throw new Error(`readable by every user (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}): chmod o-r it`);
    }
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new SettingsError(`token file ${file}: ${(err as Error).message}`);
  }
  const token = text.replace(/\s+$/, '');
  if (!token) throw new SettingsError(`token file ${file} is empty`);
  if (/[\r\n]/.test(token)) throw new SettingsError(`token file ${file} holds more than one line`);
  return token;
}
