// `make dist`: packs the built collector into vsockdiag-<version>.tgz, which installs with
// `npm install -g ./vsockdiag-<version>.tgz` on a machine without the repo and without a
// registry. The package mirrors the repo's layout, so the bundle finds what it finds here:
//   host-collector/dist/   the bundled collector and CLI (the `vsockdiag` bin) and its workers
//   web-ui/dist/           the dashboard (cli/main.ts looks for it at ../../web-ui/dist)
//   node_modules/          every runtime dependency of host-collector/package.json and what
//                          they depend on, copied from this checkout's install, declared as
//                          bundleDependencies: npm installs them from the tarball, fetches
//                          nothing, and runs no install script (the native SQLite module is
//                          already built: the package is for this platform and Node ABI).
// Usage: node scripts/make-dist.mjs [OUT_DIR]   (default: the repo root); prints the path.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const readJson = (file) => JSON.parse(fs.readFileSync(file, 'utf8'));
const collector = readJson(path.join(ROOT, 'host-collector/package.json'));
const outDir = path.resolve(process.argv[2] ?? ROOT);

for (const built of [
  'host-collector/dist/vsockdiag.js',
  'host-collector/dist/dump-worker.js',
  'host-collector/dist/readiness-worker.js',
  'web-ui/dist/index.html',
]) {
  if (!fs.existsSync(path.join(ROOT, built))) throw new Error(`${built} is missing: run "make build" first`);
}

/** Where Node would find package `name` when required from `dir`: the usual upward walk. */
function locate(name, dir) {
  for (let d = dir; ; d = path.dirname(d)) {
    const candidate = path.join(d, 'node_modules', name);
    if (fs.existsSync(path.join(candidate, 'package.json'))) return fs.realpathSync(candidate);
    if (d === path.dirname(d)) return null;
  }
}

/**
 * The install tree: install path (relative to the package root) → real source folder. Breadth
 * first, each package as high up as it can go (like npm's hoisting); a second version of a
 * name nests under the package that needs it. verifyTree() then checks every edge.
 */
function planTree(rootDeps, fromDir) {
  const tree = new Map();
  const queue = rootDeps.map((name) => ({ name, from: fromDir, parent: '' }));
  while (queue.length) {
    const { name, from, parent } = queue.shift();
    const src = locate(name, from);
    if (!src) throw new Error(`${name} (needed by ${parent || 'host-collector'}) is not installed`);
    // From the requiring package up to the root: reuse a copy Node would find, else take
    // the highest free place before one holding another version.
    let place = null;
    let reused = false;
    for (let at = parent; ; at = up(at)) {
      const slot = path.join(at, 'node_modules', name);
      const there = tree.get(slot);
      if (there === src) reused = true;
      if (there !== undefined) break;
      place = slot;
      if (at === '') break;
    }
    if (reused) continue;
    tree.set(place, src);
    for (const dep of edges(src)) queue.push({ name: dep, from: src, parent: place });
  }
  return tree;
}

/** What the package at `src` needs: its dependencies, and the optional and peer ones this
 *  install has (pnpm puts peers beside the package). */
function edges(src) {
  const m = readJson(path.join(src, 'package.json'));
  const optional = [...Object.keys(m.optionalDependencies ?? {}), ...Object.keys(m.peerDependencies ?? {})];
  return [...new Set([...Object.keys(m.dependencies ?? {}), ...optional.filter((dep) => locate(dep, src))])];
}

/** The install path holding `slot`'s node_modules folder ('' for the root). */
function up(at) {
  const i = at.lastIndexOf(`${path.sep}node_modules${path.sep}`);
  if (i >= 0) return at.slice(0, i);
  return '';
}

/** Node's resolution in the planned tree must give every package the copy it has here. */
function verifyTree(tree) {
  const byPlace = (rel, name) => {
    for (let at = rel; ; at = up(at)) {
      const slot = path.join(at, 'node_modules', name);
      if (tree.has(slot)) return tree.get(slot);
      if (at === '') return null;
    }
  };
  for (const [rel, src] of tree) {
    for (const dep of edges(src)) {
      if (byPlace(rel, dep) !== locate(dep, src)) throw new Error(`packing: ${rel} would not find its own ${dep}`);
    }
  }
}

/**
 * Copies one package (its own files, not its node_modules). A package built with node-gyp
 * keeps only its built addons from build/, and its manifest loses the install hooks and the
 * binding.gyp rule that would make npm build it again. npm packs a bundled dependency by
 * its own `files` and ignore files, which describe its published sources (better-sqlite3's
 * leave out build/): those go, so the pack holds exactly what was copied.
 */
function copyPackage(src, dest) {
  const native = fs.existsSync(path.join(src, 'binding.gyp'));
  fs.cpSync(src, dest, {
    recursive: true,
    dereference: true,
    filter: (file) => {
      const rel = path.relative(src, file);
      if (rel === '.npmignore' || rel === '.gitignore') return false;
      if (rel === 'node_modules' || rel.startsWith(`node_modules${path.sep}`)) return false;
      if (!native || !(rel === 'build' || rel.startsWith(`build${path.sep}`))) return true;
      return rel === 'build' || rel === path.join('build', 'Release') || /^build\/Release\/[^/]+\.node$/.test(rel);
    },
  });
  const manifestFile = path.join(dest, 'package.json');
  const manifest = readJson(manifestFile);
  delete manifest.files;
  for (const hook of ['preinstall', 'install', 'postinstall']) delete manifest.scripts?.[hook];
  if (native) manifest.gypfile = false;
  fs.writeFileSync(manifestFile, `${JSON.stringify(manifest, null, 2)}\n`);
}

const stage = fs.mkdtempSync(path.join(os.tmpdir(), 'vsockdiag-dist-'));
try {
  const pkgRoot = path.join(stage, 'package');
  for (const dir of ['host-collector/dist', 'web-ui/dist']) {
    fs.cpSync(path.join(ROOT, dir), path.join(pkgRoot, dir), { recursive: true });
  }
  // Workspace packages are bundled into dist by host-collector/build.mjs; the rest ship here.
  const runtime = Object.entries(collector.dependencies)
    .filter(([, spec]) => !spec.startsWith('workspace:'))
    .map(([name]) => name);
  const tree = planTree(runtime, path.join(ROOT, 'host-collector'));
  verifyTree(tree);
  for (const [rel, src] of tree) copyPackage(src, path.join(pkgRoot, rel));

  const major = process.versions.node.split('.')[0];
  const manifest = {
    name: 'vsockdiag',
    version: collector.version,
    description: collector.description,
    type: 'module',
    bin: { vsockdiag: 'host-collector/dist/vsockdiag.js' },
    // The native SQLite module was built for this Node's ABI, OS and CPU.
    engines: { node: `^${major}.0.0` },
    os: [process.platform],
    cpu: [process.arch],
    dependencies: Object.fromEntries(
      runtime.map((name) => [name, readJson(path.join(tree.get(path.join('node_modules', name)), 'package.json')).version]),
    ),
    bundleDependencies: runtime,
  };
  fs.writeFileSync(path.join(pkgRoot, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  fs.mkdirSync(outDir, { recursive: true });
  const packed = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', outDir], {
      cwd: pkgRoot,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
      // The listing names every file of every bundled dependency: past the default 1 MiB.
      maxBuffer: 256 * 1024 * 1024,
    }),
  );
  const tgz = path.join(outDir, packed[0].filename);
  // Whatever npm's packing rules, every staged file (the built addon above all) must be in.
  const inPack = new Set(packed[0].files.map((f) => f.path));
  const staged = fs.readdirSync(pkgRoot, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
  const left = staged.map((e) => path.relative(pkgRoot, path.join(e.parentPath, e.name))).filter((f) => !inPack.has(f));
  if (left.length) throw new Error(`packing: ${left.length} files left out of ${tgz}, e.g. ${left.slice(0, 5).join(', ')}`);
  console.log(tgz);
} finally {
  fs.rmSync(stage, { recursive: true, force: true });
}
