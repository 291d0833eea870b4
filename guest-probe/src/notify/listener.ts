// sd_notify listener: the addon's datagram socket plus parseNotify, the read rate and counters.
import { EventEmitter } from 'node:events';

import { loadNative, type NotifyHandle } from '../native.js';
import { parseNotify, type NotifyMessage } from './parse.js';
import { NOTIFY_PAUSE_MS, NotifyRate } from './rate.js';

export interface NotifyCounters {
  /** Every datagram read from the socket, rejected and dropped ones included. */
  received: number;
  /** Datagrams not parsed (currently: the oversize ones). */
  rejected: number;
  /** Datagrams longer than MAX_NOTIFY_DATAGRAM bytes (the addon delivers them cut). */
  oversize: number;
  /** Sum of NotifyMessage.invalid over the parsed datagrams. */
  invalidLines: number;
  /** Datagrams read over the rate and not passed on (readiness markers always pass). */
  dropped: number;
  /** Times reading stopped for NOTIFY_PAUSE_MS because the rate was spent. */
  pauses: number;
}

export interface NotifyListenerEvents {
  /** A parsed datagram and its sender pid (0 when the kernel gave none). */
  message: [msg: NotifyMessage, pid: number];
}

export class NotifyListener extends EventEmitter<NotifyListenerEvents> {
  readonly counters: NotifyCounters = { received: 0, rejected: 0, oversize: 0, invalidLines: 0, dropped: 0, pauses: 0 };
  #handle: NotifyHandle | undefined;
  #resume: NodeJS.Timeout | undefined;

  private constructor(
    readonly path: string,
    private readonly rate: NotifyRate,
  ) {
    super();
  }

  /**
   * Binds the notify socket at `path` ('@name' for the abstract namespace).
   * Throws the addon's Error (code EADDRINUSE, ENAMETOOLONG, EACCES, ...).
   * While open, the socket keeps the event loop alive (while paused, its resume timer does).
   */
  static open(path: string, rate = new NotifyRate()): NotifyListener {
    const listener = new NotifyListener(path, rate);
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
    clearTimeout(this.#resume);
    this.#resume = undefined;
    handle?.close();
  }

  #onDatagram(buf: Buffer, pid: number, truncated: boolean): void {
    this.counters.received++;
    // Every read costs, whatever it says: a flood of READY=1 is paused like any other.
    const within = this.rate.take();
    if (!within) this.#pause();
    if (truncated) {
      this.counters.rejected++;
      this.counters.oversize++;
      return;
    }
    const msg = parseNotify(buf);
    this.counters.invalidLines += msg.invalid;
    if (!within && !msg.ready && !msg.stopping) {
      this.counters.dropped++;
      return;
    }
    this.emit('message', msg, pid);
  }

  /** Leaves the flood in the kernel's queue for NOTIFY_PAUSE_MS (rate.ts says why so long). */
  #pause(): void {
    const handle = this.#handle;
    if (!handle || this.#resume) return;
    handle.pause();
    this.counters.pauses++;
    const resume = () => {
      this.#resume = undefined;
      try {
        this.#handle?.resume();
      } catch {
        // epoll would not take the fd back (ENOMEM, ENOSPC): try again after another pause
        // rather than stop reading for good.
        this.#resume = setTimeout(resume, NOTIFY_PAUSE_MS);
      }
    };
    this.#resume = setTimeout(resume, NOTIFY_PAUSE_MS);
  }
}
