/* checksum(bytes): a 64-bit hash taken a word at a time, over a Buffer or TypedArray, as 16
 * lower-case hex digits. readSealed(path, magic): the payload of a file written as
 *   magic | checksum(payload) | payload
 * as a Buffer, or why not ('missing', 'corrupt').
 *
 * For the launcher's code cache (guest-probe/src/launcher.ts): release builds of V8 do not
 * checksum a code cache they are given, and a damaged one can crash the process while it is
 * deserialised. The launcher checks the bytes first. In C because the check runs before the
 * probe's first frame on every boot, where a JavaScript loop, still interpreted that early,
 * takes milliseconds (and node:zlib's crc32 costs more to load).
 *
 * A word at a time because byte-wise FNV-1a (this file's hash before), one dependent multiply
 * per byte, took 0.2-0.3 ms for the 200 KB cache: a tenth of what the probe's start-up may add
 * to Node's. Each round, h = rotl(h + w * P2, 31) * P1 (xxHash64's, odd primes), is a bijection
 * of h for a given word and of the word for a given h, so any one changed word changes the
 * result; the rotation carries the product's high bits, which a multiply never moves down,
 * into the next round's. (A plain (h ^ w) * P, tried first, let a flip of a word's top bit be
 * undone by a flip in the next word.) The tail (under 8 bytes) goes a byte a round, then the
 * length (so trailing zeros count) and xxHash64's finaliser. Not a defence against a
 * deliberate forgery: whoever can write the cache can write the bundle.
 *
 * readSealed reads and checks in one call, for the same reason: Node's first fs.readFileSync of
 * a Buffer in a process costs 0.3-0.4 ms of its own set-up, more than reading the 200 KB does. */
#include "checksum.h"
#include "read-all.h"

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* xxHash64's primes; the round and the finaliser below have its shape. */
#define PRIME1 0x9e3779b185ebca87ULL
#define PRIME2 0xc2b2ae3d27d4eb4fULL
#define PRIME3 0x165667b19e3779f9ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t round64(uint64_t h, uint64_t w) { return rotl64(h + w * PRIME2, 31) * PRIME1; }

static uint64_t hash_words(const uint8_t *data, size_t len) {
  uint64_t h = PRIME1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, data + i, 8); /* unaligned views are allowed; the compiler makes this one load */
    h = round64(h, w);
  }
  for (; i < len; i++) h = round64(h, data[i]);
  h ^= (uint64_t)len;
  h ^= h >> 33;
  h *= PRIME2;
  h ^= h >> 29;
  h *= PRIME3;
  h ^= h >> 32;
  return h;
}

#define HEX_DIGITS 16
#define MAX_MAGIC 16
/* Far above any code cache (~200 KB): a bigger file is not one of ours. */
#define MAX_SEALED_BYTES (64u << 20)

/* The hash of the bytes as HEX_DIGITS lower-case hex digits and a NUL. */
static void hash_hex(const uint8_t *data, size_t len, char hex[HEX_DIGITS + 1]) {
  snprintf(hex, HEX_DIGITS + 1, "%016llx", (unsigned long long)hash_words(data, len));
}

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

  char hex[HEX_DIGITS + 1];
  hash_hex(data, len, hex);
  napi_value out;
  if (napi_create_string_latin1(env, hex, HEX_DIGITS, &out) != napi_ok) return NULL;
  return out;
}

static napi_value state(napi_env env, const char *name) {
  napi_value out;
  if (napi_create_string_latin1(env, name, NAPI_AUTO_LENGTH, &out) != napi_ok) return NULL;
  return out;
}

static napi_value read_sealed(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  char path[PATH_MAX], magic[MAX_MAGIC + 1];
  size_t path_len, magic_len;
  if (argc < 2 || napi_get_value_string_utf8(env, argv[0], path, sizeof path, &path_len) != napi_ok ||
      napi_get_value_string_latin1(env, argv[1], magic, sizeof magic, &magic_len) != napi_ok)
    return throw_type(env, "readSealed(path, magic): path and magic must be strings");
  if (path_len >= sizeof path - 1 || magic_len == 0 || magic_len >= sizeof magic - 1)
    return throw_type(env, "readSealed(path, magic): path too long, or magic not 1-15 characters");

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return state(env, "missing");
  const char *why = "corrupt";
  napi_value out = NULL;
  struct stat st;
  char header[MAX_MAGIC + HEX_DIGITS];
  size_t header_len = magic_len + HEX_DIGITS;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "missing";
  } else if ((size_t)st.st_size >= header_len && (size_t)st.st_size <= MAX_SEALED_BYTES &&
             read_all(fd, (uint8_t *)header, header_len) && memcmp(header, magic, magic_len) == 0) {
    size_t len = (size_t)st.st_size - header_len;
    void *data;
    napi_value buf;
    if (napi_create_buffer(env, len, &data, &buf) != napi_ok) {
      close(fd);
      return NULL;
    }
    /* One byte more than the size said: a file that grew meanwhile is not the one checked. */
    uint8_t extra;
    if (read_all(fd, data, len) && read(fd, &extra, 1) == 0) {
      char hex[HEX_DIGITS + 1];
      hash_hex(data, len, hex);
      if (memcmp(header + magic_len, hex, HEX_DIGITS) == 0) out = buf;
    }
  }
  close(fd);
  return out ? out : state(env, why);
}

napi_status checksum_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"checksum", NULL, checksum, NULL, NULL, NULL, napi_enumerable, NULL},
      {"readSealed", NULL, read_sealed, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
