// The probe's uevent reader: the kernel's message format, NEW_VMGENID picked out, bounded
// polls, and the addon's netlink socket receiving a real uevent broadcast in a network
// namespace of the test's own (never the host's).

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { EventBody } from '@vsockdiag/proto';
import { describe, expect, it } from 'vitest';
import { NEW_VMGENID_UEVENT, ueventSender } from '../../test/harness/uevent.js';
import { UEVENT_MAX_PER_POLL, UeventWatcher, isNewVmgenid, parseUevent } from '../src/uevent.js';

const ADDON = fileURLToPath(new URL('../native/build/Release/vsockdiag.node', import.meta.url));
const FIXTURE = fileURLToPath(new URL('./fixtures/uevent-ns.mjs', import.meta.url));
const kernel = (fields: readonly string[]) => Buffer.from(`${fields.join('\0')}\0`, 'latin1');

describe('parseUevent', () => {
  it('reads the kernel format and finds NEW_VMGENID', () => {
    const u = parseUevent(kernel(NEW_VMGENID_UEVENT))!;
    expect(u.action).toBe('change');
    expect(u.devpath).toBe('/devices/LNXSYSTM:00/LNXSYBUS:00/VMGENCTR:00');
    expect(u.vars.get('SUBSYSTEM')).toBe('acpi');
    expect(isNewVmgenid(u)).toBe(true);
  });

  it('ignores other uevents, udev rebroadcasts and garbage', () => {
    expect(isNewVmgenid(parseUevent(kernel(['add@/devices/virtual/net/lo', 'ACTION=add', 'SUBSYSTEM=net']))!)).toBe(false);
    expect(isNewVmgenid(parseUevent(kernel(['add@/devices/x', 'NEW_VMGENID=1']))!)).toBe(false); // not a change
    expect(parseUevent(Buffer.from('libudev\0\xfe\xed\xca\xfe', 'latin1'))).toBeNull();
    expect(parseUevent(Buffer.from([0xff, 0, 1, 2]))).toBeNull();
    expect(parseUevent(Buffer.alloc(0))).toBeNull();
  });
});

describe('UeventWatcher', () => {
  function fake(datagrams: Array<Buffer | null>, open = true) {
    const emitted: EventBody[] = [];
    const logs: string[] = [];
    let closed = 0;
    const addon = {
      ueventOpen: () => {
        if (!open) throw Object.assign(new Error('uevent socket: socket: Permission denied'), { code: 'EPERM' });
        return 7;
      },
      ueventRead: (fd: number) => {
        expect(fd).toBe(7);
        return datagrams.length ? datagrams.shift()! : null;
      },
      closeFd: () => void closed++,
    };
    const w = new UeventWatcher(
      addon,
      (b) => emitted.push(b),
      (_l, m) => logs.push(m),
    );
    return { w, emitted, logs, closed: () => closed, left: () => datagrams.length };
  }

  it('reports each NEW_VMGENID as a vm.genid event, and counts what the kernel dropped', () => {
    const f = fake([kernel(['add@/devices/x', 'ACTION=add']), Buffer.alloc(0), kernel(NEW_VMGENID_UEVENT), null]);
    f.w.poll();
    expect(f.emitted).toEqual([{ kind: 'vm.genid', devpath: '/devices/LNXSYSTM:00/LNXSYBUS:00/VMGENCTR:00' }]);
    expect(f.w.counters).toEqual({ read: 2, overflows: 1, vmgenid: 1 });
    f.w.close();
    f.w.close();
    expect(f.closed()).toBe(1);
  });

  it('reads a bounded number per poll: a storm waits for the next', () => {
    const f = fake(Array.from({ length: UEVENT_MAX_PER_POLL + 10 }, () => kernel(['add@/devices/x'])));
    f.w.poll();
    expect(f.left()).toBe(10);
  });

  it('without the socket it says why once and does nothing', () => {
    const f = fake([], false);
    expect(f.w.open).toBe(false);
    f.w.poll();
    expect(f.logs).toEqual([expect.stringMatching(/kernel uevents unavailable.*Permission denied/)]);
  });
});

/** Why a namespace of our own cannot be made here, or null. */
function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'not root';
  const r = spawnSync('unshare', ['--net', 'python3', '-c', 'import socket'], { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 ? null : `unshare --net python3: ${r.error?.message ?? r.stderr.trim()}`;
}
const skip = netnsUnavailable();

describe.skipIf(skip !== null)('the addon socket in a network namespace of its own', () => {
  it('receives a uevent broadcast in the kernel group', () => {
    const r = spawnSync('unshare', ['--net', process.execPath, FIXTURE, ADDON, JSON.stringify(ueventSender())], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { sent: number; stderr: string; got: string[] };
    expect(out.sent, out.stderr).toBe(0);
    expect(out.got).toHaveLength(1);
    expect(isNewVmgenid(parseUevent(Buffer.from(out.got[0]!, 'latin1'))!)).toBe(true);
  });
});
