/* Kernel uevents (NETLINK_KOBJECT_UEVENT), listen-only, for the vsockdiag addon. */
#ifndef VSOCKDIAG_UEVENT_H
#define VSOCKDIAG_UEVENT_H

#include <node_api.h>

/* Largest uevent read whole: the kernel builds them in UEVENT_BUFFER_SIZE (2048) bytes. Longer
 * datagrams (never from the kernel) are cut. */
#define UEVENT_MAX_DATAGRAM 8192

/* JS: ueventOpen() -> fd; ueventRead(fd) -> Buffer | null; see uevent.c. */
napi_status uevent_register(napi_env env, napi_value exports);

#endif
