// The probe's command port: the host dials it through Firecracker's host-initiated
// handshake (CONNECT <port>), so commands still reach the probe when its own session to
// the collector is down. Each connection gets the probe's hello first (who is answering,
// and which generation), then one result per command.

import type net from 'node:net';
import { FrameDecoder, ProtocolError, decodeCollectorMessage, encodeMessage, type CollectorMessage, type Hello } from '@vsockdiag/proto';
import type { CommandAnswer } from './link.js';

export interface CommandPortOptions {
  hello: () => Omit<Hello, 'type'>;
  onCommand: (command: Extract<CollectorMessage, { type: 'command' }>) => Promise<CommandAnswer>;
  log: (level: 'info' | 'warn', message: string) => void;
}

export function serveCommands(socket: net.Socket, opts: CommandPortOptions): void {
  const send = (m: Parameters<typeof encodeMessage>[0]) => {
    if (!socket.destroyed) socket.write(encodeMessage(m));
  };
  const decoder = new FrameDecoder((body) => {
    const m = decodeCollectorMessage(body);
    if (m.type !== 'command') return;
    opts.onCommand(m).then(
      (answer) => send({ type: 'result', id: m.id, ...answer }),
      (err: Error) => send({ type: 'result', id: m.id, ok: false, error: err.message }),
    );
  });
  socket.on('data', (chunk: Buffer) => {
    try {
      decoder.push(chunk);
    } catch (err) {
      opts.log('warn', `command connection: ${(err as Error).message}${err instanceof ProtocolError ? ` (${err.code})` : ''}`);
      socket.destroy();
    }
  });
  socket.on('end', () => socket.end());
  socket.on('error', () => socket.destroy());
  send({ type: 'hello', ...opts.hello() });
}
