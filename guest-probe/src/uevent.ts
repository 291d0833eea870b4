// The kernel's uevents, for one of them: NEW_VMGENID. When Firecracker restores a snapshot it
// changes its VMGenID device's id, and the guest kernel's vmgenid driver sends a KOBJ_CHANGE
// uevent carrying NEW_VMGENID=1 (Linux 6.9+). The probe reports it as a `vm.genid` event, so
// the collector knows a new life of the VM began there, at that place in the probe's events.
//
// Listen-only, through the addon's NETLINK_KOBJECT_UEVENT socket in the kernel's group
// (native/src/uevent.c), polled: on the probe's one-second tick, and at once when the link to
// the collector drops, since a restore resets the link in the same moment: the vm.genid then
// comes before the mark of where the link was lost (hello.lostAtSeq).
//
// Only root in the guest can send into that group (CAP_NET_ADMIN), and root in the guest can
// make the probe say anything: the collector takes it as the guest's word, like all else.
// Work per poll is bounded; a kernel message is "ACTION@DEVPATH\0KEY=VALUE\0…".

import { MAX_NAME, type EventBody } from '@vsockdiag/proto';
import type { NativeAddon } from './native.js';

/** Datagrams read per poll at most (a hotplug storm waits for the next poll). */
export const UEVENT_MAX_PER_POLL = 256;
/** The kernel sends at most 64 variables (UEVENT_NUM_ENVP). */
const MAX_VARS = 64;

export interface Uevent {
  action: string;
  devpath: string;
  vars: Map<string, string>;
}

/** A kernel uevent, or null for anything else (udev's "libudev" format, garbage). */
export function parseUevent(buf: Buffer): Uevent | null {
  const parts = buf.toString('latin1').split('\0');
  const head = /^([a-z]{1,16})@(\/[^\0]*)$/.exec(parts[0] ?? '');
  if (!head) return null;
  const vars = new Map<string, string>();
  for (const p of parts.slice(1, 1 + MAX_VARS)) {
    const eq = p.indexOf('=');
    if (eq > 0) vars.set(p.slice(0, eq), p.slice(eq + 1));
  }
  return { action: head[1]!, devpath: head[2]!, vars };
}

/** The vmgenid driver's announcement of a new VM generation id. */
export function isNewVmgenid(u: Uevent): boolean {
  return u.action === 'change' && u.vars.get('NEW_VMGENID') === '1';
}

type Addon = Pick<NativeAddon, 'ueventOpen' | 'ueventRead' | 'closeFd'>;

export interface UeventCounters {
  read: number;
  /** Times the kernel dropped uevents because the socket's buffer was full. */
  overflows: number;
  vmgenid: number;
}

export class UeventWatcher {
  private fd: number | null;
  readonly counters: UeventCounters = { read: 0, overflows: 0, vmgenid: 0 };

  constructor(
    private readonly addon: Addon,
    private readonly emit: (body: Extract<EventBody, { kind: 'vm.genid' }>) => void,
    log: (level: 'info' | 'warn', message: string) => void,
  ) {
    try {
      this.fd = addon.ueventOpen();
    } catch (err) {
      // Without it a restore is still seen from the clocks and the orchestrator's hints.
      log('warn', `kernel uevents unavailable (restores are then told by the clocks only): ${(err as Error).message}`);
      this.fd = null;
    }
  }

  get open(): boolean {
    return this.fd !== null;
  }

  /** Reads what is waiting (bounded), reporting each NEW_VMGENID. */
  poll(): void {
    if (this.fd === null) return;
    for (let i = 0; i < UEVENT_MAX_PER_POLL; i++) {
      const buf = this.addon.ueventRead(this.fd);
      if (buf === null) return;
      if (buf.length === 0) {
        this.counters.overflows++;
        continue;
      }
      this.counters.read++;
      const u = parseUevent(buf);
      if (!u || !isNewVmgenid(u)) continue;
      this.counters.vmgenid++;
      this.emit({ kind: 'vm.genid', devpath: u.devpath.slice(0, MAX_NAME) });
    }
  }

  close(): void {
    if (this.fd === null) return;
    this.addon.closeFd(this.fd);
    this.fd = null;
  }
}
