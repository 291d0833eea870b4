import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import {
  FrameDecoder,
  MAX_HELLO_FRAME_BYTES,
  ProtocolError,
  decodeCollectorMessage,
  encodeMessage,
  type CollectorMessage,
  type ProbeMessage,
} from '@vsockdiag/proto';
import { afterEach, describe, expect, it } from 'vitest';
import { requestViaCommandPort } from '../src/collector/probe-dial.js';
import { RequestError } from '../src/collector/requests.js';
import { helloMessage } from '../../test/support/hello.js';

const hello = helloMessage({ generation: 2 });

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

/**
 * A Firecracker uds_path: reads `CONNECT <port>\n`, lets `reply` answer it (the OK line, and
 * what the probe says in the same write), then hands each command to `onCommand`.
 */
async function fakeFirecracker(opts: {
  reply: (port: number) => Buffer;
  onCommand?: (m: CollectorMessage, send: (m: ProbeMessage) => void, socket: net.Socket) => void;
}): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vd-dial-'));
  const udsPath = path.join(dir, 'v.sock');
  const sockets: net.Socket[] = [];
  const server = net.createServer((socket) => {
    sockets.push(socket);
    socket.on('error', () => {});
    let line = '';
    const decoder = new FrameDecoder((body) =>
      opts.onCommand?.(decodeCollectorMessage(body), (m) => socket.write(encodeMessage(m)), socket),
    );
    socket.on('data', (chunk: Buffer) => {
      if (line.endsWith('\n')) return decoder.push(chunk);
      line += chunk.toString('latin1');
      const m = /^CONNECT (\d+)\n$/.exec(line);
      if (m) socket.write(opts.reply(Number(m[1])));
    });
  });
  await new Promise<void>((resolve) => server.listen(udsPath, resolve));
  cleanup.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return udsPath;
}

const ok =
  (...frames: Buffer[]) =>
  () =>
    Buffer.concat([Buffer.from('OK 1073741824\n'), ...frames]);

describe('requestViaCommandPort', () => {
  it('sends CONNECT, reads the hello in the same write as OK, and collects the answer', async () => {
    let askedPort = 0;
    const udsPath = await fakeFirecracker({
      reply: (port) => {
        askedPort = port;
        return ok(encodeMessage(hello))();
      },
      onCommand: (m, send) => {
        if (m.type !== 'command') return;
        send({ type: 'dump.chunk', id: m.id, index: 0, data: Buffer.from('goroutine 1') });
        send({ type: 'result', id: m.id, ok: true });
      },
    });
    const a = await requestViaCommandPort(udsPath, 52001, { op: 'dump', mode: 'threads' }, 5000);
    expect(askedPort).toBe(52001);
    expect(a.hello).toEqual(hello);
    expect(a.result).toMatchObject({ ok: true });
    expect(Buffer.concat(a.chunks).toString()).toBe('goroutine 1');
  });

  it('refuses a probe that speaks before its hello with ERR_UNEXPECTED, as the session does', async () => {
    const udsPath = await fakeFirecracker({ reply: ok(encodeMessage({ type: 'result', id: 1, ok: true }), encodeMessage(hello)) });
    const err = await requestViaCommandPort(udsPath, 52001, { op: 'status' }, 5000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err).toMatchObject({ code: 'ERR_UNEXPECTED', message: 'result before hello' });
  });

  it('refuses a frame over MAX_HELLO_FRAME_BYTES before the hello', async () => {
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_HELLO_FRAME_BYTES + 1, 0);
    const udsPath = await fakeFirecracker({ reply: ok(header) });
    await expect(requestViaCommandPort(udsPath, 52001, { op: 'status' }, 5000)).rejects.toMatchObject({ code: 'ERR_FRAME_TOO_LARGE' });
  });

  it('is UNREACHABLE when Firecracker does not answer OK', async () => {
    const udsPath = await fakeFirecracker({ reply: () => Buffer.from('FAILURE\n') });
    const err = await requestViaCommandPort(udsPath, 52001, { op: 'status' }, 5000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RequestError);
    expect(err).toMatchObject({ code: 'UNREACHABLE', message: expect.stringContaining('FAILURE') });
  });

  it('is CLOSED when the probe hangs up before answering', async () => {
    const udsPath = await fakeFirecracker({ reply: ok(encodeMessage(hello)), onCommand: (_m, _send, socket) => socket.destroy() });
    await expect(requestViaCommandPort(udsPath, 52001, { op: 'status' }, 5000)).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('is a TIMEOUT when the probe never answers', async () => {
    const udsPath = await fakeFirecracker({ reply: ok(encodeMessage(hello)) });
    await expect(requestViaCommandPort(udsPath, 52001, { op: 'status' }, 200)).rejects.toMatchObject({ code: 'TIMEOUT' });
  });

  it('gives up at the dial deadline when CONNECT is never answered (firecracker#6100), not at the request limit', async () => {
    const udsPath = await fakeFirecracker({ reply: () => Buffer.alloc(0) });
    const started = Date.now();
    const err = await requestViaCommandPort(udsPath, 52001, { op: 'status' }, 30_000, 300).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RequestError);
    expect(err).toMatchObject({ code: 'UNREACHABLE', message: expect.stringContaining('within 300 ms') });
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("the dial deadline covers the probe's hello too: OK followed by silence is UNREACHABLE", async () => {
    const udsPath = await fakeFirecracker({ reply: ok() });
    await expect(requestViaCommandPort(udsPath, 52001, { op: 'status' }, 30_000, 300)).rejects.toMatchObject({ code: 'UNREACHABLE' });
  });

  it('a slow answer after the hello is still waited for, up to the request limit', async () => {
    const udsPath = await fakeFirecracker({
      reply: ok(encodeMessage(hello)),
      onCommand: (m, send) => {
        if (m.type === 'command') setTimeout(() => send({ type: 'result', id: m.id, ok: true }), 600);
      },
    });
    const a = await requestViaCommandPort(udsPath, 52001, { op: 'status' }, 10_000, 300);
    expect(a.result).toMatchObject({ ok: true });
  });
});
