// Sends a uevent in the kernel's format to the uevent group (NETLINK_KOBJECT_UEVENT, group 1)
// of one network namespace, as the guest kernel's vmgenid driver does on a restore. Python's
// socket module opens the netlink socket (Node cannot); as root only, and only ever inside a
// namespace a test made (a simulated sandbox's, or a fresh `unshare --net`): never the host's.

import { spawnSync } from 'node:child_process';

/** The vmgenid driver's uevent (drivers/virt/vmgenid.c: kobject_uevent_env(KOBJ_CHANGE, "NEW_VMGENID=1")). */
export const NEW_VMGENID_UEVENT = [
  'change@/devices/LNXSYSTM:00/LNXSYBUS:00/VMGENCTR:00',
  'ACTION=change',
  'DEVPATH=/devices/LNXSYSTM:00/LNXSYBUS:00/VMGENCTR:00',
  'SUBSYSTEM=acpi',
  'NEW_VMGENID=1',
  'SEQNUM=4242',
];

const SENDER = `
import socket, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)  # NETLINK_KOBJECT_UEVENT
s.bind((0, 0))
s.sendto(sys.argv[1].encode('latin1').replace(b'|', b'\\0') + b'\\0', (0, 1))  # group 1: the kernel's
`;

/** The command that sends `fields` (joined with NULs) into the caller's network namespace. */
export function ueventSender(fields: readonly string[] = NEW_VMGENID_UEVENT): string[] {
  return ['python3', '-c', SENDER, fields.join('|')];
}

/** Sends `fields` into the network namespace of process `pid`. Throws if it cannot. */
export function sendUevent(pid: number, fields: readonly string[] = NEW_VMGENID_UEVENT): void {
  const r = spawnSync('nsenter', [`--net=/proc/${pid}/ns/net`, ...ueventSender(fields)], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`sending a uevent into pid ${pid}'s network namespace failed: ${r.stderr || r.error}`);
}
