// Host-initiated connections to a probe's command port, through Firecracker's handshake:
// connect to the VM's uds_path, write `CONNECT <port>\n` in one write, read `OK <n>\n`;
// after that it is a plain byte stream. The probe speaks first (its hello says which probe
// instance and generation is answering), then answers commands. A fresh connection for
// every request, closed after it: never pooled, so no answer can come from a connection
// that belongs to an earlier generation of the VM (the lesson of seed 003).

import net from 'node:net';
import { FrameDecoder, MAX_FRAME_BYTES, MAX_HELLO_FRAME_BYTES, decodeProbeMessage, encodeMessage, type Hello } from '@vsockdiag/proto';
import { RequestError, Requests, type Answer, type ProbeCommand } from './requests.js';

/** Firecracker's reply line is short: "OK 1073741824\n". */
const MAX_REPLY_LINE = 32;

export interface CommandPortAnswer extends Answer {
  hello: Hello;
}

export async function requestViaCommandPort(
  udsPath: string,
  port: number,
  command: ProbeCommand,
  timeoutMs: number,
): Promise<CommandPortAnswer> {
  const socket = net.connect({ path: udsPath });
  socket.setNoDelay?.(true);
  const requests = new Requests();
  const deadline = setTimeout(() => socket.destroy(new RequestError('TIMEOUT', `command port did not answer within ${timeoutMs} ms`)), timeoutMs);
  try {
    return await new Promise<CommandPortAnswer>((resolve, reject) => {
      let okSeen = false;
      let line = Buffer.alloc(0);
      let hello: Hello | null = null;
      const decoder = new FrameDecoder((body) => {
        const m = decodeProbeMessage(body);
        if (!hello) {
          if (m.type !== 'hello') throw new Error(`probe spoke ${m.type} before hello`);
          const h = m;
          hello = h;
          decoder.maxFrameBytes = MAX_FRAME_BYTES; // it said who it is: full-size frames (dump chunks) from here on
          const { id, answer } = requests.start(timeoutMs);
          socket.write(encodeMessage({ type: 'command', id, ...command }));
          answer.then((a) => resolve({ ...a, hello: h }), reject);
        } else if (m.type === 'dump.chunk') requests.onChunk(m);
        else if (m.type === 'result') requests.onResult(m);
      }, MAX_HELLO_FRAME_BYTES);
      const fail = (err: Error) => {
        requests.failAll(err);
        reject(err);
      };
      /** Firecracker's reply to CONNECT; returns the bytes after it (the probe's stream). */
      const handshake = (chunk: Buffer): Buffer | null => {
        line = Buffer.concat([line, chunk]);
        const nl = line.indexOf(0x0a);
        if (nl < 0) {
          if (line.length > MAX_REPLY_LINE) throw new RequestError('UNREACHABLE', 'bad handshake reply from Firecracker');
          return null;
        }
        const reply = line.subarray(0, nl).toString('latin1');
        if (!/^OK \d+$/.test(reply)) throw new RequestError('UNREACHABLE', `Firecracker answered "${reply.slice(0, 40)}" to CONNECT ${port}`);
        okSeen = true;
        return line.subarray(nl + 1);
      };
      socket.once('connect', () => socket.write(`CONNECT ${port}\n`));
      socket.on('data', (chunk: Buffer) => {
        try {
          const rest = okSeen ? chunk : handshake(chunk);
          if (rest?.length) decoder.push(rest);
        } catch (err) {
          fail(err as Error);
          socket.destroy();
        }
      });
      socket.once('error', (err) => fail(err instanceof RequestError ? err : new RequestError('UNREACHABLE', `${udsPath}: ${err.message}`)));
      socket.once('close', () =>
        fail(
          okSeen
            ? new RequestError('CLOSED', 'the probe closed the command connection before answering')
            : new RequestError('UNREACHABLE', `nothing listens on the probe's command port ${port} (Firecracker closed the connection without OK)`),
        ),
      );
    });
  } finally {
    clearTimeout(deadline);
    socket.destroy();
  }
}
