// Terminal output for the client commands.

import { formatDuration } from '@vsockdiag/proto';
import { isSandboxState, type SandboxState } from '../catalogue.js';
import type { summary } from '../http/present.js';

/** A sandbox as the API lists it (http/present.ts is the one source of that shape). */
export type SandboxSummary = ReturnType<typeof summary>;

const COLORS: Record<SandboxState, string> = {
  ready: '32',
  starting: '36',
  booting: '36',
  registered: '90',
  stuck: '31',
  exited: '31',
  silent: '33',
  paused: '34',
};

/** A state as the API gave it (a newer collector may know states this CLI does not). */
export function colorState(state: string, tty: boolean): string {
  return tty && isSandboxState(state) ? `\x1b[${COLORS[state]}m${state}\x1b[0m` : state;
}

/** How long since an ISO time, written as reasons write durations. */
export function sinceText(iso: string, now = Date.now()): string {
  return formatDuration(Math.max(0, now - Date.parse(iso)));
}

export function table(rows: SandboxSummary[], tty: boolean): string {
  if (rows.length === 0) return 'no sandboxes\n';
  const head = ['ID', 'STATE', 'FOR', 'GEN', 'SESSION', 'REASON'];
  const body = rows.map((r) => [r.id, r.state, sinceText(r.since), String(r.generation), String(r.session), r.reason]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[], color: boolean) =>
    cells
      .map((c, i) => {
        const padded = i === cells.length - 1 ? c : c.padEnd(widths[i]!);
        return color && i === 1 ? padded.replace(c, colorState(c, tty)) : padded;
      })
      .join('  ');
  return [line(head, false), ...body.map((b) => line(b, true))].join('\n') + '\n';
}
