// The trust boundary is visible in the code: guest code never imports host code, host code
// never imports guest code, and both share only proto/. The same holds for each side's tests,
// through whatever test helper they import: a guest test runs no collector code (a comparison
// with the collector's parsers is an integration test, in test/integration/, which may import
// both). The dashboard takes types from the collector and proto, and values only from pure
// modules there (modules that import nothing at run time, like the code catalogues and the
// duration formatter): so nothing of Node, the collector or the wire codec reaches the
// browser bundle, yet a code is defined once.

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

/**
 * Every module `files` load, following relative imports (a package name such as
 * `@vsockdiag/proto` is not followed: the rules below name the ones a side may not use),
 * each with the chain of imports it was reached by.
 */
function reached(files: string[]): Map<string, string> {
  const chains = new Map(files.map((f) => [f, path.relative(ROOT, f)]));
  const queue = [...files];
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    for (const spec of imports(file)) {
      if (!spec.startsWith('.')) continue;
      const next = sourceFile(resolved(file, spec));
      if (next === null || chains.has(next)) continue;
      chains.set(next, `${chains.get(file)} → ${path.relative(ROOT, next)}`);
      queue.push(next);
    }
  }
  return chains;
}

describe('trust boundary', () => {
  const hostCode = [/^host-collector\//, /^@vsockdiag\/host-collector/, /^web-ui\//];
  const guestCode = [/^guest-probe\//, /^@vsockdiag\/guest-probe/];
  const sides = [
    { side: 'guest-probe/src', forbidden: hostCode },
    { side: 'host-collector/src', forbidden: guestCode },
    { side: 'proto/src', forbidden: [...hostCode, ...guestCode] },
    // Tests: each side's own, proto and test/support, and harness modules that load neither side.
    { side: 'guest-probe/test', forbidden: hostCode },
    { side: 'host-collector/test', forbidden: guestCode },
    { side: 'proto/test', forbidden: [...hostCode, ...guestCode] },
  ];
  for (const { side, forbidden } of sides) {
    it(`${side} loads nothing from the other side, directly or through what it imports`, () => {
      const files = sources(path.join(ROOT, side));
      expect(files.length).toBeGreaterThan(3);
      const chains = reached(files);
      // The scan sees real imports (so an empty result below means something).
      expect(files.flatMap(imports).some((spec) => spec.startsWith('node:'))).toBe(true);
      const crosses = (spec: string) => forbidden.some((re) => re.test(spec));
      // Each crossing once: where a chain first reaches the other side, not inside it.
      const bad = [...chains]
        .filter(([f]) => !crosses(path.relative(ROOT, f)))
        .flatMap(([f, chain]) =>
          imports(f)
            .map((spec) => resolved(f, spec))
            .filter(crosses)
            .map((spec) => `${chain} → ${spec}`),
        );
      expect(bad).toEqual([]);
    });
  }

  it('follows imports through test helpers', () => {
    const chains = reached([path.join(ROOT, 'host-collector/test/retention.test.ts')]);
    expect(chains.get(path.join(ROOT, 'test/support/hello.ts'))).toBe(
      'host-collector/test/retention.test.ts → test/harness/probe-client.ts → test/support/hello.ts',
    );
    // What keeps the Go reader's comparisons with the collector's parser out of guest-probe/test.
    const live = reached([path.join(ROOT, 'test/integration/go-live.test.ts')]);
    expect(live.has(path.join(ROOT, 'host-collector/src/dumps/goroutines.ts'))).toBe(true);
  });

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
