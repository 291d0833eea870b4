import { describe, expect, it } from 'vitest';
import { DEFAULT_PHASE_PATTERN, compilePhasePattern, phaseFromLine } from '../src/logs/phase-pattern.js';

describe('phase pattern', () => {
  it('default pattern matches envd start-up lines', () => {
    const re = compilePhasePattern(DEFAULT_PHASE_PATTERN);
    expect(phaseFromLine(re, 'envd startup: creating cgroup manager')).toEqual({
      name: 'creating cgroup manager',
      status: 'envd startup: creating cgroup manager',
    });
    expect(phaseFromLine(re, 'envd startup: binding HTTP listener')?.name).toBe('binding HTTP listener');
    expect(phaseFromLine(re, 'some other line')).toBeNull();
    expect(phaseFromLine(re, 'x envd startup: not at the start')).toBeNull();
    expect(phaseFromLine(re, 'envd startup: ')).toBeNull();
  });

  it('custom pattern: the first group names the phase', () => {
    const re = compilePhasePattern('^\\[(\\w+)\\] (starting|done)');
    expect(phaseFromLine(re, '[db] starting now')).toEqual({ name: 'db', status: '[db] starting now' });
    const named = compilePhasePattern('phase=(?<p>\\S+)');
    expect(phaseFromLine(named, 'ts=1 phase=listen ok')?.name).toBe('listen');
  });

  it('a group that matched nothing gives a phase without a name', () => {
    const re = compilePhasePattern('^ready( now)?$');
    expect(phaseFromLine(re, 'ready')).toEqual({ status: 'ready' });
  });

  it('cuts the name to 256 characters and the status to MAX_TEXT', () => {
    const re = compilePhasePattern(DEFAULT_PHASE_PATTERN);
    const line = `envd startup: ${'a'.repeat(5000)}`;
    const p = phaseFromLine(re, line)!;
    expect(p.name).toHaveLength(256);
    expect(p.status).toHaveLength(4096);
  });

  it('is stateless between lines', () => {
    const re = compilePhasePattern('(x)');
    for (let i = 0; i < 3; i++) expect(phaseFromLine(re, 'x')?.name).toBe('x');
  });

  it('rejects an invalid regex with a clear error', () => {
    expect(() => compilePhasePattern('^envd startup: ((.+)$')).toThrow(/invalid phase pattern "\^envd startup: \(\(\.\+\)\$"/);
    expect(() => compilePhasePattern('[')).toThrow(Error);
  });

  it('rejects a pattern without a capture group', () => {
    expect(() => compilePhasePattern('^envd startup: .+$')).toThrow(/has no capture group/);
    expect(() => compilePhasePattern('^(?:a|b)$')).toThrow(/has no capture group/);
    expect(() => compilePhasePattern('(?=x)x')).toThrow(/has no capture group/);
  });
});
