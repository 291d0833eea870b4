#ifndef VSOCKDIAG_CHECKSUM_H
#define VSOCKDIAG_CHECKSUM_H

#include <node_api.h>

/* Defines checksum(bytes), a 64-bit hash of a Buffer/TypedArray as 16 hex digits, and
 * readSealed(path, magic), a file's payload after its magic and checksum (see checksum.c). */
napi_status checksum_register(napi_env env, napi_value exports);

#endif
