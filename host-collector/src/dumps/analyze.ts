// One entry point for any dump text: detect what it is, parse and group it, summarise it
// for a terminal, and compare two of them. The API, the CLI (`dump`, `parse-dump`) and
// automatic dumps all go through here, so they show the same structure.

import { detectDumpKind } from './detect.js';
import { diffDumps, diffThreads } from './diff.js';
import { parseGoroutines } from './goroutines.js';
import { MAX_DUMP_LINE_CHARS } from './lines.js';
import { groupGoroutines, summarize, type GoroutineGroup } from './group.js';
import { groupThreads, parseThreads, summarizeThreads, type ThreadGroup } from './threads.js';

export type DumpAnalysis =
  | {
      kind: 'goroutines';
      /** How many goroutines were parsed. */
      goroutines: number;
      /** The dump's first line of cause ("SIGQUIT: quit", "panic: …"), if any. */
      reason?: string;
      /** The text ended in the middle of a goroutine. */
      truncated?: boolean;
      /** Lines too long to read (MAX_DUMP_LINE_CHARS), when there were any. */
      longLines?: number;
      goroutineGroups: GoroutineGroup[];
    }
  | {
      kind: 'threads';
      threads: { pid: number; comm: string; arch?: string; tasks: number; longLines?: number; groups: ThreadGroup[] };
    }
  | { kind: 'unknown' };

export function analyzeDump(text: string): DumpAnalysis {
  switch (detectDumpKind(text)) {
    case 'goroutines': {
      const dump = parseGoroutines(text);
      return {
        kind: 'goroutines',
        goroutines: dump.goroutines.length,
        ...(dump.reason ? { reason: dump.reason } : {}),
        ...(dump.truncated ? { truncated: true } : {}),
        ...(dump.longLines ? { longLines: dump.longLines } : {}),
        goroutineGroups: groupGoroutines(dump),
      };
    }
    case 'threads': {
      const dump = parseThreads(text);
      return {
        kind: 'threads',
        threads: {
          pid: dump.pid,
          comm: dump.comm,
          ...(dump.arch ? { arch: dump.arch } : {}),
          tasks: dump.tasks.length,
          ...(dump.longLines ? { longLines: dump.longLines } : {}),
          groups: groupThreads(dump),
        },
      };
    }
    case 'unknown':
      return { kind: 'unknown' };
  }
}

/** The most interesting group: where the target is stuck, and how many are there. */
export function topGroup(a: DumpAnalysis): { blockedIn: string; count: number } | null {
  if (a.kind === 'goroutines') {
    const g = a.goroutineGroups[0];
    return g ? { blockedIn: g.blockedIn?.func ?? g.frames[0]?.func ?? g.state, count: g.count } : null;
  }
  if (a.kind === 'threads') {
    const g = a.threads.groups[0];
    return g ? { blockedIn: g.blockedIn, count: g.count } : null;
  }
  return null;
}

/** The compact terminal view: one line per group (count, state, wait, blocked-in frame). */
export function summarizeAnalysis(a: DumpAnalysis, limit = 20): string {
  switch (a.kind) {
    case 'goroutines':
      return `${a.goroutines} goroutines in ${a.goroutineGroups.length} groups${a.truncated ? ' (dump cut short)' : ''}${longLinesNote(a.longLines)}\n${summarize(a.goroutineGroups, { limit })}`;
    case 'threads':
      return `${a.threads.tasks} threads of pid ${a.threads.pid} (${a.threads.comm}) in ${a.threads.groups.length} groups${longLinesNote(a.threads.longLines)}\n${summarizeThreads(a.threads.groups, { limit })}`;
    case 'unknown':
      return 'not a goroutine or threads dump\n';
  }
}

function longLinesNote(n: number | undefined): string {
  return n ? ` (${n} line${n === 1 ? '' : 's'} over ${MAX_DUMP_LINE_CHARS} characters not read)` : '';
}

/** What did not move between two dumps of the same kind. */
export function diffAnalyses(olderText: string, newerText: string) {
  const kind = detectDumpKind(newerText);
  if (kind !== detectDumpKind(olderText)) return { kind: 'mismatch' as const };
  if (kind === 'goroutines') {
    const older = groupGoroutines(parseGoroutines(olderText), { allIds: true });
    const newer = groupGoroutines(parseGoroutines(newerText), { allIds: true });
    return { kind, ...diffDumps(older, newer) };
  }
  if (kind === 'threads') return { kind, ...diffThreads(parseThreads(olderText), parseThreads(newerText)) };
  return { kind: 'unknown' as const };
}
