// The trust boundary is visible in the code: guest code never imports host code, host code
// never imports guest code, and both share only proto/. The dashboard takes types from the
// collector and proto, and values only from pure modules there (modules that import nothing
// at run time, like the code catalogues and the duration formatter): so nothing of Node, the
// collector or the wire codec reaches the browser bundle, yet a code is defined once.

import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../harness/collector.js';

function sources(dir: string): string[] {
  return fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.(ts|tsx)$/.test(f))
    .map((f) => path.join(dir, f));
}

function imports(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+['"]([^'"]+)['"]/g)].map((m) => m[1]!);
}

function resolved(file: string, spec: string): string {
  return spec.startsWith('.') ? path.relative(ROOT, path.resolve(path.dirname(file), spec)) : spec;
}

/** The file a relative import (resolved from ROOT, with or without its extension) names. */
function sourceFile(spec: string): string | null {
  const base = path.join(ROOT, spec.replace(/\.js$/, ''));
  return ['.ts', '.tsx', '/index.ts'].map((ext) => base + ext).find((f) => fs.existsSync(f)) ?? null;
}

/** A module that imports nothing at run time (type-only imports are erased). */
function pure(spec: string): boolean {
  const file = sourceFile(spec);
  if (!file) return false;
  const text = fs.readFileSync(file, 'utf8');
  const runtime = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s+(type\s+)?(?:[^'"]*?from\s+)?['"][^'"]+['"]/g)].filter(
    (m) => m[1] === undefined,
  );
  return runtime.length === 0;
}

describe('trust boundary', () => {
  const sides = [
    { side: 'guest-probe/src', forbidden: [/^host-collector\//, /^@vsockdiag\/host-collector/, /^web-ui\//] },
    { side: 'host-collector/src', forbidden: [/^guest-probe\//, /^@vsockdiag\/guest-probe/] },
    { side: 'proto/src', forbidden: [/^guest-probe\//, /^host-collector\//, /^@vsockdiag\/(guest-probe|host-collector)/] },
  ];
  for (const { side, forbidden } of sides) {
    it(`${side} imports nothing from the other side`, () => {
      const files = sources(path.join(ROOT, side));
      expect(files.length).toBeGreaterThan(3);
      // The scan sees real imports (so an empty result below means something).
      expect(files.flatMap(imports).some((spec) => spec.startsWith('node:'))).toBe(true);
      const bad = files.flatMap((f) =>
        imports(f)
          .map((spec) => resolved(f, spec))
          .filter((spec) => forbidden.some((re) => re.test(spec)))
          .map((spec) => `${path.relative(ROOT, f)} → ${spec}`),
      );
      expect(bad).toEqual([]);
    });
  }

  it('test/support/ imports only Node, vitest and proto: guest tests use it too', () => {
    const files = sources(path.join(ROOT, 'test/support'));
    expect(files.length).toBeGreaterThan(3);
    const specs = files.flatMap((f) =>
      imports(f).map((spec) => ({ at: `${path.relative(ROOT, f)} → ${resolved(f, spec)}`, spec: resolved(f, spec) })),
    );
    expect(specs.some((s) => s.spec === '@vsockdiag/proto')).toBe(true); // the scan sees real imports
    const allowed = (spec: string) =>
      spec.startsWith('node:') || spec === 'vitest' || spec === '@vsockdiag/proto' || spec.startsWith('test/support/');
    expect(specs.filter((s) => !allowed(s.spec)).map((s) => s.at)).toEqual([]);
  });

  it('web-ui/src takes types from the collector and proto and values only from their pure modules, nothing from the guest', () => {
    const uses = sources(path.join(ROOT, 'web-ui/src')).flatMap((f) =>
      [...fs.readFileSync(f, 'utf8').matchAll(/(?:^|\n)\s*(?:import|export)\s+(type\s+)?[^'"]*?from\s+['"]([^'"]+)['"]/g)].map((m) => ({
        at: `${path.relative(ROOT, f)} → ${resolved(f, m[2]!)}`,
        typeOnly: m[1] !== undefined,
        spec: resolved(f, m[2]!),
      })),
    );
    expect(uses.some((u) => u.spec === 'react')).toBe(true); // the scan sees real imports
    const across = uses.filter((u) => /^(host-collector\/|@vsockdiag\/host-collector|proto\/|@vsockdiag\/proto)/.test(u.spec));
    expect(across.some((u) => u.typeOnly)).toBe(true); // the API types come from the collector's presenters
    expect(across.some((u) => !u.typeOnly)).toBe(true); // the codes come from the catalogues
    expect(across.filter((u) => !u.typeOnly && !pure(u.spec)).map((u) => u.at)).toEqual([]);
    expect(uses.filter((u) => /^(guest-probe\/|@vsockdiag\/guest-probe)/.test(u.spec)).map((u) => u.at)).toEqual([]);
  });

  it('tells a pure module from one that imports at run time', () => {
    expect(pure('host-collector/src/catalogue')).toBe(true);
    expect(pure('proto/src/codes.js')).toBe(true);
    expect(pure('proto/src/errors')).toBe(true); // imports a type only
    expect(pure('proto/src/schema')).toBe(false);
    expect(pure('proto/src')).toBe(false); // the package index: all of proto
    expect(pure('host-collector/src/http/present')).toBe(false);
    expect(pure('@vsockdiag/proto')).toBe(false); // a package name is never taken for a file
  });

  it('the guest bundle has no runtime dependency but Node and its addon', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'guest-probe/package.json'), 'utf8'));
    expect(Object.keys(pkg.dependencies)).toEqual(['@vsockdiag/proto']);
    const proto = JSON.parse(fs.readFileSync(path.join(ROOT, 'proto/package.json'), 'utf8'));
    expect(Object.keys(proto.dependencies)).toEqual(['@msgpack/msgpack']);
  });
});
