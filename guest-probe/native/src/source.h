#ifndef VSOCKDIAG_SOURCE_H
#define VSOCKDIAG_SOURCE_H

#include <node_api.h>

/* Defines mapSource(path, trailer): an ASCII file, less its trailer, as a string whose
 * characters stay in the file's own pages (see source.c). */
napi_status source_register(napi_env env, napi_value exports);

#endif
