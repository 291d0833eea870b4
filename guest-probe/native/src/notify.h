/* sd_notify datagram socket (AF_UNIX, SOCK_DGRAM) for the vsockdiag addon. */
#ifndef VSOCKDIAG_NOTIFY_H
#define VSOCKDIAG_NOTIFY_H

#include <node_api.h>

/* Largest datagram delivered whole; longer ones arrive cut, flagged truncated. Equal to
 * MAX_NOTIFY_DATAGRAM in proto/src/limits.ts (guest-probe/test/notify-limit.test.ts checks). */
#define NOTIFY_MAX_DATAGRAM 4096

/* JS: notifyBind(path: string,
 *                onDatagram: (buf: Buffer, pid: number, truncated: boolean) => void)
 *     -> { fd: number, close(): void, pause(): void, resume(): void } */
napi_value notify_bind(napi_env env, napi_callback_info info);

#endif
