// The live-heap reading the soak judges growth by: it must see what a process keeps and not
// what it only allocated. A plain node child with the preload, no collector.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait.js';
import { heapAfterGc } from './heap.js';

// Each line on stdin makes the child allocate: 'keep' holds 200,000 small objects (~6 MiB),
// 'drop' allocates 50 MiB and lets it go. It answers each with a line once done.
const CHILD = `
globalThis.kept = [];
let junk = null;
require('node:readline').createInterface({ input: process.stdin }).on('line', (what) => {
  if (what === 'keep') for (let i = 0; i < 200000; i++) globalThis.kept.push({ i });
  if (what === 'drop') { junk = []; for (let i = 0; i < 1600000; i++) junk.push({ i }); junk = null; }
  process.stdout.write(what + '\\n');
});
`;

const cleanups: Array<() => void> = [];
afterEach(() => {
  while (cleanups.length > 0) cleanups.pop()!();
});

describe('heapAfterGc', () => {
  it('grows with what the process keeps, not with garbage it made', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-heap-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const heap = heapAfterGc(dir);
    const child = spawn(process.execPath, [...heap.nodeArgs, '-e', CHILD], {
      stdio: ['pipe', 'pipe', 'inherit'],
      env: { ...process.env, ...heap.env },
    });
    cleanups.push(() => child.kill('SIGKILL'));
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
    const ask = async (what: string) => {
      child.stdin!.write(`${what}\n`);
      await waitFor(`the child to ${what}`, () => out.split('\n').includes(what));
      out = '';
    };
    // The child is ready once its line reader answers.
    await ask('ready');

    const base = await heap.read(child);
    await ask('drop');
    const afterGarbage = await heap.read(child);
    await ask('keep');
    const afterKeeping = await heap.read(child);

    const MiB = 2 ** 20;
    expect(Math.abs(afterGarbage - base) / MiB).toBeLessThan(0.5);
    expect((afterKeeping - afterGarbage) / MiB).toBeGreaterThan(4);
  });
});
