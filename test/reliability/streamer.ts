// A guest that streams numbered events through the probe's own link code (guest-probe's
// Link and EventRing: hello, resend from the welcome's ack, acks), over an emulated
// Firecracker vsock device. The crash scenarios use it where they must know exactly what
// each probe sent: event `seq` carries `status: String(seq)`, so a stored event filed
// under the wrong number shows too.

import fs from 'node:fs';
import path from 'node:path';
import { DEFAULTS } from '@vsockdiag/proto';
import { Link } from '../../guest-probe/src/link.js';
import { EventRing } from '../../guest-probe/src/ring.js';
import { FirecrackerVsock } from '../harness/firecracker.js';
import { helloMessage } from '../support/hello.js';

export class Streamer {
  readonly ring = new EventRing();
  readonly vm: FirecrackerVsock;
  readonly udsPath: string;
  /** The highest seq the collector acked, at any moment (never more than it stored). */
  maxAcked = 0;
  private link: Link | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    readonly id: string,
    dir: string,
    private readonly instanceId: string,
  ) {
    fs.mkdirSync(dir, { recursive: true });
    this.udsPath = path.join(dir, 'v.sock');
    this.vm = new FirecrackerVsock({ udsPath: this.udsPath, guestDir: dir, halfClose: 'firecracker' });
  }

  async start(): Promise<void> {
    await this.vm.start();
    const connectTo = await this.vm.exposeHostPort(DEFAULTS.vsockPort);
    const link = new Link({
      address: `unix:${connectTo}`,
      ring: this.ring,
      hello: (generation) => {
        const { type: _type, ...hello } = helloMessage({
          instanceId: this.instanceId,
          generation,
          lastSeq: this.ring.lastSeq,
          clocks: { wallMs: Date.now(), sinceBootMs: performance.now() },
        });
        return hello;
      },
      onCommand: async () => ({ ok: false, error: 'this guest takes no commands' }),
      sinceBootMs: () => performance.now(),
      log: () => undefined,
    });
    link.on('ack', (seq: number) => {
      this.maxAcked = Math.max(this.maxAcked, seq);
    });
    this.link = link;
    link.start();
  }

  /** Appends `perTick` events every 10 ms until pause(). */
  stream(perTick: number): void {
    this.pause();
    this.timer = setInterval(() => {
      for (let i = 0; i < perTick; i++) {
        const seq = this.ring.lastSeq + 1;
        this.ring.push({ kind: 'phase', source: 'notify', status: String(seq) }, performance.now());
      }
      this.link?.flush();
    }, 10);
  }

  pause(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  get acked(): number {
    return this.link?.acked ?? 0;
  }

  async stop(): Promise<void> {
    this.pause();
    this.link?.stop();
    await this.vm.close();
  }
}
