import fs from 'node:fs';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { dial, listen } from '../src/transport.js';

const cleanup: Array<() => void> = [];
afterEach(() => {
  while (cleanup.length) cleanup.pop()!();
});

function tmp(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-t-'));
  cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function echo(socket: net.Socket) {
  socket.pipe(socket);
}

async function roundTrip(address: string): Promise<string> {
  const s = await dial(address);
  return new Promise((resolve) => {
    s.once('data', (d) => {
      s.destroy();
      resolve(d.toString());
    });
    s.write('ping');
  });
}

describe('transport', () => {
  it('dials and listens on unix sockets; closing removes the file at once, open connections live on', async () => {
    const p = path.join(tmp(), 's.sock');
    const server = await listen(`unix:${p}`, echo);
    expect(await roundTrip(`unix:${p}`)).toBe('ping');
    const held = await dial(`unix:${p}`);
    server.close();
    expect(fs.existsSync(p)).toBe(false);
    const reply = new Promise((r) => held.once('data', (d) => r(d.toString())));
    held.write('still here');
    expect(await reply).toBe('still here');
    held.destroy();
    await expect(dial(`unix:${p}`)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('dials and listens on loopback tcp', async () => {
    const server = await listen('tcp:127.0.0.1:0', echo);
    cleanup.push(() => server.close());
    const port = (server.address() as net.AddressInfo).port;
    expect(await roundTrip(`tcp:127.0.0.1:${port}`)).toBe('ping');
  });

  it('replaces a stale socket file but refuses a live one', async () => {
    const p = path.join(tmp(), 'stale.sock');
    // A stale socket: bound then the process "crashed" (fd closed, file left behind).
    const first = await listen(`unix:${p}`, echo);
    fs.linkSync(p, `${p}.keep`);
    first.close();
    fs.renameSync(`${p}.keep`, p);
    expect(fs.existsSync(p)).toBe(true);
    await expect(listen(`unix:${p}`, echo)).rejects.toMatchObject({ code: 'EADDRINUSE' });
    const second = await listen(`unix:${p}`, echo, { replaceStale: true });
    cleanup.push(() => second.close());
    expect(await roundTrip(`unix:${p}`)).toBe('ping');
    await expect(listen(`unix:${p}`, echo, { replaceStale: true })).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });

  it('never replaces what is not a socket: a regular file, a symlink, a folder (issue 11, hole 3)', async () => {
    const dir = tmp();
    const file = path.join(dir, 'f_52000');
    fs.writeFileSync(file, 'precious');
    await expect(listen(`unix:${file}`, echo, { replaceStale: true })).rejects.toThrow(/not a socket; refusing/);
    expect(fs.readFileSync(file, 'utf8')).toBe('precious');

    // A symlink to a file elsewhere (or to a stale socket): neither the link nor its target goes.
    const target = path.join(dir, 'elsewhere');
    fs.writeFileSync(target, 'also precious');
    const link = path.join(dir, 'l_52000');
    fs.symlinkSync(target, link);
    await expect(listen(`unix:${link}`, echo, { replaceStale: true })).rejects.toThrow(/symbolic link/);
    expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
    expect(fs.readFileSync(target, 'utf8')).toBe('also precious');
    const dangling = path.join(dir, 'd_52000');
    fs.symlinkSync(path.join(dir, 'nothing-here'), dangling);
    await expect(listen(`unix:${dangling}`, echo, { replaceStale: true })).rejects.toThrow(/symbolic link/);
    expect(fs.lstatSync(dangling).isSymbolicLink()).toBe(true);

    const folder = path.join(dir, 'dir_52000');
    fs.mkdirSync(folder);
    fs.writeFileSync(path.join(folder, 'inside'), 'x');
    await expect(listen(`unix:${folder}`, echo, { replaceStale: true })).rejects.toThrow(/directory/);
    expect(fs.existsSync(path.join(folder, 'inside'))).toBe(true);
  });

  it('creates a Unix socket with the mode and group asked for, from the start', async () => {
    const p = path.join(tmp(), 'm.sock');
    const server = await listen(`unix:${p}`, echo, { mode: 0o600 });
    cleanup.push(() => server.close());
    expect(fs.statSync(p).mode & 0o777).toBe(0o600);
    const gid = process.getgid!();
    const q = path.join(path.dirname(p), 'g.sock');
    const shared = await listen(`unix:${q}`, echo, { mode: 0o660, gid });
    cleanup.push(() => shared.close());
    expect(fs.statSync(q).mode & 0o777).toBe(0o660);
    expect(fs.statSync(q).gid).toBe(gid);
    // The process umask is left as it was.
    const before = process.umask();
    expect(process.umask(before)).toBe(before);
  });

  it('fails a dial to a missing path', async () => {
    await expect(dial(`unix:${path.join(tmp(), 'nobody.sock')}`)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('fails vsock addresses clearly when no vsock backend is registered (never dials vsock)', async () => {
    await expect(listen('vsock:any:52999', echo)).rejects.toMatchObject({ code: 'ERR_VSOCK_UNAVAILABLE' });
    expect(() => dial('vsock:any:52999')).toThrow(/vsock is not available/);
  });
});
