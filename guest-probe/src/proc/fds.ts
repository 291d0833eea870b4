/**
 * File-descriptor and pid listing helpers. These call readdir/readlink and allocate per entry:
 * use them on demand (or at a low rate), never on every sampling tick.
 */
import { readdirSync, readlinkSync } from 'node:fs';

function errCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}

/** Number of open fds of `pid` (entries of /proc/<pid>/fd); null when the process is gone. */
export function countFds(pid: number, procRoot = '/proc'): number | null {
  try {
    return readdirSync(`${procRoot}/${pid}/fd`).length;
  } catch (err) {
    const code = errCode(err);
    if (code === 'ENOENT' || code === 'ESRCH') return null;
    throw err;
  }
}

/**
 * The first pid in `pids` holding an fd whose link is `socket:[<inode>]`, or null. Processes
 * that are gone or whose fd table we may not read (EACCES) are skipped, as are fds closed while
 * we look.
 */
export function findSocketOwner(inode: number, pids: Iterable<number>, procRoot = '/proc'): number | null {
  const target = `socket:[${inode}]`;
  for (const pid of pids) {
    const dir = `${procRoot}/${pid}/fd`;
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch (err) {
      const code = errCode(err);
      if (code === 'ENOENT' || code === 'ESRCH' || code === 'EACCES' || code === 'ENOTDIR') continue;
      throw err;
    }
    for (const name of names) {
      let link: string;
      try {
        link = readlinkSync(`${dir}/${name}`);
      } catch {
        continue; // fd closed meanwhile, process gone, or not a link
      }
      if (link === target) return pid;
    }
  }
  return null;
}

function isAllDigits(s: string): boolean {
  if (s.length === 0) return false;
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

/** Pids of all processes (thread-group leaders) visible in procRoot, ascending. */
export function listPids(procRoot = '/proc'): number[] {
  const out: number[] = [];
  for (const name of readdirSync(procRoot)) {
    if (isAllDigits(name)) out.push(Number(name));
  }
  out.sort((a, b) => a - b);
  return out;
}
