#ifndef VSOCKDIAG_CHECKSUM_H
#define VSOCKDIAG_CHECKSUM_H

#include <node_api.h>

/* Defines checksum(bytes): FNV-1a 64 of a Buffer/TypedArray as 16 hex digits (see checksum.c). */
napi_status checksum_register(napi_env env, napi_value exports);

#endif
