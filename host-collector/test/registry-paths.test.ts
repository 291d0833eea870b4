// Where the collector may create sockets and files, and with which modes (issue 11, hole 3):
// a registration never deletes what is not a stale socket, can be confined to --uds-root
// folders, and leaves nothing readable by other local users.

import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CollectorOptions } from '../src/collector/collector.js';
import { udsPathProblem } from '../src/collector/registry.js';
import { inProcessCollectors } from './support/collector.js';

const collectors = inProcessCollectors('vd-paths-');
const start = async (over: Partial<CollectorOptions> = {}) => (await collectors.start(over)).url;

const put = async (url: string, id: string, udsPath: string) => {
  const res = await fetch(`${url}/v1/sandboxes/${id}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ udsPath }),
  });
  return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string } } };
};

describe('registering never deletes files', () => {
  it('refuses a udsPath whose <udsPath>_52000 is a regular file, and leaves the file alone', async () => {
    const url = await start();
    const victim = path.join(collectors.dir, 'important_52000');
    fs.writeFileSync(victim, 'do not delete');
    const r = await put(url, 'evil', path.join(collectors.dir, 'important'));
    expect(r.status).toBe(422);
    expect(r.body.error!.code).toBe('LISTEN_FAILED');
    expect(r.body.error!.message).toMatch(/not a socket/);
    expect(fs.readFileSync(victim, 'utf8')).toBe('do not delete');
  });

  it('refuses one that is a symlink, leaving link and target alone', async () => {
    const url = await start();
    const target = path.join(collectors.dir, 'etc-shadow');
    fs.writeFileSync(target, 'secret');
    fs.symlinkSync(target, path.join(collectors.dir, 'link_52000'));
    const r = await put(url, 'evil', path.join(collectors.dir, 'link'));
    expect(r.status).toBe(422);
    expect(fs.readFileSync(target, 'utf8')).toBe('secret');
    expect(fs.lstatSync(path.join(collectors.dir, 'link_52000')).isSymbolicLink()).toBe(true);
  });
});

describe('--uds-root', () => {
  it('accepts paths inside the roots only, by their real folder', async () => {
    const root = path.join(collectors.dir, 'fc');
    const outside = path.join(collectors.dir, 'outside');
    fs.mkdirSync(path.join(root, 'vm1'), { recursive: true });
    fs.mkdirSync(outside);
    fs.symlinkSync(outside, path.join(root, 'escape'));
    const url = await start({ udsRoots: [root] });

    expect((await put(url, 'vm1', path.join(root, 'vm1', 'v.sock'))).status).toBe(201);
    for (const bad of [path.join(outside, 'v.sock'), `${root}/../outside/v.sock`, `${root}x/v.sock`, path.join(root, 'escape', 'v.sock')]) {
      const r = await put(url, 'bad', bad);
      expect(r.status, bad).toBe(400);
      expect(r.body.error!.code).toBe('BAD_PATH');
    }
    expect(fs.readdirSync(outside)).toEqual([]);
  });

  it('names the problem of a path', () => {
    expect(udsPathProblem('/run/fc/a/v.sock', ['/run/fc'])).toBeNull();
    expect(udsPathProblem('/run/fc/../x', undefined)).toMatch(/normalised/);
    expect(udsPathProblem('relative', undefined)).toMatch(/absolute/);
    expect(udsPathProblem('/run/fcx/v.sock', ['/run/fc'])).toMatch(/outside/);
  });
});

describe('modes', () => {
  it('keeps the data folder, the database and the sockets to the collector user', async () => {
    const url = await start();
    const data = path.join(collectors.dir, 'data');
    expect(fs.statSync(data).mode & 0o777).toBe(0o700);
    for (const f of fs.readdirSync(data)) expect(fs.statSync(path.join(data, f)).mode & 0o077, f).toBe(0);
    expect((await put(url, 'vm', path.join(collectors.dir, 'v.sock'))).status).toBe(201);
    expect(fs.statSync(path.join(collectors.dir, 'v.sock_52000')).mode & 0o777).toBe(0o600);
  });

  it('gives the sockets a group, mode 0660, with --socket-group', async () => {
    // As root, a group the collector is not in (as a jailer's would be); else our own.
    const gid = process.getuid!() === 0 ? 1 : process.getgid!();
    const url = await start({ socketGid: gid });
    expect((await put(url, 'vm', path.join(collectors.dir, 'v.sock'))).status).toBe(201);
    const st = fs.statSync(path.join(collectors.dir, 'v.sock_52000'));
    expect(st.mode & 0o777).toBe(0o660);
    expect(st.gid).toBe(gid);
  });
});
