import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FrameDecoder, decodeProbeMessage, encodeMessage, type CollectorMessage, type ProbeMessage } from '@vsockdiag/proto';
import { serveCommands, type CommandHandler } from '../src/commands.js';
import { helloMessage } from '../../test/support/hello.js';
import { waitFor } from '../../test/support/wait.js';

// The probe's command port on a Unix socket, and a host end that decodes what it answers.

let dir: string;
let server: net.Server | null;
let client: net.Socket | null;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'vd-cmd-'));
  server = null;
  client = null;
});

afterEach(async () => {
  client?.destroy();
  if (server) await new Promise<void>((resolve) => server!.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

const hello = helloMessage({ generation: 3 });

async function hostEnd(onCommand: CommandHandler) {
  const logs: string[] = [];
  const path = join(dir, 'cmd.sock');
  server = net.createServer((socket) => serveCommands(socket, { hello: () => hello, onCommand, log: (_l, m) => logs.push(m) }));
  await new Promise<void>((resolve) => server!.listen(path, resolve));
  const socket = net.connect(path);
  client = socket;
  const received: ProbeMessage[] = [];
  let ended = false;
  const decoder = new FrameDecoder((body) => received.push(decodeProbeMessage(body)));
  socket.on('data', (d: Buffer) => decoder.push(d));
  socket.on('close', () => (ended = true));
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  return {
    received,
    logs,
    send: (m: CollectorMessage) => socket.write(encodeMessage(m)),
    raw: (b: Buffer) => socket.write(b),
    ended: () => ended,
  };
}

describe('serveCommands', () => {
  it('says hello first, then streams a command’s output and its result', async () => {
    const host = await hostEnd(async (c, channel) => {
      await channel.send({ type: 'dump.chunk', id: c.id, index: 0, data: Buffer.from('stack') });
      return { ok: true };
    });
    await waitFor('hello', () => host.received.length > 0);
    expect(host.received[0]).toEqual(hello);
    host.send({ type: 'command', id: 5, op: 'dump', mode: 'threads' });
    await waitFor('result', () => host.received.some((m) => m.type === 'result'));
    expect(host.received.slice(1).map((m) => m.type)).toEqual(['dump.chunk', 'result']);
    expect(host.received[2]).toEqual({ type: 'result', id: 5, ok: true });
  });

  it('closes with ERR_UNEXPECTED on anything but a command, and says so', async () => {
    const seen: unknown[] = [];
    const host = await hostEnd(async (c) => {
      seen.push(c);
      return { ok: true };
    });
    host.send({ type: 'ack', seq: 1 });
    host.send({ type: 'command', id: 1, op: 'status' });
    await waitFor('close', host.ended);
    expect(seen).toEqual([]);
    expect(host.logs).toEqual(['command connection: ack is not admitted on this connection (ERR_UNEXPECTED)']);
  });

  it('closes on a malformed frame', async () => {
    const host = await hostEnd(async () => ({ ok: true }));
    host.raw(Buffer.from([0, 0, 0, 1, 0xc1]));
    await waitFor('close', host.ended);
    expect(host.logs).toEqual([expect.stringContaining('(ERR_MSGPACK)')]);
  });
});
