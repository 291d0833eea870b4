// The Go reader's errors name what to change: a target that is not Go, one that is gone, an
// address that does not read. (Permission errors need a second, unprivileged user: see
// memory.ts PTRACE_HINT for the text.)
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { NotGoBinaryError, TargetExitedError, UnreadableAddressError, readGoroutines } from '../src/dumps/go/index.js';
import { ProcessMemory } from '../src/dumps/go/memory.js';

describe('Go reader errors', () => {
  it('refuses a process that is not Go, and one that has exited', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      await new Promise((r) => child.once('spawn', r));
      await expect(readGoroutines(child.pid!)).rejects.toThrow(NotGoBinaryError);
      await expect(readGoroutines(child.pid!)).rejects.toThrow(/is not a Go executable/);
      const mem = new ProcessMemory(child.pid!);
      try {
        expect(() => mem.read(0x1000, 8)).toThrow(UnreadableAddressError);
        expect(() => mem.read(0x1000, 8)).toThrow(/address 0x1000 \(\+8 bytes\) does not read/);
      } finally {
        mem.close();
      }
    } finally {
      child.kill('SIGKILL');
    }
    await new Promise((r) => child.once('exit', r));
    await expect(readGoroutines(child.pid!)).rejects.toThrow(TargetExitedError);
  });
});
