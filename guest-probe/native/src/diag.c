#include "diag.h"

napi_status diag_register(napi_env env, napi_value exports) {
  (void)env;
  (void)exports;
  return napi_ok;
}
