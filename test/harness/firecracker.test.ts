// Tests of the Firecracker hybrid-vsock emulator. Unix sockets only (no AF_VSOCK anywhere).

import { randomBytes } from 'node:crypto';
import { promises as fsp, existsSync, statSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
// A fixed pause only where a test shows that nothing happens meanwhile.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  FC_MAX_CONNECTIONS,
  FirecrackerVsock,
  type FirecrackerVsockOptions,
  type RefusalInfo,
  guestHostPath,
  guestListenPath,
  hostPortPath,
  parseConnectLine,
} from './firecracker.js';
import { waitFor } from '../support/wait.js';

// ---- cleanup: runs after every test, even a failed one --------------------------------------

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  while (cleanups.length > 0) {
    try {
      await cleanups.pop()!();
    } catch {
      // Keep cleaning up.
    }
  }
});

// ---- helpers --------------------------------------------------------------------------------

/** One end of a stream, recording everything that happens to it. */
class Peer {
  data = Buffer.alloc(0);
  ended = false;
  closed = false;
  constructor(readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.data = Buffer.concat([this.data, chunk]);
    });
    socket.on('end', () => {
      this.ended = true;
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      this.closed = true;
    });
    cleanups.push(() => socket.destroy());
  }
  get text(): string {
    return this.data.toString('latin1');
  }
  /** The other end went away: EOF read, or the socket closed (half-open peers stay open on EOF). */
  get gone(): boolean {
    return this.ended || this.closed;
  }
}

/** Connects to a Unix socket (half-open allowed) and resolves once connected. */
function dial(socketPath: string): Promise<Peer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ path: socketPath, allowHalfOpen: true });
    const peer = new Peer(socket);
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(peer);
    });
  });
}

interface Listener {
  server: net.Server;
  peers: Peer[];
}

/** Listens on a Unix socket, recording accepted connections; `echo` pipes each back to itself. */
async function listenAt(socketPath: string, opts: { echo?: boolean } = {}): Promise<Listener> {
  const peers: Peer[] = [];
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    peers.push(new Peer(socket));
    if (opts.echo) socket.pipe(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const p of peers) p.socket.destroy();
        server.close(() => resolve());
      }),
  );
  return { server, peers };
}

interface Vm {
  dir: string;
  udsPath: string;
  guestDir: string;
  vm: FirecrackerVsock;
  refusals: RefusalInfo[];
}

async function startVm(opts: Partial<FirecrackerVsockOptions> = {}): Promise<Vm> {
  // Short names: unix socket paths must stay under 107 bytes.
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'fc-'));
  cleanups.push(() => fsp.rm(dir, { recursive: true, force: true }));
  const udsPath = path.join(dir, 'v.sock');
  const guestDir = path.join(dir, 'g');
  const vm = new FirecrackerVsock({ udsPath, guestDir, ...opts });
  cleanups.push(() => vm.close());
  const refusals: RefusalInfo[] = [];
  vm.on('refused', (info) => refusals.push(info));
  await vm.start();
  return { dir, udsPath, guestDir, vm, refusals };
}

/** Host-initiated connection: dial uds_path, send `line` in one write, wait for the OK line. */
async function hostConnect(udsPath: string, line: string): Promise<{ peer: Peer; localPort: number }> {
  const peer = await dial(udsPath);
  peer.socket.write(line);
  await waitFor('OK line', () => peer.text.includes('\n') || peer.closed);
  const m = /^OK (\d+)\n/.exec(peer.text);
  if (!m) throw new Error(`no OK line, got ${JSON.stringify(peer.text)}`);
  return { peer, localPort: Number(m[1]) };
}

/** Asserts the stream closes having received nothing at all (EOF without OK). */
async function expectClosedSilently(peer: Peer): Promise<void> {
  await waitFor('close', () => peer.gone);
  expect(peer.text).toBe('');
}

// ---- tests ----------------------------------------------------------------------------------

describe('path helpers and CONNECT parsing', () => {
  it('builds Firecracker and guest stand-in paths', () => {
    expect(guestHostPath('/g', 52000)).toBe('/g/host_52000.sock');
    expect(guestListenPath('/g', 52001)).toBe('/g/listen_52001.sock');
    expect(hostPortPath('/run/v.sock', 52000)).toBe('/run/v.sock_52000');
    expect(() => guestHostPath('/g', -1)).toThrow(RangeError);
    expect(FC_MAX_CONNECTIONS).toBe(1023);
  });

  it('parses CONNECT like muxer.rs read_local_stream_port', () => {
    const p = (s: string) => parseConnectLine(Buffer.from(s, 'latin1'));
    expect(p('CONNECT 52001\n')).toBe(52001);
    expect(p('connect 0\n')).toBe(0);
    expect(p('CoNnEcT 4294967295\n')).toBe(4294967295);
    expect(p('connect +7\n')).toBe(7); // Rust u32::from_str accepts a leading '+'
    expect(p('connect 7 extra\n')).toBe(7); // further words are ignored
    expect(p('CONNECT 4294967296\n')).toBeNull();
    expect(p('CONNECT -1\n')).toBeNull();
    expect(p('CONNECT 0x10\n')).toBeNull();
    expect(p('CONNECT\n')).toBeNull();
    expect(p('HELLO 1\n')).toBeNull();
    expect(parseConnectLine(Buffer.from([0x63, 0xff, 0x0a]))).toBeNull(); // not UTF-8
  });
});

describe('guest-initiated connections', () => {
  it('splices both ways with no handshake bytes and preserves half-close', async () => {
    const { vm, udsPath, guestDir } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guestPath = await vm.exposeHostPort(52000);
    expect(guestPath).toBe(guestHostPath(guestDir, 52000));
    expect(await vm.exposeHostPort(52000)).toBe(guestPath); // idempotent

    const guest = await dial(guestPath);
    await waitFor('host accept', () => host.peers.length === 1);
    const h = host.peers[0]!;
    await sleep(50);
    expect(h.data.length).toBe(0); // nothing written by "Firecracker"

    guest.socket.write('ping');
    await waitFor('ping at host', () => h.text === 'ping');
    h.socket.write('pong');
    await waitFor('pong at guest', () => guest.text === 'pong');

    // Guest shuts down its write side: the host reads EOF but can still write back.
    guest.socket.end();
    await waitFor('EOF at host', () => h.ended);
    expect(guest.closed).toBe(false);
    h.socket.write(' after');
    await waitFor('bytes after half-close', () => guest.text === 'pong after');
    h.socket.end();
    await waitFor('both closed', () => guest.ended && guest.closed && h.closed);
    await waitFor('live 0', () => vm.stats().live === 0);
    expect(vm.stats()).toEqual({ guestInitiated: 1, hostInitiated: 0, refused: 0, live: 0 });
  });

  it('carries bulk data written before the host side is even connected', async () => {
    const { vm, udsPath } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000), { echo: true });
    const payload = randomBytes(4 * 1024 * 1024);
    const guest = await dial(await vm.exposeHostPort(52000));
    guest.socket.end(payload); // immediately, then half-close
    await waitFor('echo EOF', () => guest.ended, { timeoutMs: 10_000 });
    expect(guest.data.equals(payload)).toBe(true);
    expect(host.peers).toHaveLength(1);
  });

  it('tears the guest side down when writing to a closed host stream fails', async () => {
    const { vm, udsPath } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guest = await dial(await vm.exposeHostPort(52000));
    await waitFor('host accept', () => host.peers.length === 1);
    // A closed host stream first reads as EOF (indistinguishable from a half-close)...
    host.peers[0]!.socket.destroy();
    await waitFor('EOF at guest', () => guest.ended);
    expect(vm.stats().live).toBe(1);
    // ...and the next write to it fails (EPIPE), which kills the connection (RST to the guest).
    guest.socket.write('anyone?');
    await waitFor('connection killed', () => vm.stats().live === 0);
    // The guest stand-in was destroyed too: the guest's next write fails.
    guest.socket.write('still there?');
    await waitFor('guest write fails', () => guest.closed);
  });

  it('destroys the guest connection when <uds_path>_<port> is missing', async () => {
    const { vm, refusals } = await startVm();
    const guest = await dial(await vm.exposeHostPort(52000));
    await expectClosedSilently(guest);
    expect(vm.stats()).toEqual({ guestInitiated: 0, hostInitiated: 0, refused: 1, live: 0 });
    expect(refusals).toEqual([{ initiator: 'guest', port: 52000, reason: 'host-unreachable' }]);
  });

  it('destroys the guest connection when <uds_path>_<port> is a stale socket file', async () => {
    const { vm, udsPath, dir } = await startVm();
    // A socket file with no listener: bind elsewhere, move the file into place, stop listening.
    const tmpPath = path.join(dir, 't.sock');
    const stalePath = hostPortPath(udsPath, 52000);
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(tmpPath, () => resolve()));
    await fsp.rename(tmpPath, stalePath);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    expect(statSync(stalePath).isSocket()).toBe(true);

    const guest = await dial(await vm.exposeHostPort(52000));
    await expectClosedSilently(guest);
    expect(vm.stats()).toMatchObject({ guestInitiated: 0, refused: 1, live: 0 });
  });
});

describe('host-initiated connections', () => {
  it('answers OK <port> with round-robin ports from 2^30, then carries raw bytes', async () => {
    const { vm, udsPath, guestDir } = await startVm();
    const guestListener = await listenAt(guestListenPath(guestDir, 52001), { echo: true });

    const first = await hostConnect(udsPath, 'CONNECT 52001\n');
    expect(first.localPort).toBe(2 ** 30);
    first.peer.socket.write('hello');
    await waitFor('echo', () => first.peer.text === `OK ${first.localPort}\nhello`);

    // Bytes after the CONNECT line in the same write reach the guest after OK; so do bytes
    // written before OK arrives.
    const second = await hostConnect(udsPath, 'CONNECT 52001\nearly');
    second.peer.socket.write('+more');
    expect(second.localPort).toBe(first.localPort + 1);
    expect(second.localPort).toBeLessThan(2 ** 31);
    await waitFor('early bytes echoed', () => second.peer.text === `OK ${second.localPort}\nearly+more`);
    expect(guestListener.peers).toHaveLength(2);
    expect(guestListener.peers[1]!.text).toBe('early+more'); // the guest never sees the CONNECT line

    // Half-close host→guest: the echo ends its side, which comes back as EOF.
    second.peer.socket.end();
    await waitFor('EOF back from guest', () => second.peer.ended);
    expect(vm.stats()).toMatchObject({ hostInitiated: 2, refused: 0 });
  });

  it('accepts a lowercase or mixed-case verb', async () => {
    const { udsPath, guestDir } = await startVm();
    await listenAt(guestListenPath(guestDir, 52001), { echo: true });
    const lower = await hostConnect(udsPath, 'connect 52001\n');
    const mixed = await hostConnect(udsPath, 'Connect 52001\n');
    expect(mixed.localPort).toBe(lower.localPort + 1);
  });

  it('rejects a CONNECT line that is not complete within 100 ms (split writes)', async () => {
    // Firecracker reads the line with a non-blocking read_exact on first readiness, so a line
    // split across writes fails; the emulator requires the whole line within 100 ms.
    const { vm, udsPath, guestDir, refusals } = await startVm();
    const guestListener = await listenAt(guestListenPath(guestDir, 52001));
    const peer = await dial(udsPath);
    peer.socket.write('CONN');
    await sleep(150);
    if (!peer.socket.destroyed) peer.socket.write('ECT 52001\n');
    await expectClosedSilently(peer);
    await sleep(20);
    expect(guestListener.peers).toHaveLength(0);
    expect(refusals).toEqual([{ initiator: 'host', port: null, reason: 'connect-line-timeout' }]);
    expect(vm.stats()).toMatchObject({ hostInitiated: 0, refused: 1, live: 0 });
  });

  it('closes with EOF and no OK when nothing listens on the guest port', async () => {
    const { vm, udsPath, refusals } = await startVm();
    const peer = await dial(udsPath);
    peer.socket.write('CONNECT 52002\n');
    await waitFor('EOF', () => peer.ended);
    expect(peer.text).toBe('');
    expect(refusals).toEqual([{ initiator: 'host', port: 52002, reason: 'no-guest-listener' }]);
    expect(vm.stats()).toMatchObject({ hostInitiated: 0, refused: 1, live: 0 });
  });

  it.each([
    ['bad verb', 'HELLO 52001\n'],
    ['missing port', 'CONNECT\n'],
    ['non-decimal port', 'CONNECT abc\n'],
    ['hex port', 'CONNECT 0x10\n'],
    ['negative port', 'CONNECT -1\n'],
    ['port above u32', 'CONNECT 4294967296\n'],
    ['no LF within 32 bytes', `CONNECT 52001${' '.repeat(30)}\n`],
    ['EOF before LF', 'CONNECT 52001'],
  ])('closes without reply on a malformed command: %s', async (_name, line) => {
    const { vm, udsPath, guestDir, refusals } = await startVm();
    const guestListener = await listenAt(guestListenPath(guestDir, 52001));
    const peer = await dial(udsPath);
    if (line.endsWith('\n')) peer.socket.write(line);
    else peer.socket.end(line);
    await expectClosedSilently(peer);
    await sleep(20);
    expect(guestListener.peers).toHaveLength(0);
    expect(refusals).toEqual([{ initiator: 'host', port: null, reason: 'malformed-connect' }]);
    expect(vm.stats()).toMatchObject({ refused: 1, live: 0 });
  });
});

describe("halfClose: 'firecracker' (csm/connection.rs shutdown semantics)", () => {
  it('host EOF: the guest reads the rest then EOF, and can send nothing back', async () => {
    const { vm, udsPath, guestDir } = await startVm({ halfClose: 'firecracker' });
    const guestListener = await listenAt(guestListenPath(guestDir, 52001));
    const { peer: host } = await hostConnect(udsPath, 'CONNECT 52001\n');
    await waitFor('guest accept', () => guestListener.peers.length === 1);
    const guest = guestListener.peers[0]!;

    host.socket.end('request');
    await waitFor('EOF at guest', () => guest.ended);
    expect(guest.text).toBe('request');
    if (!guest.socket.destroyed) guest.socket.write('reply');
    await waitFor('connection removed', () => host.gone && vm.stats().live === 0);
    expect(host.text).not.toContain('reply');
  });

  it('guest EOF is taken as close(): the host reads the rest then EOF', async () => {
    const { vm, udsPath } = await startVm({ halfClose: 'firecracker' });
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guest = await dial(await vm.exposeHostPort(52000));
    await waitFor('host accept', () => host.peers.length === 1);
    const h = host.peers[0]!;

    guest.socket.end('bye');
    await waitFor('EOF at host', () => h.ended);
    expect(h.text).toBe('bye');
    if (!h.socket.destroyed) h.socket.write('late');
    await waitFor('connection removed', () => guest.gone && vm.stats().live === 0);
    expect(guest.text).toBe('');
  });
});

describe('snapshot and fault models', () => {
  it('reset() kills established connections both ways; listeners survive', async () => {
    const { vm, udsPath, guestDir } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guestListener = await listenAt(guestListenPath(guestDir, 52001), { echo: true });

    const guestOut = await dial(await vm.exposeHostPort(52000));
    await waitFor('host accept', () => host.peers.length === 1);
    const hostIn = host.peers[0]!;
    const hostOut = await hostConnect(udsPath, 'CONNECT 52001\n');
    await waitFor('guest accept', () => guestListener.peers.length === 1);
    const guestIn = guestListener.peers[0]!;
    expect(vm.stats().live).toBe(2);

    vm.reset();
    expect(vm.stats().live).toBe(0);
    await waitFor('all four ends closed', () => guestOut.gone && hostIn.gone && hostOut.peer.gone && guestIn.gone);

    // The guest's listen socket and the emulator's listeners are still there.
    expect(existsSync(guestListenPath(guestDir, 52001))).toBe(true);
    const again = await hostConnect(udsPath, 'CONNECT 52001\n');
    expect(again.localPort).toBe(hostOut.localPort + 1);
    again.peer.socket.write('still here');
    await waitFor('echo after reset', () => again.peer.text.endsWith('still here'));

    const guestAgain = await dial(vm.guestHostPath(52000));
    await waitFor('host accept after reset', () => host.peers.length === 2);
    guestAgain.socket.write('x');
    await waitFor('bytes after reset', () => host.peers[1]!.text === 'x');
    expect(vm.stats()).toEqual({ guestInitiated: 2, hostInitiated: 2, refused: 0, live: 2 });
  });

  it('blackhole keeps sockets open but moves no bytes', async () => {
    const { vm, udsPath, guestDir } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guestListener = await listenAt(guestListenPath(guestDir, 52001));

    const guestOut = await dial(await vm.exposeHostPort(52000));
    await waitFor('host accept', () => host.peers.length === 1);
    const hostIn = host.peers[0]!;
    const hostOut = await hostConnect(udsPath, 'CONNECT 52001\n');
    await waitFor('guest accept', () => guestListener.peers.length === 1);
    const guestIn = guestListener.peers[0]!;

    vm.blackhole(true);
    guestOut.socket.write('lost1');
    hostIn.socket.write('lost2');
    hostOut.peer.socket.write('lost3');
    guestIn.socket.write('lost4');
    // New connections are still made while the blackhole is on.
    const during = await hostConnect(udsPath, 'CONNECT 52001\n');
    await sleep(150);
    expect(hostIn.text).toBe('');
    expect(guestOut.text).toBe('');
    expect(guestIn.text).toBe('');
    expect(hostOut.peer.text).toBe(`OK ${hostOut.localPort}\n`);
    for (const p of [guestOut, hostIn, hostOut.peer, guestIn, during.peer]) {
      expect(p.gone).toBe(false);
    }
    expect(vm.stats().live).toBe(3);

    // Off again: new bytes flow, the dropped ones never show up.
    vm.blackhole(false);
    guestOut.socket.write('found1');
    hostOut.peer.socket.write('found3');
    await waitFor('guest→host after blackhole', () => hostIn.text === 'found1');
    await waitFor('host→guest after blackhole', () => guestIn.text === 'found3');
  });

  it('moveUds() resets connections and moves guest-initiated connections to the new path', async () => {
    const { vm, udsPath, guestDir, dir } = await startVm();
    const newPath = path.join(dir, 'w.sock');
    const oldHost = await listenAt(hostPortPath(udsPath, 52000));
    const newHost = await listenAt(hostPortPath(newPath, 52000));
    await listenAt(guestListenPath(guestDir, 52001), { echo: true });

    const before = await dial(await vm.exposeHostPort(52000));
    await waitFor('old host accept', () => oldHost.peers.length === 1);
    const hostBefore = await hostConnect(udsPath, 'CONNECT 52001\n');

    await vm.moveUds(newPath);
    expect(vm.udsPath).toBe(newPath);
    expect(existsSync(udsPath)).toBe(false);
    expect(existsSync(newPath)).toBe(true);
    await waitFor('connections reset by restore', () => before.gone && oldHost.peers[0]!.gone && hostBefore.peer.gone);
    await expect(dial(udsPath)).rejects.toMatchObject({ code: 'ENOENT' });

    const after = await dial(vm.guestHostPath(52000));
    await waitFor('new host accept', () => newHost.peers.length === 1);
    after.socket.write('moved');
    await waitFor('bytes via new path', () => newHost.peers[0]!.text === 'moved');
    expect(oldHost.peers).toHaveLength(1);

    const hostAfter = await hostConnect(newPath, 'CONNECT 52001\n');
    expect(hostAfter.localPort).toBe(hostBefore.localPort + 1);
  });

  it('enforces the connection limit in both directions', async () => {
    const { vm, udsPath, guestDir, refusals } = await startVm({ maxConnections: 2 });
    const host = await listenAt(hostPortPath(udsPath, 52000));
    await listenAt(guestListenPath(guestDir, 52001), { echo: true });
    const guestPath = await vm.exposeHostPort(52000);

    const g1 = await dial(guestPath);
    const h1 = await hostConnect(udsPath, 'CONNECT 52001\n');
    await waitFor('two live', () => vm.stats().live === 2 && host.peers.length === 1);

    // Guest side at the limit: Firecracker still connects to <uds_path>_<port>, then drops the
    // stream (add_connection fails) and resets the guest.
    const g2 = await dial(guestPath);
    await expectClosedSilently(g2);
    await waitFor('dropped host stream', () => host.peers.length === 2 && host.peers[1]!.gone);
    expect(host.peers[1]!.text).toBe('');

    // Host side at the limit: accepted and dropped, no OK.
    const h2 = await dial(udsPath);
    h2.socket.on('error', () => undefined);
    await expectClosedSilently(h2);

    expect(refusals).toEqual([
      { initiator: 'guest', port: 52000, reason: 'connection-limit' },
      { initiator: 'host', port: null, reason: 'connection-limit' },
    ]);
    expect(vm.stats()).toEqual({ guestInitiated: 1, hostInitiated: 1, refused: 2, live: 2 });

    // Free one slot: a new connection gets through.
    h1.peer.socket.destroy();
    await waitFor('slot freed', () => vm.stats().live === 1);
    const h3 = await hostConnect(udsPath, 'CONNECT 52001\n');
    expect(h3.localPort).toBeGreaterThan(h1.localPort);
    expect(vm.stats().live).toBe(2);
    expect(g1.gone).toBe(false);
  });
});

describe('fault models of Firecracker bugs (E2B pins 1.10–1.14)', () => {
  /** Dials uds_path and writes a CONNECT line, without waiting for anything. */
  async function connectLine(udsPath: string, port: number): Promise<Peer> {
    const peer = await dial(udsPath);
    peer.socket.write(`CONNECT ${port}\n`);
    return peer;
  }

  it('bareResume (#6100): host CONNECTs hang forever, guest-initiated ones work; a later reset acked clears it', async () => {
    const { vm, udsPath, guestDir } = await startVm({ connRequestTimeoutMs: 200 });
    const host = await listenAt(hostPortPath(udsPath, 52000), { echo: true });
    const guestListener = await listenAt(guestListenPath(guestDir, 52001), { echo: true });
    const before = await hostConnect(udsPath, 'CONNECT 52001\n');

    vm.bareResume();
    const hung = await connectLine(udsPath, 52001);
    // Well past the request timeout: no OK, no EOF, and the guest was never asked.
    await sleep(600);
    expect(hung.text).toBe('');
    expect(hung.gone).toBe(false);
    expect(guestListener.peers).toHaveLength(1);
    // The connection made before still carries bytes both ways; guest-initiated ones work.
    before.peer.socket.write('still');
    await waitFor('echo on the old connection', () => before.peer.text.endsWith('still'));
    const guest = await dial(await vm.exposeHostPort(52000));
    guest.socket.write('up');
    await waitFor('guest-initiated echo', () => guest.text === 'up');
    expect(host.peers).toHaveLength(1);

    // A snapshot's real reset, which the guest acks, clears the gate: the hung request dies
    // with the reset, and the next CONNECT is answered.
    vm.reset();
    vm.ackTransportReset();
    await waitFor('the hung request ends with the reset', () => hung.gone);
    expect(hung.text).toBe('');
    await hostConnect(udsPath, 'CONNECT 52001\n');
    expect(guestListener.peers).toHaveLength(2);
  });

  it('reset({ holdRx }) (1.16, #5882): nothing reaches the guest until it acks; then all of it, in order', async () => {
    const { vm, udsPath, guestDir } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guestListener = await listenAt(guestListenPath(guestDir, 52001), { echo: true });
    vm.reset({ holdRx: true });

    // Guest-initiated: connects, and guest→host bytes flow; host→guest bytes are held.
    const guest = await dial(await vm.exposeHostPort(52000));
    await waitFor('host accept', () => host.peers.length === 1);
    guest.socket.write('hello');
    await waitFor('guest→host during the gate', () => host.peers[0]!.text === 'hello');
    host.peers[0]!.socket.write('welcome');
    host.peers[0]!.socket.write('+more');
    // Host-initiated: the request waits.
    const pending = await connectLine(udsPath, 52001);
    await sleep(300);
    expect(guest.text).toBe('');
    expect(pending.text).toBe('');
    expect(guestListener.peers).toHaveLength(0);

    vm.ackTransportReset();
    await waitFor('held bytes delivered', () => guest.text === 'welcome+more');
    await waitFor('held request answered', () => /^OK \d+\n$/.test(pending.text));
    pending.socket.write('x');
    await waitFor('echo after the gate', () => pending.text.endsWith('x'));
  });

  it('txStall (#5958): guest connects time out, host CONNECTs get EOF without OK, guest bytes stay put', async () => {
    const { vm, udsPath, guestDir, refusals } = await startVm({ connRequestTimeoutMs: 300 });
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guestListener = await listenAt(guestListenPath(guestDir, 52001));
    const guestPath = await vm.exposeHostPort(52000);
    const open = await dial(guestPath);
    await waitFor('host accept', () => host.peers.length === 1);

    vm.txStall(true);
    open.socket.write('stuck');
    const late = await dial(guestPath);
    const asked = await connectLine(udsPath, 52001);
    await waitFor('EOF for the host CONNECT', () => asked.gone);
    expect(asked.text).toBe('');
    expect(guestListener.peers.length).toBe(1); // the guest did accept
    await waitFor('the guest connect timed out', () => late.gone, { timeoutMs: 5000 });
    expect(host.peers).toHaveLength(1); // Firecracker never dialled <uds_path>_52000
    expect(host.peers[0]!.text).toBe('');
    expect(refusals.map((r) => r.reason).sort()).toEqual(['guest-connect-timeout', 'guest-timeout']);

    // A Firecracker with the fix (1.16.1): the bytes held in the guest socket arrive.
    vm.txStall(false);
    await waitFor('held guest bytes delivered', () => host.peers[0]!.text === 'stuck');
    const again = await dial(guestPath);
    await waitFor('guest connects again', () => host.peers.length === 2);
    again.socket.write('ok');
    await waitFor('bytes on the new connection', () => host.peers[1]!.text === 'ok');
  });

  it('connectEof: CONNECT answered by EOF although the guest listens', async () => {
    const { vm, udsPath, guestDir, refusals } = await startVm();
    const guestListener = await listenAt(guestListenPath(guestDir, 52001), { echo: true });
    vm.connectEof(true);
    await expectClosedSilently(await connectLine(udsPath, 52001));
    expect(guestListener.peers).toHaveLength(0);
    expect(refusals).toEqual([{ initiator: 'host', port: 52001, reason: 'guest-reset' }]);
    vm.connectEof(false);
    await hostConnect(udsPath, 'CONNECT 52001\n');
  });

  it(`enforces the default limit of ${FC_MAX_CONNECTIONS} connections, and recovers when they go`, async () => {
    const { vm, udsPath, refusals } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000));
    const guestPath = await vm.exposeHostPort(52000);
    const hogs: Peer[] = [];
    for (let i = 0; i < FC_MAX_CONNECTIONS; i++) hogs.push(await dial(guestPath));
    await waitFor('all live', () => vm.stats().live === FC_MAX_CONNECTIONS && host.peers.length === FC_MAX_CONNECTIONS, {
      timeoutMs: 20_000,
    });
    await expectClosedSilently(await dial(guestPath));
    await expectClosedSilently(await connectLine(udsPath, 52001));
    expect(refusals.map((r) => r.reason)).toEqual(['connection-limit', 'connection-limit']);
    for (const h of hogs) h.socket.destroy();
    for (const p of host.peers) p.socket.destroy();
    await waitFor('all gone', () => vm.stats().live === 0, { timeoutMs: 20_000 });
    const after = await dial(guestPath);
    after.socket.write('room');
    await waitFor('a connection after the limit', () => host.peers.some((p) => p.text === 'room'));
  }, 60_000);
});

describe('lifecycle', () => {
  it('refuses to bind over an existing uds_path, and never removes a file it did not create', async () => {
    const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'fc-'));
    cleanups.push(() => fsp.rm(dir, { recursive: true, force: true }));
    const udsPath = path.join(dir, 'v.sock');
    await fsp.writeFile(udsPath, '');
    const vm = new FirecrackerVsock({ udsPath, guestDir: path.join(dir, 'g') });
    cleanups.push(() => vm.close());
    await expect(vm.start()).rejects.toMatchObject({ code: 'EADDRINUSE' });
    await vm.close();
    expect(existsSync(udsPath)).toBe(true);
  });

  it('rejects unix socket paths longer than 107 bytes instead of truncating them', () => {
    const long = path.join(os.tmpdir(), 'x'.repeat(110));
    expect(() => new FirecrackerVsock({ udsPath: `${long}.sock`, guestDir: os.tmpdir() })).toThrow(RangeError);
    expect(() => new FirecrackerVsock({ udsPath: path.join(os.tmpdir(), 'v.sock'), guestDir: long })).toThrow(RangeError);
  });

  it('close() closes everything, removes its socket files, and is idempotent', async () => {
    const { vm, udsPath, guestDir } = await startVm();
    const host = await listenAt(hostPortPath(udsPath, 52000));
    await listenAt(guestListenPath(guestDir, 52001), { echo: true });
    const guestOut = await dial(await vm.exposeHostPort(52000));
    await waitFor('host accept', () => host.peers.length === 1);
    const hostOut = await hostConnect(udsPath, 'CONNECT 52001\n');
    const handshaking = await dial(udsPath); // never sends its CONNECT line

    await Promise.all([vm.close(), vm.close()]);
    await vm.close();
    await waitFor('everything closed', () => guestOut.gone && host.peers[0]!.gone && hostOut.peer.gone && handshaking.gone);
    expect(existsSync(udsPath)).toBe(false);
    expect(existsSync(guestHostPath(guestDir, 52000))).toBe(false);
    // The guest's own listen socket is not the emulator's.
    expect(existsSync(guestListenPath(guestDir, 52001))).toBe(true);
    expect(vm.stats().live).toBe(0);
    expect(() => vm.exposeHostPort(52003)).toThrow(/closed/);
  });
});
