/* mapSource(path, trailer): the text of an ASCII file that ends with `trailer`, less the
 * trailer, as a JavaScript string whose characters are the file's own pages (an external
 * string over a read-only mapping); null when the file is missing, is not a regular file,
 * does not end with the trailer, or holds a byte over 0x7f.
 *
 * For the launcher (guest-probe/src/launcher.ts): V8 keeps a script's source for as long as
 * the script lives, which for the probe's bundle is the process's life: 156 KiB of anonymous
 * memory in V8's heap, a fiftieth of the probe's. Mapped instead, the pages are the page
 * cache's (RssFile, shared, dropped under pressure and read again), and V8 reads only the
 * parts it parses, which with the code cache is the functions the cache does not hold.
 *
 * The file must not change in place while a probe runs (a truncation would end that probe
 * with SIGBUS, other bytes would be parsed as the old text's functions): installs replace
 * it by rename, as they do the addon, which the dynamic loader maps the same way.
 * ASCII only: V8 reads an external one-byte string as Latin-1, which agrees with UTF-8 on
 * ASCII alone (esbuild writes its bundles in ASCII, escaping everything else). */
#define NAPI_EXPERIMENTAL /* node_api_create_external_string_latin1: Node 20.4 and later */
#include "source.h"

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far above any bundle; bounds what a mistaken path can map. */
#define MAX_SOURCE_BYTES (64u << 20)
#define MAX_TRAILER 256

static void unmap(node_api_basic_env env, void *data, void *hint) {
  (void)env;
  munmap(data, (size_t)(uintptr_t)hint);
}

static int is_ascii(const uint8_t *p, size_t len) {
  uint8_t any = 0;
  for (size_t i = 0; i < len; i++) any |= p[i];
  return (any & 0x80) == 0;
}

static napi_value map_source(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], out = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  char path[PATH_MAX], trailer[MAX_TRAILER + 1];
  size_t path_len, trailer_len;
  if (argc < 2 || napi_get_value_string_utf8(env, argv[0], path, sizeof path, &path_len) != napi_ok ||
      napi_get_value_string_latin1(env, argv[1], trailer, sizeof trailer, &trailer_len) != napi_ok) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "mapSource(path, trailer): path and trailer must be strings");
    return NULL;
  }
  if (path_len >= sizeof path - 1 || trailer_len >= sizeof trailer - 1) {
    napi_throw_range_error(env, "ERR_INVALID_ARG_VALUE", "mapSource(path, trailer): path or trailer too long");
    return NULL;
  }

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return napi_get_null(env, &out) == napi_ok ? out : NULL;
  struct stat st;
  void *map = MAP_FAILED;
  size_t size = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > trailer_len &&
      (size_t)st.st_size <= MAX_SOURCE_BYTES) {
    size = (size_t)st.st_size;
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  close(fd); /* the mapping keeps the file */
  if (map == MAP_FAILED) return napi_get_null(env, &out) == napi_ok ? out : NULL;

  const uint8_t *bytes = map;
  size_t text_len = size - trailer_len;
  bool copied = false;
  if (memcmp(bytes + text_len, trailer, trailer_len) != 0 || !is_ascii(bytes, text_len) ||
      node_api_create_external_string_latin1(env, (char *)map, text_len, unmap, (void *)(uintptr_t)size, &out,
                                             &copied) != napi_ok) {
    munmap(map, size);
    return napi_get_null(env, &out) == napi_ok ? out : NULL;
  }
  /* copied: V8 took a copy instead (and the finaliser has already unmapped the file). */
  return out;
}

napi_status source_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"mapSource", NULL, map_source, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
