#include "vsock.h"

napi_status vsock_register(napi_env env, napi_value exports) {
  (void)env;
  (void)exports;
  return napi_ok;
}
