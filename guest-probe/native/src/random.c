/* randomHex(n): n bytes (1-64) read from /dev/urandom, as 2n lower-case hex digits; null when
 * they cannot be read (no /dev/urandom in this root).
 *
 * For the probe's instance id, made before its first frame on every boot: in JavaScript the
 * open, read and close are each a first call into node:fs there, 0.28 ms together, and
 * node:crypto costs more to load. /dev/urandom rather than getrandom(2), which blocks until the
 * kernel's pool is initialised: the probe starts early in a VM's boot and must not wait. */
#include "random.h"
#include "read-all.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#define MAX_RANDOM_BYTES 64

static napi_value random_hex(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], out = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  double want = 0;
  if (argc < 1 || napi_get_value_double(env, argv[0], &want) != napi_ok || !(want >= 1 && want <= MAX_RANDOM_BYTES) ||
      want != (double)(size_t)want) {
    napi_throw_range_error(env, "ERR_INVALID_ARG_VALUE", "randomHex(n): n must be an integer from 1 to 64");
    return NULL;
  }
  size_t n = (size_t)want;
  uint8_t bytes[MAX_RANDOM_BYTES];
  bool got = false;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    got = read_all(fd, bytes, n);
    close(fd);
  }
  if (!got) return napi_get_null(env, &out) == napi_ok ? out : NULL;
  static const char digits[] = "0123456789abcdef";
  char hex[2 * MAX_RANDOM_BYTES];
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = digits[bytes[i] >> 4];
    hex[2 * i + 1] = digits[bytes[i] & 15];
  }
  if (napi_create_string_latin1(env, hex, 2 * n, &out) != napi_ok) return NULL;
  return out;
}

napi_status random_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"randomHex", NULL, random_hex, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
