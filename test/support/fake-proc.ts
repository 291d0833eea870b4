// A fake /proc tree in a temporary folder, for the guest's readers (they all take a
// procRoot). Files are written as the kernel shows them: a stat line has every field of
// proc(5), a cmdline is NUL-terminated arguments, fd/ holds one link per descriptor.

import fs from 'node:fs';
import path from 'node:path';

export interface StatOptions {
  /** The last field written (52 on current kernels; older ones print fewer). */
  count?: number;
  /** The value of a field `fields` does not set; 0 unless given. */
  fill?: (field: number) => string | number;
}

/**
 * `/proc/<pid>/stat`: "pid (comm) " then fields 3 to `count`, numbered as in proc(5).
 * `fields` sets fields by number; field 3 (the state) is "S" unless set.
 */
export function statLine(
  pid: number,
  comm: string,
  fields: Record<number, string | number> = {},
  { count = 52, fill = () => 0 }: StatOptions = {},
): string {
  const parts: string[] = [];
  for (let f = 3; f <= count; f++) parts.push(String(fields[f] ?? (f === 3 ? 'S' : fill(f))));
  return `${pid} (${comm}) ${parts.join(' ')}\n`;
}

export interface FakeProcess {
  /** Written to comm (with the kernel's newline) and into the stat line. */
  comm: string;
  /** The arguments; none (the default) is the empty cmdline of a kernel thread or zombie. */
  cmdline?: string[];
  /** Stat fields by proc(5) number (see statLine). */
  stat?: Record<number, string | number>;
  /** What each descriptor links to (fd/0, fd/1, …), e.g. "socket:[123]". */
  fds?: string[];
}

export class FakeProcTree {
  constructor(readonly root: string) {}

  /** Writes each file at its path under the root, or under its folder `under` (a pid, say),
   *  making folders. A file given as undefined is left out. */
  write(files: Record<string, string | undefined>, under: string | number = ''): this {
    for (const [rel, text] of Object.entries(files)) {
      if (text === undefined) continue;
      const file = path.join(this.root, String(under), rel);
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, text);
    }
    return this;
  }

  /** Makes an empty folder (a task that is gone but still listed, say). */
  mkdir(rel: string): this {
    fs.mkdirSync(path.join(this.root, rel), { recursive: true });
    return this;
  }

  /** Writes (or rewrites) /<pid>: comm, cmdline, stat and fd/. */
  process(pid: number, p: FakeProcess): this {
    const dir = path.join(this.root, String(pid));
    fs.rmSync(path.join(dir, 'fd'), { recursive: true, force: true });
    fs.mkdirSync(path.join(dir, 'fd'), { recursive: true });
    this.write(
      {
        comm: `${p.comm}\n`,
        cmdline: (p.cmdline ?? []).map((a) => `${a}\0`).join(''),
        stat: statLine(pid, p.comm, p.stat),
      },
      pid,
    );
    (p.fds ?? []).forEach((target, fd) => fs.symlinkSync(target, path.join(dir, 'fd', String(fd))));
    return this;
  }

  /** Removes /<pid> (or any path under the root), as when a process is reaped. Its files
   *  are emptied first: a reader holding one open (proc/read.ts ProcFile) then reads nothing,
   *  as procfs answers such a reader with ESRCH. */
  remove(rel: string | number): this {
    const at = path.join(this.root, String(rel));
    const empty = (p: string): void => {
      const st = fs.lstatSync(p, { throwIfNoEntry: false });
      if (st?.isDirectory()) for (const name of fs.readdirSync(p)) empty(path.join(p, name));
      else if (st?.isFile()) fs.truncateSync(p);
    };
    empty(at);
    fs.rmSync(at, { recursive: true, force: true });
    return this;
  }
}

/** A fake /proc in a new folder under `parent`, holding `files`. Removing `parent` removes it. */
export function fakeProcTree(parent: string, files: Record<string, string> = {}): FakeProcTree {
  return new FakeProcTree(fs.mkdtempSync(path.join(parent, 'proc-'))).write(files);
}
