// Host-initiated connections to a probe's command port, through Firecracker's handshake:
// connect to the VM's uds_path, write `CONNECT <port>\n` in one write, read `OK <n>\n`;
// after that it is a plain byte stream, run as a Connection (proto/src/connection.ts). The
// probe speaks first (its hello says which probe instance and generation is answering), then
// answers commands. A fresh connection for every request, closed after it: never pooled, so
// no answer can come from a connection that belongs to an earlier generation of the VM (the
// lesson of seed 003).

import net from 'node:net';
import {
  Connection,
  decodeProbeMessage,
  type Closed,
  type CollectorMessage,
  type Hello,
  type ProbeMessage,
  type ProbeMessageOf,
} from '@vsockdiag/proto';
import { RequestError, Requests, type Answer, type ProbeCommand } from './requests.js';

/** Firecracker's reply line is short: "OK 1073741824\n". */
const MAX_REPLY_LINE = 32;

/**
 * How long the handshake may take: connect, `OK <n>` and the probe's hello. A working
 * Firecracker answers a CONNECT with OK or EOF within its CONN_REQUEST_TIMEOUT_MS (2 s); one
 * that says nothing past that is hung and will stay so (after a bare pause/resume every
 * host-initiated connection hangs forever, firecracker#6100), so the dump service gives up
 * on the command port then, not at the dump's own time limit, and asks the session instead.
 */
export const DIAL_DEADLINE_MS = 3000;

/** The probe's hello first, then what answers a command. */
const ADMITS = { 'awaiting-hello': ['hello'], open: ['dump.chunk', 'result'] } as const;

type Admitted = ProbeMessageOf<(typeof ADMITS)[keyof typeof ADMITS][number]>;

export interface CommandPortAnswer extends Answer {
  hello: Hello;
}

export async function requestViaCommandPort(
  udsPath: string,
  port: number,
  command: ProbeCommand,
  timeoutMs: number,
  dialDeadlineMs = DIAL_DEADLINE_MS,
): Promise<CommandPortAnswer> {
  const socket = net.connect({ path: udsPath });
  const requests = new Requests();
  const deadline = setTimeout(
    () => socket.destroy(new RequestError('TIMEOUT', `command port did not answer within ${timeoutMs} ms`)),
    timeoutMs,
  );
  const handshakeDeadline = setTimeout(
    () =>
      socket.destroy(
        new RequestError(
          'UNREACHABLE',
          `no answer to CONNECT ${port} within ${dialDeadlineMs} ms (Firecracker's host-initiated path is hung)`,
        ),
      ),
    Math.min(dialDeadlineMs, timeoutMs),
  );
  try {
    return await new Promise<CommandPortAnswer>((resolve, reject) => {
      const fail = (err: Error) => {
        requests.failAll(err);
        reject(err);
      };
      const socketError = (err: Error) =>
        err instanceof RequestError ? err : new RequestError('UNREACHABLE', `${udsPath}: ${err.message}`);

      /** The probe's stream, once Firecracker said OK; `rest` is what followed the OK line. */
      const talk = (rest: Buffer) => {
        const connection = new Connection<ProbeMessage, CollectorMessage, Admitted['type']>(socket, {
          peer: 'probe',
          decode: decodeProbeMessage,
          admits: ADMITS,
          onMessage: (m) => {
            if (m.type === 'hello') {
              clearTimeout(handshakeDeadline);
              // It said who it is: full-size frames (dump chunks) from here on.
              connection.open();
              const { id, answer } = requests.start(timeoutMs);
              connection.send({ type: 'command', id, ...command });
              answer.then((a) => resolve({ ...a, hello: m }), reject);
            } else if (m.type === 'dump.chunk') requests.onChunk(m);
            else requests.onResult(m);
          },
          onClose: ({ code, error }: Closed) => {
            if (error && code)
              fail(error); // a ProtocolError (ERR_UNEXPECTED before hello, …), or ours
            else if (error) fail(socketError(error));
            else fail(new RequestError('CLOSED', 'the probe closed the command connection before answering'));
          },
        });
        if (rest.length) connection.feed(rest);
      };

      // Firecracker's reply to CONNECT, before the probe's stream.
      let line = Buffer.alloc(0);
      const handshake = (chunk: Buffer) => {
        line = Buffer.concat([line, chunk]);
        const nl = line.indexOf(0x0a);
        if (nl < 0) {
          if (line.length > MAX_REPLY_LINE) refuse('bad handshake reply from Firecracker');
          return;
        }
        const reply = line.subarray(0, nl).toString('latin1');
        if (!/^OK \d+$/.test(reply)) return refuse(`Firecracker answered "${reply.slice(0, 40)}" to CONNECT ${port}`);
        socket.removeListener('data', handshake);
        socket.removeListener('error', handshakeError);
        socket.removeListener('close', handshakeClose);
        talk(line.subarray(nl + 1));
      };
      const refuse = (message: string) => {
        fail(new RequestError('UNREACHABLE', message));
        socket.destroy();
      };
      const handshakeError = (err: Error) => fail(socketError(err));
      const handshakeClose = () =>
        fail(
          new RequestError(
            'UNREACHABLE',
            `nothing listens on the probe's command port ${port} (Firecracker closed the connection without OK)`,
          ),
        );
      socket.once('connect', () => socket.write(`CONNECT ${port}\n`));
      socket.on('data', handshake);
      socket.on('error', handshakeError);
      socket.on('close', handshakeClose);
    });
  } finally {
    clearTimeout(deadline);
    clearTimeout(handshakeDeadline);
    socket.destroy();
  }
}
