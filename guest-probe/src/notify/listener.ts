// sd_notify listener: the addon's datagram socket plus parseNotify and counters.
import { EventEmitter } from 'node:events';

import { loadNative, type NotifyHandle } from '../native.js';
import { parseNotify, type NotifyMessage } from './parse.js';

export interface NotifyCounters {
  /** Every datagram read from the socket, rejected ones included. */
  received: number;
  /** Datagrams not parsed (currently: the oversize ones). */
  rejected: number;
  /** Datagrams longer than MAX_NOTIFY_DATAGRAM bytes (the addon delivers them cut). */
  oversize: number;
  /** Sum of NotifyMessage.invalid over the parsed datagrams. */
  invalidLines: number;
}

export interface NotifyListenerEvents {
  /** A parsed datagram and its sender pid (0 when the kernel gave none). */
  message: [msg: NotifyMessage, pid: number];
}

export class NotifyListener extends EventEmitter<NotifyListenerEvents> {
  readonly counters: NotifyCounters = { received: 0, rejected: 0, oversize: 0, invalidLines: 0 };
  #handle: NotifyHandle | undefined;

  private constructor(readonly path: string) {
    super();
  }

  /**
   * Binds the notify socket at `path` ('@name' for the abstract namespace).
   * Throws the addon's Error (code EADDRINUSE, ENAMETOOLONG, EACCES, ...).
   * While open, the socket keeps the event loop alive.
   */
  static open(path: string): NotifyListener {
    const listener = new NotifyListener(path);
    listener.#handle = loadNative().notifyBind(path, (buf, pid, truncated) => listener.#onDatagram(buf, pid, truncated));
    return listener;
  }

  /** The socket fd, or -1 once closed. */
  get fd(): number {
    return this.#handle ? this.#handle.fd : -1;
  }

  /** Closes the socket and removes its file. Idempotent. */
  close(): void {
    const handle = this.#handle;
    this.#handle = undefined;
    handle?.close();
  }

  #onDatagram(buf: Buffer, pid: number, truncated: boolean): void {
    this.counters.received++;
    if (truncated) {
      this.counters.rejected++;
      this.counters.oversize++;
      return;
    }
    const msg = parseNotify(buf);
    this.counters.invalidLines += msg.invalid;
    this.emit('message', msg, pid);
  }
}
