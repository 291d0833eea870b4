// Reads V8 .cpuprofile files (the inspector's sampling profiler, as `node --cpu-prof` writes
// them) and says where a process's main thread spent its time: self time by function; time
// charged to the innermost function of our own bundle on the stack (so time in SQLite,
// JSON or msgpack is charged to the code that called them), and by source file; and the
// longest busy stretches (what a request queued behind them would wait for).
// Bundles are not minified; esbuild marks each module with a "// path" comment line, which
// maps a bundle line back to its source file.
//
// The sampler runs on wall-clock time: a sample taken while the thread was descheduled (a
// busy machine) is charged to whatever was on the stack. Read it next to the run-queue wait.

import fs from 'node:fs';
import path from 'node:path';
import { COLLECTOR_BIN, ROOT } from '../harness/collector.js';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  parent?: number;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface ProfileEntry {
  name: string;
  ms: number;
  pct: number;
}
export interface ProfileDigest {
  files: number;
  /** Per profile (averaged over `files`). */
  totalMs: number;
  busyMs: number;
  gcMs: number;
  /** Self time of the leaf function (busy time only). */
  self: ProfileEntry[];
  /** Busy time charged to the innermost function of the bundle on the stack. */
  byOwnFunction: ProfileEntry[];
  /** Busy time by the source file of that function (or the dependency, or a V8 category). */
  byFile: ProfileEntry[];
  /** Inclusive busy time of the bundle's functions (each counted once per sample). */
  inclusive: ProfileEntry[];
  /** Longest stretches without an idle sample, with what dominated each. */
  longest: Array<{ ms: number; atS: number; top: string }>;
}

const DEP = /node_modules\/(?:\.pnpm\/[^/]+\/node_modules\/)?((?:@[^/]+\/)?[^/]+)/;

function moduleMap(bundle: string): Array<[number, string]> {
  const out: Array<[number, string]> = [];
  fs.readFileSync(bundle, 'utf8')
    .split('\n')
    .forEach((l, i) => {
      const m = /^\/\/ (\S+\.(?:ts|js|mjs|cjs|json))$/.exec(l);
      if (m) out.push([i, m[1]!]);
    });
  return out;
}

function shortSource(p: string): string {
  const dep = DEP.exec(p);
  if (dep) return dep[1]!;
  return p.replace(/^host-collector\/src\//, '').replace(/^proto\/src\//, 'proto/');
}

/** A window of a profile, on its clock: the monotonic one process.hrtime reads, in µs. */
export interface ProfileRange {
  fromUs: number;
  toUs: number;
}

/**
 * Digest of one or more profiles of the same program (figures averaged per profile). With
 * `range` (one window for every profile, or each profile's own), only samples inside it count.
 */
export function digestProfiles(
  files: string[],
  opts: { bundle?: string; range?: ProfileRange | ((file: string) => ProfileRange); top?: number } = {},
): ProfileDigest {
  const bundle = opts.bundle ?? COLLECTOR_BIN;
  const top = opts.top ?? 30;
  const bundleName = `/${path.basename(bundle)}`;
  const modules = moduleMap(bundle);
  const sourceOf = (line: number): string => {
    let lo = 0;
    let hi = modules.length - 1;
    let best = path.basename(bundle);
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (modules[mid]![0] <= line) {
        best = modules[mid]![1];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return shortSource(best);
  };
  const isBundle = (u: string) => u.endsWith(bundleName);
  const dep = (u: string) => {
    const m = DEP.exec(u);
    if (m) return m[1]!;
    if (u.startsWith('node:')) return u;
    return u ? path.relative(ROOT, u.replace(/^file:\/\//, '')) : '(native)';
  };
  const label = (f: CallFrame) => {
    const fn = f.functionName || '(anonymous)';
    if (!f.url) return fn;
    return isBundle(f.url) ? `${fn} (${sourceOf(f.lineNumber)})` : `${fn} (${dep(f.url)})`;
  };

  const self = new Map<string, number>();
  const byFn = new Map<string, number>();
  const byFile = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  const longest: ProfileDigest['longest'] = [];
  let total = 0;
  let busy = 0;
  let gc = 0;

  for (const file of files) {
    const p = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
    const range = (typeof opts.range === 'function' ? opts.range(file) : opts.range) ?? { fromUs: p.startTime, toUs: p.endTime };
    if (range.fromUs < p.startTime || range.toUs > p.endTime) {
      throw new Error(`window ${range.fromUs}..${range.toUs} µs is outside the profile (${p.startTime}..${p.endTime})`);
    }
    const byId = new Map<number, ProfileNode>();
    for (const n of p.nodes) byId.set(n.id, n);
    for (const n of p.nodes) for (const c of n.children ?? []) byId.get(c)!.parent = n.id;
    const parentOf = (n: ProfileNode) => (n.parent !== undefined ? byId.get(n.parent) : undefined);
    const ownFrame = (n: ProfileNode | undefined): ProfileNode | undefined => {
      for (let cur = n; cur; cur = parentOf(cur)) if (isBundle(cur.callFrame.url)) return cur;
      return undefined;
    };

    let t = p.startTime;
    let stretch = { start: 0, ms: 0, fns: new Map<string, number>() };
    const closeStretch = () => {
      if (stretch.ms > 0) {
        const topFn = [...stretch.fns].sort((a, b) => b[1] - a[1])[0];
        longest.push({
          ms: stretch.ms,
          atS: (stretch.start - range.fromUs) / 1e6,
          top: topFn ? `${topFn[0]} ${Math.round((topFn[1] / stretch.ms) * 100)} %` : '',
        });
      }
      stretch = { start: 0, ms: 0, fns: new Map() };
    };
    for (let i = 0; i < p.samples.length; i++) {
      // timeDeltas[i] is the time before sample i; the gap after it is charged to it.
      const dt = (p.timeDeltas[i + 1] ?? 0) / 1000;
      t += p.timeDeltas[i] ?? 0;
      if (t < range.fromUs || t > range.toUs) continue;
      total += dt;
      const node = byId.get(p.samples[i]!)!;
      const name = node.callFrame.functionName;
      if (name === '(idle)') {
        closeStretch();
        continue;
      }
      busy += dt;
      if (name === '(garbage collector)') gc += dt;
      add(self, label(node.callFrame), dt);
      const own = ownFrame(node);
      const ownLabel = own ? label(own.callFrame) : name.startsWith('(') ? name : `${label(node.callFrame)} [outside the bundle]`;
      add(byFn, ownLabel, dt);
      add(byFile, own ? sourceOf(own.callFrame.lineNumber) : name.startsWith('(') ? name : dep(node.callFrame.url), dt);
      const seen = new Set<string>();
      for (let cur: ProfileNode | undefined = own; cur; cur = parentOf(cur)) {
        if (!isBundle(cur.callFrame.url)) continue;
        const l = label(cur.callFrame);
        if (!seen.has(l)) {
          seen.add(l);
          add(inclusive, l, dt);
        }
      }
      if (stretch.ms === 0) stretch.start = t;
      stretch.ms += dt;
      add(stretch.fns, ownLabel, dt);
    }
    closeStretch();
  }
  const n = Math.max(1, files.length);
  const list = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, ms]) => ({ name, ms: ms / n, pct: busy ? (ms / busy) * 100 : 0 }));
  longest.sort((a, b) => b.ms - a.ms);
  return {
    files: files.length,
    totalMs: total / n,
    busyMs: busy / n,
    gcMs: gc / n,
    self: list(self),
    byOwnFunction: list(byFn),
    byFile: list(byFile),
    inclusive: list(inclusive),
    longest: longest.slice(0, 5),
  };
}

/** The .cpuprofile files in `dir`, newest first. */
export function profilesIn(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => path.join(dir, f))
    .sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
}
