// The trust boundary is visible in the code: guest code never imports host code, host code
// never imports guest code, and both share only proto/.

import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../harness/collector.js';

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { recursive: true, encoding: 'utf8' })
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
    const specs = files.flatMap((f) => imports(f).map((spec) => ({ at: `${path.relative(ROOT, f)} → ${resolved(f, spec)}`, spec: resolved(f, spec) })));
    expect(specs.some((s) => s.spec === '@vsockdiag/proto')).toBe(true); // the scan sees real imports
    const allowed = (spec: string) => spec.startsWith('node:') || spec === 'vitest' || spec === '@vsockdiag/proto' || spec.startsWith('test/support/');
    expect(specs.filter((s) => !allowed(s.spec)).map((s) => s.at)).toEqual([]);
  });

  it('web-ui/src takes only types from the collector (nothing of it reaches the browser bundle), nothing from the guest', () => {
    const uses = sources(path.join(ROOT, 'web-ui/src')).flatMap((f) =>
      [...fs.readFileSync(f, 'utf8').matchAll(/(?:^|\n)\s*import\s+(type\s+)?[^'"]*?from\s+['"]([^'"]+)['"]/g)].map((m) => ({
        at: `${path.relative(ROOT, f)} → ${resolved(f, m[2]!)}`,
        typeOnly: m[1] !== undefined,
        spec: resolved(f, m[2]!),
      })),
    );
    expect(uses.some((u) => u.spec === 'react')).toBe(true); // the scan sees real imports
    const collector = uses.filter((u) => /^(host-collector\/|@vsockdiag\/host-collector)/.test(u.spec));
    expect(collector.length).toBeGreaterThan(0); // the API types come from the collector's presenters
    expect(collector.filter((u) => !u.typeOnly).map((u) => u.at)).toEqual([]);
    expect(uses.filter((u) => /^(guest-probe\/|@vsockdiag\/guest-probe)/.test(u.spec)).map((u) => u.at)).toEqual([]);
  });

  it('the guest bundle has no runtime dependency but Node and its addon', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'guest-probe/package.json'), 'utf8'));
    expect(Object.keys(pkg.dependencies)).toEqual(['@vsockdiag/proto']);
    const proto = JSON.parse(fs.readFileSync(path.join(ROOT, 'proto/package.json'), 'utf8'));
    expect(Object.keys(proto.dependencies)).toEqual(['@msgpack/msgpack']);
  });
});
