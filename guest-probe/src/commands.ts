// Commands from the host, on either path: the probe's own session (link.ts) or the command
// port the host dials through Firecracker's `CONNECT <port>` handshake when that session is
// down. Both run a command the same way: the handler may stream data (dump chunks) through
// a channel that respects the socket's backpressure, then its answer goes out as `result`.

import type net from 'node:net';
import {
  Connection,
  decodeCollectorMessage,
  type CollectorMessage,
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

export function channelFor(connection: { deliver(m: ProbeMessage): Promise<void> }): CommandChannel {
  return { send: (m) => connection.deliver(m) };
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

/** The host sends commands, nothing else; there is no welcome to wait for. */
const ADMITS = { 'awaiting-hello': [], open: ['command'] } as const;

/** One host-initiated connection: the probe's hello first (who is answering, and which
 *  generation), then a result for each command. */
export function serveCommands(socket: net.Socket, opts: CommandPortOptions): void {
  const connection = new Connection<CollectorMessage, ProbeMessage, 'command'>(socket, {
    peer: 'host',
    decode: decodeCollectorMessage,
    admits: ADMITS,
    hello: { type: 'hello', ...opts.hello() },
    onMessage: (m) => runCommand(opts.onCommand, m, channel),
    onClose: ({ reason, code }) => {
      if (code) opts.log('warn', `command connection: ${reason} (${code})`);
    },
  });
  const channel = channelFor(connection);
  connection.open();
}
