/* vsockdiag N-API addon: module init and exports. Each area registers its own functions. */
#include <node_api.h>

#include "checksum.h"
#include "diag.h"
#include "memread.h"
#include "notify.h"
#include "random.h"
#include "source.h"
#include "uevent.h"
#include "vsock.h"

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"notifyBind", NULL, notify_bind, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  if (napi_define_properties(env, exports, sizeof props / sizeof props[0], props) != napi_ok)
    return NULL;
  if (vsock_register(env, exports) != napi_ok) return NULL;
  if (diag_register(env, exports) != napi_ok) return NULL;
  if (checksum_register(env, exports) != napi_ok) return NULL;
  if (memread_register(env, exports) != napi_ok) return NULL;
  if (uevent_register(env, exports) != napi_ok) return NULL;
  if (random_register(env, exports) != napi_ok) return NULL;
  if (source_register(env, exports) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
