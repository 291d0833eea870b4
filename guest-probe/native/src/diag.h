#ifndef VSOCKDIAG_DIAG_H
#define VSOCKDIAG_DIAG_H

#include <node_api.h>

/* Defines this area's functions on the addon's exports. */
napi_status diag_register(napi_env env, napi_value exports);

#endif
