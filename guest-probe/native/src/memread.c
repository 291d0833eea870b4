/* memRead(pid, dst, segs, count, got): reads `count` ranges of process `pid`'s memory into
 * `dst`, one after another with no gaps, in as few process_vm_readv calls as IOV_MAX allows.
 *
 *   segs  Float64Array: [address, length] pairs (addresses below 2^53: user space on amd64
 *         and arm64 stays below 2^48)
 *   got   Int32Array: per range, the bytes read; less than its length where the range does
 *         not read (not mapped): the rest of that range in dst is left as it was
 *
 * Why: the Go reader (src/dumps/go/) reads each goroutine's g and the top of its stack: two
 * small reads per goroutine, 20,000 for a 10,000-goroutine target. Through /proc/<pid>/mem
 * each is a pread with Node's fs overhead around it; here a batch of a thousand is one
 * syscall, and a stopped target (pause mode) is resumed sooner.
 *
 * Neighbouring ranges are read as one (MAX_GAP). The kernel reads the remote ranges in order
 * and stops at the first that faults, returning what it copied so far (or EFAULT when that was
 * nothing); the ranges of the group it stopped in are then read one by one, and the next call
 * starts after that group. Errors other than EFAULT throw an Error whose code is the errno name:
 * ESRCH (the process is gone), EPERM (no ptrace-attach right over it), ENOMEM, EINVAL. */
#include "memread.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "errno-name.h"

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

static napi_value fail_type(napi_env env, const char* msg) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
  return NULL;
}

static napi_value fail_range(napi_env env, const char* msg) {
  napi_throw_range_error(env, "ERR_INVALID_ARG_VALUE", msg);
  return NULL;
}

static napi_value fail_errno(napi_env env, int err, int pid) {
  char msg[128];
  snprintf(msg, sizeof msg, "process_vm_readv of process %d: %s", pid, strerror(err));
  napi_value code, message, error, num;
  if (napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code) == napi_ok &&
      napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message) == napi_ok &&
      napi_create_error(env, code, message, &error) == napi_ok) {
    if (napi_create_int32(env, -err, &num) == napi_ok) napi_set_named_property(env, error, "errno", num);
    napi_throw(env, error);
  } else {
    napi_throw_error(env, errno_name(err), msg);
  }
  return NULL;
}

/* A typed array of the given type, at least `min` elements long. */
static bool typed(napi_env env, napi_value v, napi_typedarray_type want, size_t min, void** data) {
  bool is = false;
  if (napi_is_typedarray(env, v, &is) != napi_ok || !is) return false;
  napi_typedarray_type type;
  size_t length, offset;
  napi_value ab;
  if (napi_get_typedarray_info(env, v, &type, &length, data, &ab, &offset) != napi_ok) return false;
  return type == want && length >= min;
}

/* Ranges closer than this are read as one remote iovec, the gap into a scratch buffer: the
 * kernel's cost is per remote iovec (each pins its pages), and the g's of a batch often sit
 * side by side in one span. A gap under a page cannot hold a page of its own, so merging
 * never reads a page that neither neighbour touches. */
#define MAX_GAP 2048

static __thread uint8_t gap_scratch[MAX_GAP];
static __thread int read_errno;

/* One range alone: the bytes it gives (0 when unmapped), or -1 with read_errno set. */
static ssize_t read_one(int pid, uint8_t* at, double addr, double len) {
  struct iovec local = {at, (size_t)len};
  struct iovec remote = {(void*)(uintptr_t)(uint64_t)addr, (size_t)len};
  for (;;) {
    ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    if (errno == EFAULT) return 0;
    read_errno = errno;
    return -1;
  }
}

/* Reads ranges [0, count) packed into dst; sets read_errno on an error other than EFAULT. */
static void read_ranges(int pid, uint8_t* dst, const double* segs, uint32_t count, int32_t* got) {
  struct iovec remote[IOV_MAX];
  struct iovec local[IOV_MAX];
  /* Per remote iovec: its first range and how many it holds. */
  uint32_t first[IOV_MAX], members[IOV_MAX];
  read_errno = 0;
  uint32_t i = 0;
  uint8_t* at = dst;
  while (i < count) {
    /* Build one call: groups of neighbouring ranges, each one remote iovec. */
    int nr = 0, nl = 0;
    uint32_t j = i;
    uint8_t* call_at = at;
    while (j < count && nr < IOV_MAX && nl < IOV_MAX) {
      uint64_t start = (uint64_t)segs[2 * j];
      uint64_t end = start + (uint64_t)segs[2 * j + 1];
      first[nr] = j;
      members[nr] = 1;
      local[nl].iov_base = at;
      local[nl].iov_len = (size_t)segs[2 * j + 1];
      nl++;
      at += (size_t)segs[2 * j + 1];
      j++;
      while (j < count && nl + 2 <= IOV_MAX) {
        uint64_t s2 = (uint64_t)segs[2 * j];
        if (s2 < end || s2 - end > MAX_GAP) break;
        if (s2 > end) {
          local[nl].iov_base = gap_scratch;
          local[nl].iov_len = (size_t)(s2 - end);
          nl++;
        }
        local[nl].iov_base = at;
        local[nl].iov_len = (size_t)segs[2 * j + 1];
        nl++;
        at += (size_t)segs[2 * j + 1];
        end = s2 + (uint64_t)segs[2 * j + 1];
        members[nr]++;
        j++;
      }
      remote[nr].iov_base = (void*)(uintptr_t)start;
      remote[nr].iov_len = (size_t)(end - start);
      nr++;
    }
    ssize_t r = process_vm_readv(pid, local, (unsigned long)nl, remote, (unsigned long)nr, 0);
    if (r < 0) {
      if (errno == EINTR) {
        at = call_at;
        continue;
      }
      if (errno != EFAULT) {
        read_errno = errno;
        return;
      }
      r = 0; /* the first remote iovec faulted at once */
    }
    /* Groups wholly read are done; the first one short of its length (where the kernel
     * stopped) has its ranges read one by one, and the next call starts after it. */
    size_t left = (size_t)r;
    uint8_t* p = call_at;
    int g = 0;
    for (; g < nr; g++) {
      if (left >= remote[g].iov_len) {
        left -= remote[g].iov_len;
        for (uint32_t k = first[g]; k < first[g] + members[g]; k++) {
          got[k] = (int32_t)segs[2 * k + 1];
          p += (size_t)segs[2 * k + 1];
        }
        continue;
      }
      for (uint32_t k = first[g]; k < first[g] + members[g]; k++) {
        ssize_t one = read_one(pid, p, segs[2 * k], segs[2 * k + 1]);
        if (one < 0) return;
        got[k] = (int32_t)one;
        p += (size_t)segs[2 * k + 1];
      }
      g++;
      break;
    }
    i = g < nr ? first[g] : j;
    at = p;
  }
}

static napi_value mem_read(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  const char* usage = "memRead(pid, dst: Buffer, segs: Float64Array, count, got: Int32Array)";
  if (argc < 5) return fail_type(env, usage);

  int32_t pid = 0;
  uint32_t count = 0;
  if (napi_get_value_int32(env, argv[0], &pid) != napi_ok || napi_get_value_uint32(env, argv[3], &count) != napi_ok)
    return fail_type(env, usage);
  if (pid <= 0) return fail_range(env, "memRead: pid must be positive");

  bool is_buffer = false;
  void* dst_data = NULL;
  size_t dst_len = 0;
  if (napi_is_buffer(env, argv[1], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, argv[1], &dst_data, &dst_len) != napi_ok)
    return fail_type(env, usage);
  double* segs = NULL;
  int32_t* got = NULL;
  if (!typed(env, argv[2], napi_float64_array, (size_t)count * 2, (void**)&segs) ||
      !typed(env, argv[4], napi_int32_array, count, (void**)&got))
    return fail_type(env, "memRead: segs must be a Float64Array of 2 × count, got an Int32Array of count");

  size_t total = 0;
  for (uint32_t i = 0; i < count; i++) {
    double a = segs[2 * i], l = segs[2 * i + 1];
    if (!(a >= 0 && a < 9007199254740992.0 && a == (double)(uint64_t)a) || !(l >= 0 && l <= INT32_MAX && l == (double)(uint32_t)l))
      return fail_range(env, "memRead: each range is an integer address below 2^53 and a length below 2^31");
    total += (size_t)l;
    if (total > dst_len) return fail_range(env, "memRead: the ranges do not fit in dst");
  }

  read_ranges(pid, dst_data, segs, count, got);
  if (read_errno != 0) return fail_errno(env, read_errno, pid);
  return NULL;
}

/* Marks in `window` (snapshot.ts NO_G, DEAD, NO_STACK): the g did not read, is dead, or runs. */
#define W_NO_G (-3.0)
#define W_DEAD (-2.0)
#define W_NO_STACK (-1.0)
#define G_RUNNING 2u
#define G_DEAD 6u
#define G_SCAN 0x1000u

static uint64_t le64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static uint32_t le32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* memSnapshot(pid, allgs, count, gSize, fields, addrs, hdr, window, got, maxStackBytes, into?):
 * every g of a stopped Go process and the top of its stack, in two rounds of batched
 * process_vm_readv, with no JavaScript in between: pause mode's whole stop (go/index.ts) is
 * this call, so its length does not depend on how warm the reader's JavaScript is.
 *
 *   allgs   Buffer: the runtime's allgs array, count g pointers (little-endian u64)
 *   fields  Int32Array: the g's atomicstatus, stack.lo, stack.hi, sched.sp, syscallsp offsets
 *   addrs   Float64Array(count) out: the g addresses
 *   hdr     Buffer(count * gSize) out: the g's, one after another
 *   window  Float64Array(count) out: per g, where its window starts in the returned buffer,
 *           or W_NO_G / W_DEAD / W_NO_STACK; a g whose start sp lies outside its stack gets an
 *           empty window (its walk reads, and fails, on its own)
 *   got     Int32Array(count) out: per g with a window, the bytes of it that read
 *   into    Buffer, optional: where the windows go when they fit (returned, not a new one)
 *
 * The window of a g is its stack from where its walk starts (syscallsp while in a syscall,
 * else sched.sp) up to stack.hi, as snapshot.ts reads it for a running target. Returns the
 * windows, one after another, in `into` when they fit there, else in a new Buffer; null, having
 * read only the g's, when they would take more than maxStackBytes. Errors as memRead.
 *
 * Why `into`: the copy writes into the destination's pages, and a fresh allocation of
 * megabytes is fresh mmap'd pages, each faulted in by the kernel during the copy, while the
 * target is stopped. On the bench host a stop with fresh buffers took twice as long (~32 ms
 * against ~14). The caller passes buffers it has already written to, before the SIGSTOP. */
static napi_value mem_snapshot(napi_env env, napi_callback_info info) {
  size_t argc = 11;
  napi_value argv[11];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  const char* usage =
      "memSnapshot(pid, allgs: Buffer, count, gSize, fields: Int32Array(5), addrs: Float64Array, hdr: Buffer, window: Float64Array, "
      "got: Int32Array, maxStackBytes, into?: Buffer)";
  if (argc < 10) return fail_type(env, usage);
  int32_t pid = 0;
  uint32_t count = 0, gsize = 0;
  double max_stack = 0;
  if (napi_get_value_int32(env, argv[0], &pid) != napi_ok || napi_get_value_uint32(env, argv[2], &count) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &gsize) != napi_ok || napi_get_value_double(env, argv[9], &max_stack) != napi_ok)
    return fail_type(env, usage);
  if (pid <= 0) return fail_range(env, "memSnapshot: pid must be positive");
  if (gsize < 16 || gsize > 4096) return fail_range(env, "memSnapshot: gSize must be 16 to 4096 bytes");
  bool is_buffer = false;
  void *allgs = NULL, *hdr = NULL;
  size_t allgs_len = 0, hdr_len = 0;
  if (napi_is_buffer(env, argv[1], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, argv[1], &allgs, &allgs_len) != napi_ok || napi_is_buffer(env, argv[6], &is_buffer) != napi_ok ||
      !is_buffer || napi_get_buffer_info(env, argv[6], &hdr, &hdr_len) != napi_ok)
    return fail_type(env, usage);
  int32_t* fields = NULL;
  double *addrs = NULL, *window = NULL;
  int32_t* got = NULL;
  if (!typed(env, argv[4], napi_int32_array, 5, (void**)&fields) || !typed(env, argv[5], napi_float64_array, count, (void**)&addrs) ||
      !typed(env, argv[7], napi_float64_array, count, (void**)&window) || !typed(env, argv[8], napi_int32_array, count, (void**)&got))
    return fail_type(env, usage);
  if (allgs_len < (size_t)count * 8 || hdr_len < (size_t)count * gsize) return fail_range(env, "memSnapshot: allgs or hdr is too short");
  void* into = NULL;
  size_t into_len = 0;
  napi_valuetype into_type = napi_undefined;
  if (argc >= 11 && napi_typeof(env, argv[10], &into_type) != napi_ok) return NULL;
  if (into_type != napi_undefined && into_type != napi_null &&
      (napi_is_buffer(env, argv[10], &is_buffer) != napi_ok || !is_buffer ||
       napi_get_buffer_info(env, argv[10], &into, &into_len) != napi_ok))
    return fail_type(env, usage);
  for (int i = 0; i < 5; i++)
    if (fields[i] < 0 || (uint32_t)fields[i] + 8 > gsize) return fail_range(env, "memSnapshot: a field lies outside the g");

  /* Round 1: the g's. segs is reused for the windows (at most one per g). */
  double* segs = malloc(sizeof(double) * 2 * (count ? count : 1));
  int32_t* hdr_got = malloc(sizeof(int32_t) * (count ? count : 1));
  if (!segs || !hdr_got) {
    free(segs);
    free(hdr_got);
    napi_throw_error(env, "ENOMEM", "memSnapshot: out of memory");
    return NULL;
  }
  for (uint32_t k = 0; k < count; k++) {
    uint64_t a = le64((const uint8_t*)allgs + 8 * (size_t)k);
    /* Above 2^53 no user-space address: read as unmapped (0 gives EFAULT). */
    addrs[k] = a < (1ull << 53) ? (double)a : 0;
    segs[2 * k] = addrs[k];
    segs[2 * k + 1] = gsize;
  }
  read_ranges(pid, hdr, segs, count, hdr_got);
  if (read_errno != 0) {
    free(segs);
    free(hdr_got);
    return fail_errno(env, read_errno, pid);
  }

  /* The windows. */
  uint32_t m = 0;
  double total = 0;
  for (uint32_t k = 0; k < count; k++) {
    const uint8_t* g = (const uint8_t*)hdr + (size_t)k * gsize;
    if (hdr_got[k] < (int32_t)gsize) {
      window[k] = W_NO_G;
      continue;
    }
    uint32_t status = le32(g + fields[0]) & ~G_SCAN;
    if (status == G_DEAD) {
      window[k] = W_DEAD;
      continue;
    }
    if (status == G_RUNNING) {
      window[k] = W_NO_STACK;
      continue;
    }
    uint64_t lo = le64(g + fields[1]), hi = le64(g + fields[2]);
    uint64_t syscallsp = le64(g + fields[4]);
    uint64_t sp = syscallsp != 0 ? syscallsp : le64(g + fields[3]);
    uint64_t len = sp >= lo && sp < hi && hi < (1ull << 53) ? hi - sp : 0;
    if (len > INT32_MAX) len = 0;
    window[k] = total;
    segs[2 * m] = len > 0 ? (double)sp : 0;
    segs[2 * m + 1] = (double)len;
    m++;
    total += (double)len;
  }
  free(hdr_got);
  napi_value result;
  if (total > max_stack) {
    free(segs);
    napi_get_null(env, &result);
    return result;
  }

  /* Round 2: the windows, into `into` when they fit, else a buffer of their size. */
  void* stack = NULL;
  if (into != NULL && (size_t)total <= into_len) {
    stack = into;
    result = argv[10];
  } else if (napi_create_buffer(env, (size_t)total, &stack, &result) != napi_ok) {
    free(segs);
    return NULL;
  }
  int32_t* stack_got = malloc(sizeof(int32_t) * (m ? m : 1));
  if (!stack_got) {
    free(segs);
    napi_throw_error(env, "ENOMEM", "memSnapshot: out of memory");
    return NULL;
  }
  read_ranges(pid, stack, segs, m, stack_got);
  free(segs);
  if (read_errno != 0) {
    free(stack_got);
    return fail_errno(env, read_errno, pid);
  }
  for (uint32_t k = 0, j = 0; k < count; k++)
    if (window[k] >= 0) got[k] = stack_got[j++];
  free(stack_got);
  return result;
}

napi_status memread_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"memRead", NULL, mem_read, NULL, NULL, NULL, napi_enumerable, NULL},
      {"memSnapshot", NULL, mem_snapshot, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
