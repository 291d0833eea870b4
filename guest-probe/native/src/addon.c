/* vsockdiag N-API addon: module init and exports. Each area registers its own functions. */
#include <malloc.h>
#include <node_api.h>

#include "checksum.h"
#include "diag.h"
#include "memread.h"
#include "notify.h"
#include "uevent.h"
#include "vsock.h"

static napi_value init(napi_env env, napi_value exports) {
#if defined(M_ARENA_MAX)
  /* glibc gives each thread that mallocs an arena of its own, up to 8 per core, and keeps
   * what each grew to: in a probe, about a megabyte of RssAnon for its helper threads' little
   * work. From here on, one arena for the process (the probe's threads hardly contend for
   * it). The launcher loads this addon before the bundle runs, ahead of most threads' first
   * malloc; one that came sooner keeps its arena (MALLOC_ARENA_MAX=1 in the environment
   * would cover those too). musl's malloc has no per-thread arenas. */
  mallopt(M_ARENA_MAX, 1);
#endif
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
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
