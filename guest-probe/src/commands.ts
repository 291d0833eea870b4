// Commands from the host, on either path: the probe's own session (link.ts) or the command
// port the host dials through Firecracker's `CONNECT <port>` handshake when that session is
// down. Both run a command the same way: the handler may stream data (dump chunks) through
// a channel that respects the socket's backpressure, then its answer goes out as `result`.

import type net from 'node:net';
import {
  FrameDecoder,
  ProtocolError,
  decodeCollectorMessage,
  encodeMessage,
  type CollectorMessageOf,
  type Hello,
  type ProbeMessage,
  type ProbeMessageOf,
} from '@vsockdiag/proto';

export type Command = CollectorMessageOf<'command'>;
export type CommandAnswer = Omit<ProbeMessageOf<'result'>, 'type' | 'id'>;

/** Where a command's streamed output goes. send() resolves once the socket took the bytes
 *  (after 'drain' when its buffer was full) and rejects when the connection is gone. */
export interface CommandChannel {
  send(m: ProbeMessage): Promise<void>;
}

export type CommandHandler = (command: Command, channel: CommandChannel) => Promise<CommandAnswer>;

export function channelFor(socket: net.Socket): CommandChannel {
  return {
    send(m) {
      if (socket.destroyed) return Promise.reject(new Error('connection closed'));
      if (socket.write(encodeMessage(m))) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const done = (err?: Error) => {
          socket.removeListener('drain', onDrain);
          socket.removeListener('close', onClose);
          if (err) reject(err);
          else resolve();
        };
        const onDrain = () => done();
        const onClose = () => done(new Error('connection closed'));
        socket.once('drain', onDrain);
        socket.once('close', onClose);
      });
    },
  };
}

/** Runs one command and sends its result; a failing handler becomes a failed result. */
export function runCommand(handler: CommandHandler, command: Command, channel: CommandChannel): void {
  handler(command, channel)
    .catch((err: Error): CommandAnswer => ({ ok: false, error: err.message.slice(0, 4000) }))
    .then((answer) => channel.send({ type: 'result', id: command.id, ...answer }))
    .catch(() => {
      /* the connection went away: the host will ask again */
    });
}

export interface CommandPortOptions {
  hello: () => Omit<Hello, 'type'>;
  onCommand: CommandHandler;
  log: (level: 'info' | 'warn', message: string) => void;
}

/** One host-initiated connection: the probe's hello first (who is answering, and which
 *  generation), then a result for each command. */
export function serveCommands(socket: net.Socket, opts: CommandPortOptions): void {
  const channel = channelFor(socket);
  const decoder = new FrameDecoder((body) => {
    const m = decodeCollectorMessage(body);
    if (m.type === 'command') runCommand(opts.onCommand, m, channel);
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
  void channel.send({ type: 'hello', ...opts.hello() }).catch(() => {});
}
