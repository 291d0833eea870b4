#ifndef VSOCKDIAG_DIAG_H
#define VSOCKDIAG_DIAG_H

#include <node_api.h>

/* Defines this area's functions on the addon's exports: diagListeners(port?),
 * diagListener(address, port), diagCensus(opts?) and diagAvailable() (TCP socket queries over
 * NETLINK_SOCK_DIAG; see diag.c). */
napi_status diag_register(napi_env env, napi_value exports);

#endif
