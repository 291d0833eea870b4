// One entry point for any dump text: detect what it is, parse and group it, summarise it
// for a terminal, and compare two of them. The API, the CLI (`dump`, `parse-dump`) and
// automatic dumps all go through here, so they show the same structure.

import { groupByCreator, summarizeCreators, type CreatorGroup } from './creators.js';
import { detectDumpKind } from './detect.js';
import { diffDumps, diffThreads } from './diff.js';
import { parseGoroutines, type GoroutineDump } from './goroutines.js';
import { MAX_DUMP_LINE_CHARS } from './lines.js';
import { groupGoroutines, keyGoroutines, summarize, type GoroutineGroup } from './group.js';

/** How many unparsed headers an analysis lists (all are counted). */
export const MAX_UNPARSED_HEADERS = 20;

/** A goroutine header that was not understood: where it is and what it said (cut). */
export interface UnparsedHeader {
  line: number;
  id: number;
  text: string;
}
import { groupThreads, parseThreads, summarizeThreads, type ThreadGroup } from './threads.js';

export type DumpAnalysis =
  | {
      kind: 'goroutines';
      /** How many goroutines were read (with the unparsed ones). */
      goroutines: number;
      /**
       * Lines that start a goroutine, counted apart from the parse; more than `goroutines`
       * means the parser lost some (shown as a warning). Absent in analyses stored before it.
       */
      headers?: number;
      /** Goroutines whose header was not understood, kept (state "?", frames read) and marked. */
      unparsed?: number;
      /** The first MAX_UNPARSED_HEADERS of them. */
      unparsedHeaders?: UnparsedHeader[];
      /** The dump's first line of cause ("SIGQUIT: quit", "panic: …"), if any. */
      reason?: string;
      /** The text ended in the middle of a goroutine. */
      truncated?: boolean;
      /** Lines too long to read (MAX_DUMP_LINE_CHARS), when there were any. */
      longLines?: number;
      goroutineGroups: GoroutineGroup[];
      /** The same goroutines by creator (creators.ts). Absent in analyses stored before it. */
      creatorGroups?: CreatorGroup[];
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
      // Both groupings key on the same stack keys: made once.
      const keyed = keyGoroutines(dump);
      return {
        kind: 'goroutines',
        goroutines: dump.goroutines.length,
        headers: dump.headers,
        ...unparsedOf(dump),
        ...(dump.reason ? { reason: dump.reason } : {}),
        ...(dump.truncated ? { truncated: true } : {}),
        ...(dump.longLines ? { longLines: dump.longLines } : {}),
        goroutineGroups: groupGoroutines(keyed),
        creatorGroups: groupByCreator(keyed),
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

function unparsedOf(dump: GoroutineDump): { unparsed?: number; unparsedHeaders?: UnparsedHeader[] } {
  const unparsed = dump.goroutines.filter((g) => g.unparsed);
  if (unparsed.length === 0) return {};
  return {
    unparsed: unparsed.length,
    unparsedHeaders: unparsed.slice(0, MAX_UNPARSED_HEADERS).map((g) => ({ line: g.headerLine ?? 0, id: g.id, text: g.header ?? '' })),
  };
}

/**
 * What a reader must know about the parse before trusting the groups, or "": goroutines whose
 * header was not understood (kept, marked), and goroutines the parser lost (headers it counted
 * but did not read, which is a bug).
 */
export function parseWarning(
  a: Pick<Extract<DumpAnalysis, { kind: 'goroutines' }>, 'goroutines' | 'headers' | 'unparsed' | 'unparsedHeaders'>,
): string {
  const out: string[] = [];
  if (a.unparsed) {
    const lines = (a.unparsedHeaders ?? []).map((h) => h.line);
    const more = a.unparsed > lines.length ? ', …' : '';
    out.push(
      `${a.unparsed} goroutine header${a.unparsed === 1 ? '' : 's'} not understood (kept as state "?"; line${lines.length === 1 ? '' : 's'} ${lines.join(', ')}${more})`,
    );
  }
  if (a.headers !== undefined && a.headers > a.goroutines) {
    const n = a.headers - a.goroutines;
    out.push(`${n} of ${a.headers} goroutine headers lost by the parser`);
  }
  return out.join('; ');
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

/** How many creator groups the terminal view lists after the stack groups. */
export const SUMMARY_CREATORS = 10;

/**
 * The compact terminal view: one line per stack group (count, state, wait, blocked-in frame,
 * labels), then the largest creator groups (count, creator, states, blocked-in frames).
 */
export function summarizeAnalysis(a: DumpAnalysis, limit = 20): string {
  switch (a.kind) {
    case 'goroutines': {
      const warning = parseWarning(a);
      const head = `${a.goroutines} goroutines in ${a.goroutineGroups.length} groups${a.truncated ? ' (dump cut short)' : ''}${longLinesNote(a.longLines)}`;
      let out = `${head}${warning ? `\nwarning: ${warning}` : ''}\n${summarize(a.goroutineGroups, { limit })}\n`;
      const creators = a.creatorGroups;
      if (creators?.length) {
        out += `\nby creator (${creators.length} creator${creators.length === 1 ? '' : 's'}):\n${summarizeCreators(creators, { limit: SUMMARY_CREATORS })}\n`;
      }
      return out;
    }
    case 'threads':
      return `${a.threads.tasks} threads of pid ${a.threads.pid} (${a.threads.comm}) in ${a.threads.groups.length} groups${longLinesNote(a.threads.longLines)}\n${summarizeThreads(a.threads.groups, { limit })}\n`;
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
