#ifndef VSOCKDIAG_RANDOM_H
#define VSOCKDIAG_RANDOM_H

#include <node_api.h>

/* Defines randomHex(n): n bytes of /dev/urandom as hex (see random.c). */
napi_status random_register(napi_env env, napi_value exports);

#endif
