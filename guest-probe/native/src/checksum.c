/* checksum(bytes): FNV-1a 64 over a Buffer or TypedArray, as 16 lower-case hex digits.
 *
 * For the launcher's code cache (guest-probe/src/launcher.ts): release builds of V8 do not
 * checksum a code cache they are given, and a damaged one can crash the process while it is
 * deserialised. The launcher checks the bytes first. In C because the check runs before the
 * probe's first frame on every boot: ~0.1 ms for the cache here, where a JavaScript loop,
 * still interpreted that early, takes milliseconds (and node:zlib's crc32 costs more to load).
 * Not a defence against a deliberate forgery: whoever can write the cache can write the bundle. */
#include "checksum.h"

#include <stdint.h>
#include <stdio.h>

static napi_value throw_type(napi_env env, const char *msg) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
  return NULL;
}

static napi_value checksum(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1) return throw_type(env, "checksum(bytes): bytes must be a Buffer or TypedArray");

  const uint8_t *data = NULL;
  size_t len = 0;
  bool is_buffer = false, is_typed = false;
  napi_is_buffer(env, argv[0], &is_buffer);
  if (is_buffer) {
    void *p;
    if (napi_get_buffer_info(env, argv[0], &p, &len) != napi_ok) return NULL;
    data = p;
  } else if (napi_is_typedarray(env, argv[0], &is_typed) == napi_ok && is_typed) {
    napi_typedarray_type type;
    size_t count, offset;
    void *p;
    napi_value ab;
    if (napi_get_typedarray_info(env, argv[0], &type, &count, &p, &ab, &offset) != napi_ok) return NULL;
    size_t width = type == napi_int8_array || type == napi_uint8_array || type == napi_uint8_clamped_array ? 1
                   : type == napi_int16_array || type == napi_uint16_array                                 ? 2
                   : type == napi_float64_array || type == napi_bigint64_array || type == napi_biguint64_array ? 8
                                                                                                             : 4;
    data = p;
    len = count * width;
  } else {
    return throw_type(env, "checksum(bytes): bytes must be a Buffer or TypedArray");
  }

  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= data[i];
    h *= 0x100000001b3ULL;
  }
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  napi_value out;
  if (napi_create_string_latin1(env, hex, 16, &out) != napi_ok) return NULL;
  return out;
}

napi_status checksum_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"checksum", NULL, checksum, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
