/**
 * /proc/<pid>/status — memory split (anon vs file-backed) and thread count of one process.
 */
import { procBuffer, readProcInto } from './read.js';
import { lineEnd, parseDec, skipBlanks, startsWithAscii } from './scan.js';

export interface PidStatusFields {
  /** VmRSS in KiB; null when absent (zombies and kernel threads have no Vm* lines). */
  vmRssKb: number | null;
  /** RssAnon in KiB (private, unreclaimable memory); null when absent. */
  rssAnonKb: number | null;
  /** RssFile in KiB (file-backed, reclaimable pages); null when absent. */
  rssFileKb: number | null;
  /** Threads; null when absent. */
  threads: number | null;
}

/** Reads the fields of /proc/<pid>/status in one pass; null when the process is gone. */
export function readPidStatusFields(pid: number, procRoot = '/proc'): PidStatusFields | null {
  const n = readProcInto(`${procRoot}/${pid}/status`);
  if (n < 0) return null;
  return parseStatusBytes(procBuffer(), n);
}

function valueAfter(buf: Uint8Array, i: number, end: number): number | null {
  const v = parseDec(buf, skipBlanks(buf, i, end), end);
  return Number.isNaN(v) ? null : v;
}

/** Parses the bytes of a status file in buf[0, end). Exported for tests. */
export function parseStatusBytes(buf: Buffer, end: number): PidStatusFields {
  const out: PidStatusFields = { vmRssKb: null, rssAnonKb: null, rssFileKb: null, threads: null };
  let found = 0;
  let i = 0;
  while (i < end && found < 4) {
    const c = buf[i];
    if (c === 0x56 /* V */ && startsWithAscii(buf, i, end, 'VmRSS:')) {
      out.vmRssKb = valueAfter(buf, i + 6, end);
      found++;
    } else if (c === 0x52 /* R */) {
      if (startsWithAscii(buf, i, end, 'RssAnon:')) {
        out.rssAnonKb = valueAfter(buf, i + 8, end);
        found++;
      } else if (startsWithAscii(buf, i, end, 'RssFile:')) {
        out.rssFileKb = valueAfter(buf, i + 8, end);
        found++;
      }
    } else if (c === 0x54 /* T */ && startsWithAscii(buf, i, end, 'Threads:')) {
      out.threads = valueAfter(buf, i + 8, end);
      found++;
    }
    i = lineEnd(buf, i, end) + 1;
  }
  return out;
}
