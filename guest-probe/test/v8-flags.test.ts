// v8-flags.ts: which of V8's flags the probe sets, and when. What the flags do to V8 is seen in
// a real probe (test/integration/probe-launcher.test.ts); here node:v8 is a recorder, since
// setting them in the test runner would slow every test after this one.
import { beforeEach, expect, it, vi } from 'vitest';

const set: string[] = [];
vi.mock('../src/lazy-builtins.js', () => ({ v8: () => ({ setFlagsFromString: (f: string) => set.push(f) }) }));

type Flags = typeof import('../src/v8-flags.js');
let flags: Flags;
beforeEach(async () => {
  set.length = 0;
  vi.resetModules(); // each test starts from a probe that has not set them yet
  flags = await import('../src/v8-flags.js');
});

it('interprets once the probe is up, and not in the run that writes the code cache', () => {
  expect(flags.useLessMemory({ VSOCKDIAG_CODE_CACHE: 'write' })).toBe(false);
  expect(set).toEqual([]);
  expect(flags.useLessMemory({})).toBe(true);
  expect(set).toEqual([`${flags.LEAN} --no-gc-global`]);
});

it('collects only in full while the target is settled', () => {
  flags.useLessMemory({});
  flags.setSettled(true);
  flags.setSettled(true); // no change, nothing set
  flags.setSettled(false);
  expect(set.slice(1)).toEqual([`${flags.LEAN} --gc-global`, `${flags.LEAN} --no-gc-global`]);
});

it('runs dumps with their own flags, and goes back when the last one ends, even if it failed', async () => {
  flags.useLessMemory({});
  flags.setSettled(true);
  set.length = 0;
  let endFirst!: () => void;
  const first = flags.withDumpFlags(() => new Promise<void>((r) => (endFirst = r)));
  const second = flags.withDumpFlags(async () => {
    throw new Error('no target');
  });
  await expect(second).rejects.toThrow('no target');
  flags.setSettled(false); // the target lost its listener meanwhile
  flags.setSettled(true);
  expect(set.every((f) => f === flags.FOR_DUMPS)).toBe(true); // the first dump still runs
  endFirst();
  await first;
  expect(set[set.length - 1]).toBe(`${flags.LEAN} --gc-global`);
});

it('leaves V8 alone in a process that never went lean (a Probe in a test)', async () => {
  flags.setSettled(true);
  expect(await flags.withDumpFlags(async () => 7)).toBe(7);
  expect(set).toEqual([]);
});
