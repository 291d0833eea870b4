#ifndef VSOCKDIAG_MEMREAD_H
#define VSOCKDIAG_MEMREAD_H

#include <node_api.h>

/* Defines memRead(pid, dst, segs, count, got): many ranges of another process's memory in
 * few process_vm_readv calls (see memread.c). */
napi_status memread_register(napi_env env, napi_value exports);

#endif
