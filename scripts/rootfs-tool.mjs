// Helpers for scripts/rootfs-install.sh that look at a VM root filesystem from outside it:
//
//   node scripts/rootfs-tool.mjs resolve ROOTFS PATH
//     Prints where PATH (as the guest sees it) is on this machine, following symlinks the
//     way the guest would: an absolute link target is taken inside ROOTFS, never on the
//     host (Debian's runit has /etc/runit/runsvdir/current -> /etc/runit/runsvdir/default).
//
//   node scripts/rootfs-tool.mjs check-libs ROOTFS ARCH FILE...
//     Whether the ELF files (the probe's Node and addon) can run in ROOTFS: the right
//     architecture; only the C and C++ runtime needed (libc, libm, libstdc++, libgcc_s, ...,
//     so the probe never depends on the template's own Node or libraries); and, when
//     ROOTFS holds a C library, its dynamic loader and each of those libraries there, new
//     enough for every symbol version the files ask for. Exit 0 when they can (a ROOTFS
//     with no C library yet, e.g. an empty folder, is not checked against), 1 with what is
//     missing when they cannot. Nothing is executed: readelf reads the files, for arm64 too
//     (ldd would run the binary's loader on this machine, and answer for this machine).

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** The C and C++ runtime: what an image with nothing else still has. */
const RUNTIME =
  /^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$/;

const ARCHES = {
  x64: { machine: 'Advanced Micro Devices X86-64', triplet: 'x86_64-linux-gnu', musl: 'x86_64' },
  arm64: { machine: 'AArch64', triplet: 'aarch64-linux-gnu', musl: 'aarch64' },
};

/** PATH inside ROOT, symlinks followed as the guest would; the result is a host path. */
export function resolveInRoot(root, guestPath) {
  const parts = guestPath.split('/').filter(Boolean);
  let cur = []; // resolved components under root
  let hops = 0;
  while (parts.length > 0) {
    const name = parts.shift();
    if (name === '.') continue;
    if (name === '..') {
      cur.pop(); // never above the root
      continue;
    }
    const host = path.join(root, ...cur, name);
    let st;
    try {
      st = fs.lstatSync(host);
    } catch {
      // Missing: the rest is taken as written.
      cur.push(name, ...parts);
      break;
    }
    if (!st.isSymbolicLink()) {
      cur.push(name);
      continue;
    }
    if (++hops > 40) throw new Error(`too many symlinks resolving ${guestPath} in ${root}`);
    const target = fs.readlinkSync(host);
    if (target.startsWith('/')) cur = [];
    parts.unshift(...target.split('/').filter(Boolean));
  }
  return path.join(root, ...cur);
}

function readelf(flag, file) {
  return execFileSync('readelf', ['-W', flag, file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 1 << 30 });
}

/** Machine, interpreter, NEEDED libraries and the symbol versions wanted from each. */
function elfNeeds(file) {
  const machine = /Machine:\s+(.+)/.exec(readelf('-h', file))?.[1]?.trim() ?? '?';
  const interp = /Requesting program interpreter: ([^\]]+)\]/.exec(readelf('-l', file))?.[1] ?? null;
  const needed = [...readelf('-d', file).matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
  const versions = new Map(); // library -> Set of version names
  const v = readelf('-V', file);
  const needs = v.indexOf('Version needs section');
  if (needs >= 0) {
    let lib = null;
    for (const line of v.slice(needs).split('\n')) {
      const f = /File: (\S+)/.exec(line);
      if (f) {
        lib = f[1];
        if (!versions.has(lib)) versions.set(lib, new Set());
        continue;
      }
      const n = /^\s+0x[0-9a-f]+:\s+Name: (\S+)/.exec(line);
      if (n && lib) versions.get(lib).add(n[1]);
    }
  }
  return { machine, interp, needed, versions };
}

/** The symbol versions a library defines. */
function definedVersions(file) {
  const v = readelf('-V', file);
  const defs = v.indexOf('Version definition section');
  const out = new Set();
  if (defs < 0) return out;
  const end = v.indexOf('Version needs section', defs);
  for (const m of v.slice(defs, end < 0 ? undefined : end).matchAll(/Name: (\S+)/g)) out.add(m[1]);
  return out;
}

/** Highest of GLIBC_2.28, GLIBC_2.2.5, ...: for messages. */
function highest(names) {
  const key = (s) => (s.match(/\d+/g) ?? []).map(Number);
  return [...names]
    .sort((a, b) => {
      const [x, y] = [key(a), key(b)];
      for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? -1) !== (y[i] ?? -1)) return (x[i] ?? -1) - (y[i] ?? -1);
      return 0;
    })
    .at(-1);
}

/** Directories the guest's loader searches: ld.so.conf (one level of include) and the defaults. */
function libraryDirs(root, triplet) {
  const dirs = [];
  const readConf = (guestFile, depth) => {
    let text;
    try {
      text = fs.readFileSync(resolveInRoot(root, guestFile), 'utf8');
    } catch {
      return;
    }
    for (let line of text.split('\n')) {
      line = line.replace(/#.*/, '').trim();
      if (!line) continue;
      const inc = /^include\s+(.+)$/.exec(line);
      if (inc) {
        if (depth > 0) continue;
        const pattern = inc[1].startsWith('/') ? inc[1] : path.posix.join(path.posix.dirname(guestFile), inc[1]);
        const dir = resolveInRoot(root, path.posix.dirname(pattern));
        const glob = new RegExp(
          `^${path.posix
            .basename(pattern)
            .replace(/[.+^${}()|[\]\\]/g, '\\$&')
            .replace(/\*/g, '.*')}$`,
        );
        let names = [];
        try {
          names = fs
            .readdirSync(dir)
            .filter((n) => glob.test(n))
            .sort();
        } catch {
          /* no such folder */
        }
        for (const n of names) readConf(path.posix.join(path.posix.dirname(pattern), n), depth + 1);
      } else if (line.startsWith('/')) dirs.push(line);
    }
  };
  readConf('/etc/ld.so.conf', 0);
  dirs.push(`/lib/${triplet}`, `/usr/lib/${triplet}`, '/lib64', '/usr/lib64', '/lib', '/usr/lib');
  return [...new Set(dirs)];
}

function findLibrary(root, dirs, name) {
  for (const d of dirs) {
    const host = resolveInRoot(root, path.posix.join(d, name));
    try {
      if (fs.statSync(host).isFile()) return { guest: path.posix.join(d, name), host };
    } catch {
      /* not here */
    }
  }
  return null;
}

function checkLibs(root, arch, files) {
  const a = ARCHES[arch];
  if (!a) throw new Error(`unknown arch ${arch} (x64 or arm64)`);
  const problems = [];
  const dirs = libraryDirs(root, a.triplet);
  const libc = findLibrary(root, dirs, 'libc.so.6');
  const musl = [`/lib/ld-musl-${a.musl}.so.1`, `/usr/lib/ld-musl-${a.musl}.so.1`].find((p) => fs.existsSync(resolveInRoot(root, p)));
  const wanted = new Map(); // runtime library -> versions
  for (const file of files) {
    const e = elfNeeds(file);
    const name = path.basename(file);
    if (e.machine !== a.machine) {
      problems.push(`${file} is built for ${e.machine}, not ${arch} (${a.machine})`);
      continue;
    }
    const extra = e.needed.filter((l) => !RUNTIME.test(l));
    if (extra.length) {
      const libnode = extra.some((l) => l.startsWith('libnode.so'));
      problems.push(
        `${file} needs libraries beyond the C and C++ runtime, which a minimal image lacks and the probe must not borrow from the template: ${extra.join(', ')}` +
          (libnode ? ". This looks like Debian's or Ubuntu's own nodejs package, which keeps Node in libnode.so" : '') +
          '. Use a self-contained Node instead, e.g. the linux tarball from https://nodejs.org/en/download (it needs only libc, libm, libstdc++ and libgcc_s), and pass it as NODE_BIN=/path/to/node',
      );
    }
    if (musl && !libc) continue; // said once below
    if (libc && e.interp && !fs.existsSync(resolveInRoot(root, e.interp))) {
      problems.push(`${name} needs the dynamic loader ${e.interp}, which ROOTFS does not have`);
    }
    for (const lib of e.needed.filter((l) => RUNTIME.test(l))) {
      const set = wanted.get(lib) ?? new Set();
      for (const v of e.versions.get(lib) ?? []) set.add(v);
      wanted.set(lib, set);
    }
  }
  if (musl && !libc) {
    problems.push(
      `ROOTFS is a musl image (${musl}, Alpine's C library) and the probe does not run on musl yet: its Node and its addon are glibc builds and would not start there. Nothing was installed`,
    );
  }
  const summary = [...wanted].map(([lib, vs]) => (vs.size ? `${lib} (${highest(vs)})` : lib)).join(', ');
  if (!libc && !musl && problems.length === 0) {
    console.log(`rootfs-install: ROOTFS has no C library yet, so it is not checked against; the probe needs from the image: ${summary}`);
    return 0;
  }
  if (libc) {
    for (const [lib, vs] of wanted) {
      const found = findLibrary(root, dirs, lib);
      if (!found) {
        problems.push(`ROOTFS has no ${lib} (looked in ${dirs.join(' ')})`);
        continue;
      }
      const defined = definedVersions(found.host);
      const missing = [...vs].filter((v) => !defined.has(v));
      if (missing.length) {
        problems.push(
          `ROOTFS's ${found.guest} is too old: it lacks ${missing.join(', ')}, which the probe's Node needs (its newest there: ${highest(defined) ?? 'none'})`,
        );
      }
    }
  }
  if (problems.length) {
    for (const p of problems) console.error(`rootfs-install: ${p}`);
    return 1;
  }
  console.log(`rootfs-install: ROOTFS has what the probe needs: ${summary}`);
  return 0;
}

const [cmd, root, ...rest] = process.argv.slice(2);
try {
  if (cmd === 'resolve' && root && rest.length === 1) {
    console.log(resolveInRoot(root, rest[0]));
  } else if (cmd === 'check-libs' && root && rest.length >= 2) {
    process.exitCode = checkLibs(root, rest[0], rest.slice(1));
  } else {
    console.error('usage: rootfs-tool.mjs resolve ROOTFS PATH | check-libs ROOTFS ARCH FILE...');
    process.exitCode = 2;
  }
} catch (err) {
  console.error(`rootfs-install: ${err.message}`);
  process.exitCode = 1;
}
