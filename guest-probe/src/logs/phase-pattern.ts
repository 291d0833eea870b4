// Which log lines are phase markers: a regular expression whose first capture group names
// the phase. The default matches envd's own start-up lines, `envd startup: <description>`.

import { MAX_NAME, MAX_TEXT } from '@vsockdiag/proto';
import { cutString } from './lines.js';

export const DEFAULT_PHASE_PATTERN = '^envd startup: (.+)$';

export interface LogPhase {
  /** The first capture group, trimmed and cut to MAX_NAME; absent when it matched nothing. */
  name?: string;
  /** The whole line (cut to MAX_TEXT). */
  status: string;
}

/** Compiles a configured phase pattern; throws an Error saying what is wrong with it. */
export function compilePhasePattern(source: string): RegExp {
  let re: RegExp;
  try {
    // No flags: a 'g' or 'y' regex would carry lastIndex from one line to the next.
    re = new RegExp(source);
  } catch (err) {
    throw new Error(`invalid phase pattern ${JSON.stringify(source)}: ${(err as Error).message}`);
  }
  // The number of groups: matching the empty alternative yields one slot per group.
  const groups = (new RegExp(`${source}|`).exec('')?.length ?? 1) - 1;
  if (groups < 1) {
    throw new Error(
      `phase pattern ${JSON.stringify(source)} has no capture group: the first group names the phase, e.g. ${JSON.stringify(DEFAULT_PHASE_PATTERN)}`,
    );
  }
  return re;
}

/** The phase a log line marks, or null when it is not a phase line. */
export function phaseFromLine(re: RegExp, line: string): LogPhase | null {
  const m = re.exec(line);
  if (!m) return null;
  const name = m[1]?.trim();
  return {
    ...(name ? { name: cutString(name, MAX_NAME) } : {}),
    status: cutString(line, MAX_TEXT),
  };
}
