#ifndef VSOCKDIAG_VSOCK_H
#define VSOCKDIAG_VSOCK_H

#include <node_api.h>

/* Defines this area's functions on the addon's exports:
 * vsockListen, vsockConnect, unixListen, unixConnect, tcpConnect, localCid,
 * socketPair, closeFd (see vsock.c). */
napi_status vsock_register(napi_env env, napi_value exports);

#endif
