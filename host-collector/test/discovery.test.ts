import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expandGlob, globToRegExp } from '../src/collector/discovery.js';

let root: string;
const servers: net.Server[] = [];

async function sock(rel: string): Promise<string> {
  const p = path.join(root, rel);
  fs.mkdirSync(path.dirname(p), { recursive: true });
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(p, resolve);
  });
  servers.push(server);
  return p;
}

function file(rel: string): string {
  const p = path.join(root, rel);
  fs.mkdirSync(path.dirname(p), { recursive: true });
  fs.writeFileSync(p, 'not a socket');
  return p;
}

const sorted = (r: Array<{ path: string; id: string }>) => [...r].sort((a, b) => a.id.localeCompare(b.id));

beforeAll(async () => {
  // Short paths: a Unix socket path must fit in 107 bytes.
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-disc-'));
  // Firecracker-style: one directory per VM.
  await sock('fc/vm1/vsock.sock');
  await sock('fc/vm2/vsock.sock');
  await sock('fc/vm2/vsock.sock_52000'); // our own listener: never a VM
  file('fc/vm3/vsock.sock'); // not a socket
  fs.mkdirSync(path.join(root, 'fc/vm4'), { recursive: true }); // no socket at all
  await sock('fc/a.b/vsock.sock');
  // Flat: one directory, a socket per VM.
  await sock('flat/sb-1.sock');
  await sock('flat/sb-2.sock');
  await sock('flat/sb-2.sock_52000');
  await sock('flat/sb-3.sock_52001');
  file('flat/readme.sock');
  await sock('flat/other.txt');
  // Two wildcards.
  await sock('multi/host1/fc-aa.sock');
  await sock('multi/host2/fc-bb.sock');
  await sock('multi/host2/fc-cc.sock_52000');
});

afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  fs.rmSync(root, { recursive: true, force: true });
});

describe('expandGlob', () => {
  it('expands * in a directory segment; the id is the directory name', () => {
    expect(sorted(expandGlob(`${root}/fc/*/vsock.sock`))).toEqual([
      { path: `${root}/fc/a.b/vsock.sock`, id: 'a.b' },
      { path: `${root}/fc/vm1/vsock.sock`, id: 'vm1' },
      { path: `${root}/fc/vm2/vsock.sock`, id: 'vm2' },
    ]);
  });

  it('expands * in a file name; the id is what the * matched', () => {
    expect(sorted(expandGlob(`${root}/flat/*.sock`))).toEqual([
      { path: `${root}/flat/sb-1.sock`, id: 'sb-1' },
      { path: `${root}/flat/sb-2.sock`, id: 'sb-2' },
    ]);
  });

  it('joins the captures of several wildcards with "-"', () => {
    expect(sorted(expandGlob(`${root}/multi/*/fc-*.sock`))).toEqual([
      { path: `${root}/multi/host1/fc-aa.sock`, id: 'host1-aa' },
      { path: `${root}/multi/host2/fc-bb.sock`, id: 'host2-bb' },
    ]);
  });

  it('never matches <path>_<port> listener files, even with a trailing *', () => {
    const found = expandGlob(`${root}/flat/*`);
    expect(found.map((f) => path.basename(f.path)).sort()).toEqual(['other.txt', 'sb-1.sock', 'sb-2.sock']);
    const all = expandGlob(`${root}/fc/*/vsock.sock*`);
    expect(all.every((f) => !/_\d+$/.test(f.path))).toBe(true);
    expect(all.map((f) => f.id).sort()).toEqual(['a.b', 'vm1', 'vm2']);
  });

  it('ignores files that are not sockets, and directories without a match', () => {
    const found = expandGlob(`${root}/fc/*/vsock.sock`);
    expect(found.some((f) => f.path.includes('vm3'))).toBe(false);
    expect(found.some((f) => f.path.includes('vm4'))).toBe(false);
    expect(expandGlob(`${root}/flat/readme.*`)).toEqual([]);
  });

  it('supports ? as a single character', () => {
    expect(
      expandGlob(`${root}/fc/vm?/vsock.sock`)
        .map((f) => f.id)
        .sort(),
    ).toEqual(['1', '2']);
  });

  it('treats other characters literally (a dot is not "any character")', () => {
    expect(expandGlob(`${root}/fc/*/vsock.sock`).length).toBe(3);
    expect(expandGlob(`${root}/fc/*/vsockXsock`)).toEqual([]);
    expect(globToRegExp('a.b').test('axb')).toBe(false);
    expect(globToRegExp('a.b').test('a.b')).toBe(true);
    expect(globToRegExp('(x)+').test('(x)+')).toBe(true);
  });

  it('uses the file name as id when there is no wildcard', () => {
    expect(expandGlob(`${root}/flat/sb-1.sock`)).toEqual([{ path: `${root}/flat/sb-1.sock`, id: 'sb-1.sock' }]);
  });

  it('returns nothing for a directory that does not exist', () => {
    expect(expandGlob(`${root}/nope/*/vsock.sock`)).toEqual([]);
    expect(expandGlob(`${root}/nope/x.sock`)).toEqual([]);
  });

  it('rejects a relative glob', () => {
    expect(() => expandGlob('fc/*/vsock.sock')).toThrow(/absolute/);
    expect(() => expandGlob('*.sock')).toThrow(/absolute/);
  });

  it('sees sockets appear and disappear between scans', async () => {
    const pattern = `${root}/late/*.sock`;
    expect(expandGlob(pattern)).toEqual([]);
    await sock('late/new.sock');
    expect(expandGlob(pattern).map((f) => f.id)).toEqual(['new']);
    const s = servers.pop()!;
    await new Promise((r) => s.close(r));
    expect(expandGlob(pattern)).toEqual([]);
  });
});
