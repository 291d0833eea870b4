import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import net from 'node:net';
import type { EventBody, EventOf } from '@vsockdiag/proto';
import { childReaper } from '../../test/support/children.js';
import { findListener, listListeners } from '../src/diag.js';
import {
  ListenerWatcher,
  UNKNOWN_DUMP_EVERY_MS,
  pickListenerQuery,
  procListenerQuery,
  sockDiagListenerQuery,
  type ListenerQuery,
} from '../src/listener.js';

// Both sources of LISTEN sockets must give the same answers.
const SOURCES: Record<string, () => ListenerQuery> = {
  sock_diag: () => pickListenerQuery('/proc'),
  proc: () => procListenerQuery('/proc'),
};
let query: ListenerQuery;

const servers: net.Server[] = [];
const children = childReaper();

function listenOn(port: number, host = '127.0.0.1'): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen({ port, host, exclusive: true }, () => {
      servers.push(server);
      resolve(server);
    });
  });
}

function close(server: net.Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

const portOf = (server: net.Server) => (server.address() as net.AddressInfo).port;

/** A free port: bind port 0, note the port, close. */
async function freePort(): Promise<number> {
  const s = await listenOn(0);
  const port = portOf(s);
  await close(s);
  return port;
}

function watcher(port: number, targetPid: () => number | null = () => process.pid) {
  const events: EventBody[] = [];
  const w = new ListenerWatcher({ port, procRoot: '/proc', query, emit: (e) => events.push(e), targetPid });
  const tick = (): EventBody[] => {
    const before = events.length;
    w.tick();
    return events.slice(before);
  };
  return { w, events, tick };
}

afterEach(async () => {
  for (const s of servers.splice(0)) if (s.listening) await close(s);
});

describe.each(Object.keys(SOURCES))('ListenerWatcher (live, %s)', (source) => {
  beforeEach(() => {
    query = SOURCES[source]!();
    expect(query.source).toBe(source);
  });

  it('reports nothing while the port is free', async () => {
    const port = await freePort();
    const { tick } = watcher(port);
    expect(tick()).toEqual([]);
    expect(tick()).toEqual([]);
  });

  it('reports bound (with our pid and the port), unbound, and bound again with a new inode', async () => {
    const port = await freePort();
    const { tick } = watcher(port);
    expect(tick()).toEqual([]);

    const s1 = await listenOn(port);
    const first = tick();
    expect(first).toHaveLength(1);
    const bound1 = first[0] as EventOf<'listener.bound'>;
    expect(bound1).toMatchObject({ kind: 'listener.bound', port, address: '127.0.0.1', pid: process.pid, acceptQueue: 0 });
    expect(bound1.inode).toBeGreaterThan(0);
    // Steady: no repeat.
    expect(tick()).toEqual([]);
    expect(tick()).toEqual([]);

    await close(s1);
    expect(tick()).toEqual([{ kind: 'listener.unbound', port }]);
    expect(tick()).toEqual([]);

    await listenOn(port);
    const again = tick();
    expect(again).toHaveLength(1);
    const bound2 = again[0] as EventOf<'listener.bound'>;
    expect(bound2).toMatchObject({ kind: 'listener.bound', port, pid: process.pid });
    expect(bound2.inode).toBeGreaterThan(0);
    expect(bound2.inode).not.toBe(bound1.inode);
  });

  it('ignores a listener on another port', async () => {
    const port = await freePort();
    const other = await listenOn(0);
    expect(portOf(other)).not.toBe(port);
    const { tick } = watcher(port);
    expect(tick()).toEqual([]);
    // Both: only the watched port is reported.
    await listenOn(port);
    const out = tick();
    expect(out).toEqual([expect.objectContaining({ kind: 'listener.bound', port })]);
  });

  it('ignores a connected (non-LISTEN) socket on the port', async () => {
    const server = await listenOn(0);
    const port = portOf(server);
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
    const client = net.connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => client.once('connect', () => resolve()));
    const peer = await accepted;
    try {
      const { tick } = watcher(port);
      expect(tick()).toHaveLength(1); // the listener
      // Stop listening; the accepted connection (local port = port, ESTABLISHED) lives on.
      const closed = close(server);
      await new Promise((r) => setImmediate(r));
      expect(server.listening).toBe(false);
      expect(tick()).toEqual([{ kind: 'listener.unbound', port }]);
      expect(tick()).toEqual([]);
      peer.destroy();
      client.destroy();
      await closed;
    } finally {
      client.destroy();
      peer.destroy();
    }
  });

  it('finds the owner by scanning every process when the target pid does not own it', async () => {
    const port = await freePort();
    await listenOn(port);
    let asked = 0;
    const { tick } = watcher(port, () => {
      asked++;
      return 1; // init does not hold our socket
    });
    const out = tick();
    expect(asked).toBe(1);
    expect(out[0]).toMatchObject({ kind: 'listener.bound', port, pid: process.pid });
  });

  it('finds the owner when no target is known yet', async () => {
    const port = await freePort();
    await listenOn(port);
    const { tick } = watcher(port, () => null);
    expect(tick()[0]).toMatchObject({ kind: 'listener.bound', port, pid: process.pid });
  });

  it('reports the owner pid and accept queue of another process that does not accept', async () => {
    // A listener in another process that never calls accept(): connections pile up in its queue.
    const py = spawn(
      'python3',
      [
        '-c',
        'import socket,sys,time\n' +
          's=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(8)\n' +
          'print(s.getsockname()[1], flush=True)\n' +
          'time.sleep(30)\n',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    children.track(py);
    const port = await new Promise<number>((resolve, reject) => {
      py.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      py.once('error', reject);
    });
    const clients = [net.connect(port, '127.0.0.1'), net.connect(port, '127.0.0.1')];
    await Promise.all(clients.map((c) => new Promise<void>((resolve) => c.once('connect', () => resolve()))));
    try {
      const { tick } = watcher(port); // the "target" (us) does not own it: found by a scan
      const out = tick();
      expect(out).toEqual([expect.objectContaining({ kind: 'listener.bound', port, address: '127.0.0.1', pid: py.pid, acceptQueue: 2 })]);
      // A later query sees the queue grow (sock_diag: from the lookup of the known listener).
      const third = net.connect(port, '127.0.0.1');
      clients.push(third);
      await new Promise<void>((resolve) => third.once('connect', () => resolve()));
      expect(query.listening(port)).toEqual([expect.objectContaining({ port, acceptQueue: 3 })]);
    } finally {
      clients.forEach((c) => c.destroy());
    }
  });
});

describe('sockDiagListenerQuery', () => {
  /** The query with its kernel lookups counted, on a clock the test moves. */
  function counted() {
    const calls = { find: 0, dump: 0 };
    const clock = { now: 0 };
    const q = sockDiagListenerQuery(
      (address, port) => {
        calls.find++;
        return findListener(address, port);
      },
      (port) => {
        calls.dump++;
        return listListeners(port);
      },
      () => clock.now,
    );
    return { q, calls, clock };
  }

  it('while none is known, looks the loopback up and dumps once a second; then looks up only the one', async () => {
    const port = await freePort();
    const { q, calls, clock } = counted();
    expect(q.listening(port)).toEqual([]);
    expect(calls).toEqual({ find: 2, dump: 1 }); // 127.0.0.1 and ::1, then the first dump
    expect(q.listening(port)).toEqual([]);
    expect(calls).toEqual({ find: 4, dump: 1 });
    clock.now += UNKNOWN_DUMP_EVERY_MS;
    expect(q.listening(port)).toEqual([]);
    expect(calls).toEqual({ find: 6, dump: 2 });

    const s = await listenOn(port);
    const [first] = q.listening(port);
    expect(first).toMatchObject({ address: '127.0.0.1', port });
    expect(calls).toEqual({ find: 7, dump: 2 }); // found by the first lookup, no dump
    for (let i = 0; i < 3; i++) expect(q.listening(port)).toEqual([first]);
    expect(calls).toEqual({ find: 10, dump: 2 });

    // Gone: the lookup misses, so do the loopback's, one dump confirms at once; then once a second.
    await close(s);
    expect(q.listening(port)).toEqual([]);
    expect(calls).toEqual({ find: 13, dump: 3 });
    expect(q.listening(port)).toEqual([]);
    expect(calls).toEqual({ find: 15, dump: 3 });
  });

  it("finds envd's 0.0.0.0 and a dual-stack [::] by the loopback's lookups alone", async () => {
    for (const host of ['0.0.0.0', '::']) {
      const port = await freePort();
      const { q, calls } = counted();
      const s = await listenOn(port, host);
      expect(q.listening(port)).toEqual([expect.objectContaining({ address: host, port })]);
      expect(calls.dump).toBe(0);
      await close(s);
    }
  });

  it('finds a listener the loopback does not reach by the dump, within UNKNOWN_DUMP_EVERY_MS', async () => {
    const port = await freePort();
    const { q, calls, clock } = counted();
    expect(q.listening(port)).toEqual([]);
    await listenOn(port, '127.0.0.2'); // a connection to 127.0.0.1 or ::1 does not reach it
    expect(q.listening(port)).toEqual([]);
    clock.now += UNKNOWN_DUMP_EVERY_MS;
    const [found] = q.listening(port);
    expect(found).toMatchObject({ address: '127.0.0.2', port });
    expect(calls.dump).toBe(2);
    // Known now: looked up alone.
    expect(q.listening(port)).toEqual([found]);
    expect(calls.dump).toBe(2);
  });

  it('sees a listener replaced between two queries (same address and port, new socket)', async () => {
    const port = await freePort();
    const { q } = counted();
    const s1 = await listenOn(port);
    const [first] = q.listening(port);
    await close(s1);
    await listenOn(port);
    const [second] = q.listening(port);
    expect(second).toMatchObject({ address: '127.0.0.1', port });
    expect(second!.inode).not.toBe(first!.inode);
  });

  it('answers from the dump when the kernel refuses the lookup', () => {
    const l = { family: 4 as const, address: '127.0.0.1', port: 9, inode: 5, acceptQueue: 0, backlog: 1 };
    let dumps = 0;
    const q = sockDiagListenerQuery(
      () => {
        throw Object.assign(new Error('sock_diag: AF_INET lookup: Invalid argument'), { code: 'EINVAL' });
      },
      () => {
        dumps++;
        return [l];
      },
    );
    expect(q.listening(9)).toEqual([l]);
    expect(q.listening(9)).toEqual([l]);
    expect(dumps).toBe(2);
  });
});
