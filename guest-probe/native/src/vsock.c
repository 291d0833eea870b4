/* Socket syscalls that libuv cannot make for us: AF_VSOCK listen and connect, and the
 * guest's local CID. Every socket fd returned here is SOCK_STREAM, non-blocking and
 * close-on-exec; JS hands it to a libuv Pipe handle (guest-probe/src/vsock/pipe.ts),
 * which then does all the I/O. This file does no I/O on the fds it returns.
 *
 *   vsockListen(cid, port, backlog) -> fd              throws
 *   vsockConnect(cid, port, timeoutMs) -> Promise<fd>
 *   unixListen(path, backlog) -> fd                    throws ('@name' = abstract)
 *   unixConnect(path, timeoutMs) -> Promise<fd>
 *   tcpConnect(ip, port, timeoutMs) -> Promise<fd>     numeric IPv4/IPv6 only
 *   localCid() -> number                               throws
 *   socketPair() -> [fd, fd]                           throws
 *   closeFd(fd)                                        throws (EBADF)
 *
 * Connect: the three connect functions share start_connect(). connect() is called
 * non-blocking on the JS thread; if it finishes at once (AF_UNIX always does) the
 * promise settles right there. On EINPROGRESS (vsock, TCP) an napi_async_work polls the
 * fd for POLLOUT with the timeout on a threadpool thread, then reads SO_ERROR; the errno
 * is captured on that thread and carried in the request. On failure the fd is closed
 * and the promise rejects. unixConnect and tcpConnect exist so this path is tested
 * without vsock: AF_UNIX covers the immediate results, TCP on loopback takes the same
 * EINPROGRESS -> worker route as vsock, and a loopback TCP listener with a full accept
 * queue is the one local way to make a connect wait until it times out (an AF_UNIX
 * listener with a full queue makes a non-blocking connect fail at once with EAGAIN).
 * A waiting connect holds one libuv threadpool thread (4 by default) for up to timeoutMs.
 * For vsock the kernel also arms its own connect timeout (2 s by default), which fails
 * the attempt with ETIMEDOUT first if timeoutMs is longer; we leave that default alone.
 *
 * Errors: bad arguments throw TypeError{code: ERR_INVALID_ARG_TYPE} or
 * RangeError{code: ERR_INVALID_ARG_VALUE} synchronously, before any socket exists.
 * Syscall failures throw (or reject with) an Error whose code is the errno name,
 * errno = -errno (Node's convention), syscall = the failing call, and message
 * "<what> <address>: <strerror>", e.g. "vsock listen 4294967295:52001: Address
 * already in use".
 *
 * Headers: N-API and system headers only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <linux/vm_sockets.h> /* after sys/socket.h: sockaddr_vm, IOCTL_VM_SOCKETS_GET_LOCAL_CID */

#include <node_api.h>

#include "errno-name.h"
#include "vsock.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un*)0)->sun_path)) /* 108 on Linux */
#define WHAT_MAX 192 /* "unix connect " + a 107-byte path fits */

/* ---- errors ---------------------------------------------------------------------- */

/* Error{code, errno, syscall, message "<what>: <strerror>"}. JS thread only (strerror). */
static napi_value errno_error(napi_env env, int err, const char* syscall, const char* what) {
  char msg[WHAT_MAX + 128];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_value code, message, error, num, sc;
  if (napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code) != napi_ok ||
      napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message) != napi_ok ||
      napi_create_error(env, code, message, &error) != napi_ok)
    return NULL;
  /* Best effort: the error is still useful without these two. */
  if (napi_create_int32(env, -err, &num) == napi_ok) napi_set_named_property(env, error, "errno", num);
  if (napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &sc) == napi_ok)
    napi_set_named_property(env, error, "syscall", sc);
  return error;
}

static void throw_errno(napi_env env, int err, const char* syscall, const char* what) {
  napi_value error = errno_error(env, err, syscall, what);
  if (error != NULL) napi_throw(env, error);
  else napi_throw_error(env, errno_name(err), what);
}

/* ---- arguments ------------------------------------------------------------------- */

static bool get_args(napi_env env, napi_callback_info info, size_t n, napi_value* argv) {
  size_t argc = n; /* missing arguments come back as undefined; the type checks catch them */
  return napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok;
}

/* An integer Number in [0, max]. Strings, NaN, fractions and out-of-range values throw:
 * nothing is coerced or wrapped, so listen(-1) cannot silently mean port 4294967295. */
static bool get_uint(napi_env env, napi_value v, const char* fn, const char* name, double max,
                     uint32_t* out) {
  char msg[160];
  napi_valuetype t = napi_undefined;
  double d = 0;
  if (napi_typeof(env, v, &t) != napi_ok) return false;
  if (t != napi_number) {
    snprintf(msg, sizeof msg, "%s: %s must be a number", fn, name);
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
    return false;
  }
  if (napi_get_value_double(env, v, &d) != napi_ok) return false;
  /* NaN fails the range test, so the cast only ever sees values in [0, max]. */
  if (!(d >= 0 && d <= max) || d != (double)(int64_t)d) {
    snprintf(msg, sizeof msg, "%s: %s must be an integer from 0 to %.0f, got %.15g", fn, name, max, d);
    napi_throw_range_error(env, "ERR_INVALID_ARG_VALUE", msg);
    return false;
  }
  *out = (uint32_t)d;
  return true;
}

/* A string argument, malloc'd; the caller frees it. */
static char* get_string(napi_env env, napi_value v, const char* fn, const char* name, size_t* len) {
  napi_valuetype t = napi_undefined;
  if (napi_typeof(env, v, &t) != napi_ok) return NULL;
  if (t != napi_string) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s: %s must be a string", fn, name);
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
    return NULL;
  }
  if (napi_get_value_string_utf8(env, v, NULL, 0, len) != napi_ok) return NULL;
  char* s = malloc(*len + 1);
  if (s == NULL) {
    napi_throw_error(env, "ENOMEM", "out of memory");
    return NULL;
  }
  if (napi_get_value_string_utf8(env, v, s, *len + 1, len) != napi_ok) {
    free(s);
    return NULL;
  }
  return s;
}

/* Returns an fd to JS; closes it if even that fails, so it never leaks. */
static napi_value fd_value(napi_env env, int fd) {
  napi_value v;
  if (napi_create_int32(env, fd, &v) != napi_ok) {
    close(fd);
    return NULL;
  }
  return v;
}

/* sockaddr_un for a path; "@name" is "\0name" in the abstract namespace. 0 or an errno. */
static int unix_addr(const char* path, size_t len, struct sockaddr_un* addr, socklen_t* addrlen) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (len == 0 || memchr(path, '\0', len) != NULL) return EINVAL;
  if (path[0] == '@') {
    if (len > SUN_PATH_MAX) return ENAMETOOLONG;
    memcpy(addr->sun_path + 1, path + 1, len - 1); /* sun_path[0] stays '\0' */
    *addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
  } else {
    if (len >= SUN_PATH_MAX) return ENAMETOOLONG; /* no room for the terminating NUL */
    memcpy(addr->sun_path, path, len);
    *addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
  }
  return 0;
}

/* ---- listen ---------------------------------------------------------------------- */

/* socket + bind + listen; returns the fd, or throws (and closes the fd). */
static napi_value listen_on(napi_env env, int domain, const struct sockaddr* addr, socklen_t len,
                            uint32_t backlog, const char* what) {
  const char* syscall = "socket";
  int err = 0;
  int fd = socket(domain, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    err = errno;
  } else if (bind(fd, addr, len) != 0) {
    err = errno;
    syscall = "bind";
  } else if (listen(fd, (int)backlog) != 0) {
    err = errno;
    syscall = "listen";
  }
  if (err != 0) {
    if (fd >= 0) close(fd);
    throw_errno(env, err, syscall, what);
    return NULL;
  }
  return fd_value(env, fd);
}

static napi_value vsock_listen(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  uint32_t cid, port, backlog;
  if (!get_args(env, info, 3, argv) ||
      !get_uint(env, argv[0], "vsockListen", "cid", UINT32_MAX, &cid) ||
      !get_uint(env, argv[1], "vsockListen", "port", UINT32_MAX, &port) ||
      !get_uint(env, argv[2], "vsockListen", "backlog", INT_MAX, &backlog))
    return NULL;
  struct sockaddr_vm addr;
  memset(&addr, 0, sizeof addr);
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = cid; /* VMADDR_CID_ANY = 0xFFFFFFFF: keeps working across CID changes */
  addr.svm_port = port;
  char what[WHAT_MAX];
  snprintf(what, sizeof what, "vsock listen %u:%u", cid, port);
  return listen_on(env, AF_VSOCK, (const struct sockaddr*)&addr, sizeof addr, backlog, what);
}

static napi_value unix_listen(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  uint32_t backlog;
  size_t len = 0;
  if (!get_args(env, info, 2, argv)) return NULL;
  char* path = get_string(env, argv[0], "unixListen", "path", &len);
  if (path == NULL) return NULL;
  napi_value result = NULL;
  if (get_uint(env, argv[1], "unixListen", "backlog", INT_MAX, &backlog)) {
    char what[WHAT_MAX];
    snprintf(what, sizeof what, "unix listen %s", path);
    struct sockaddr_un addr;
    socklen_t addrlen = 0;
    int err = unix_addr(path, len, &addr, &addrlen);
    if (err != 0) throw_errno(env, err, "bind", what);
    else result = listen_on(env, AF_UNIX, (const struct sockaddr*)&addr, addrlen, backlog, what);
  }
  free(path);
  return result;
}

/* ---- connect --------------------------------------------------------------------- */

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  int fd;
  int timeout_ms;
  int err;             /* the outcome, written by the worker: 0 or an errno */
  const char* syscall; /* the call err came from */
  char what[WHAT_MAX];
} connect_req;

/* Resolves with fd, or rejects with the errno error (the fd is already closed then). */
static void settle(napi_env env, napi_deferred deferred, int fd, int err, const char* syscall,
                   const char* what) {
  napi_value v = NULL;
  if (err == 0) {
    if (napi_create_int32(env, fd, &v) == napi_ok) {
      napi_resolve_deferred(env, deferred, v);
      return;
    }
    close(fd);
    err = ENOMEM;
    syscall = "connect";
  }
  v = errno_error(env, err, syscall, what);
  if (v == NULL) napi_get_undefined(env, &v); /* env going away: still settle the deferred */
  napi_reject_deferred(env, deferred, v);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Threadpool thread: no N-API calls and no JS here, only syscalls on req. */
static void connect_execute(napi_env env, void* data) {
  (void)env;
  connect_req* req = data;
  const int64_t deadline = now_ms() + req->timeout_ms;
  req->syscall = "connect";
  for (;;) {
    int64_t left = deadline - now_ms();
    struct pollfd p = {.fd = req->fd, .events = POLLOUT, .revents = 0};
    int r = poll(&p, 1, left > 0 ? (int)left : 0);
    if (r > 0) break;
    if (r == 0) {
      req->err = ETIMEDOUT;
      return;
    }
    if (errno != EINTR) {
      req->err = errno;
      req->syscall = "poll";
      return;
    }
  }
  /* POLLOUT (with POLLERR when it failed): the attempt is over, SO_ERROR says how. */
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(req->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) {
    req->err = errno;
    req->syscall = "getsockopt";
    return;
  }
  if (soerr != 0) {
    req->err = soerr; /* ECONNREFUSED, ECONNRESET (Firecracker: no host listener), ... */
    return;
  }
  /* vsock's poll also reports POLLOUT for a socket whose attempt ended (TCP_CLOSE); if no
   * error was left in SO_ERROR, make sure we really have a peer before claiming success. */
  struct sockaddr_storage peer;
  socklen_t pl = sizeof peer;
  if (getpeername(req->fd, (struct sockaddr*)&peer, &pl) != 0)
    req->err = errno == ENOTCONN ? ECONNRESET : errno;
}

/* JS thread, after connect_execute (or instead of it, if cancelled). */
static void connect_complete(napi_env env, napi_status status, void* data) {
  connect_req* req = data;
  if (status != napi_ok && req->err == 0) {
    req->err = ECANCELED;
    req->syscall = "connect";
  }
  if (req->err != 0) {
    close(req->fd);
    req->fd = -1;
  }
  settle(env, req->deferred, req->fd, req->err, req->syscall, req->what);
  napi_delete_async_work(env, req->work);
  free(req);
}

/* Creates the socket and connects it; returns the promise (NULL only if even the
 * promise could not be made, with an exception pending). */
static napi_value start_connect(napi_env env, int domain, const struct sockaddr* addr,
                                socklen_t addrlen, uint32_t timeout_ms, const char* what) {
  napi_value promise;
  napi_deferred deferred;
  if (napi_create_promise(env, &deferred, &promise) != napi_ok) return NULL;

  int fd = socket(domain, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) { /* EAFNOSUPPORT: no vsock transport in this kernel */
    settle(env, deferred, -1, errno, "socket", what);
    return promise;
  }
  int err = connect(fd, addr, addrlen) == 0 ? 0 : errno; /* errno read right after the call */
  if (err == 0) { /* AF_UNIX: connected already */
    settle(env, deferred, fd, 0, NULL, what);
    return promise;
  }
  if (err != EINPROGRESS && err != EINTR) { /* EINTR: the attempt goes on, as for EINPROGRESS */
    close(fd);
    settle(env, deferred, -1, err, "connect", what);
    return promise;
  }

  connect_req* req = calloc(1, sizeof *req);
  napi_value name;
  if (req == NULL) {
    close(fd);
    settle(env, deferred, -1, ENOMEM, "connect", what);
    return promise;
  }
  req->deferred = deferred;
  req->fd = fd;
  req->timeout_ms = (int)timeout_ms;
  snprintf(req->what, sizeof req->what, "%s", what);
  if (napi_create_string_utf8(env, "vsockdiag.connect", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, connect_execute, connect_complete, req, &req->work) !=
          napi_ok ||
      napi_queue_async_work(env, req->work) != napi_ok) {
    if (req->work != NULL) napi_delete_async_work(env, req->work);
    close(fd);
    settle(env, deferred, -1, ENOMEM, "connect", what);
    free(req);
  }
  return promise;
}

static napi_value vsock_connect(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  uint32_t cid, port, timeout;
  if (!get_args(env, info, 3, argv) ||
      !get_uint(env, argv[0], "vsockConnect", "cid", UINT32_MAX, &cid) ||
      !get_uint(env, argv[1], "vsockConnect", "port", UINT32_MAX, &port) ||
      !get_uint(env, argv[2], "vsockConnect", "timeoutMs", INT_MAX, &timeout))
    return NULL;
  struct sockaddr_vm addr;
  memset(&addr, 0, sizeof addr);
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = cid;
  addr.svm_port = port;
  char what[WHAT_MAX];
  snprintf(what, sizeof what, "vsock connect %u:%u", cid, port);
  return start_connect(env, AF_VSOCK, (const struct sockaddr*)&addr, sizeof addr, timeout, what);
}

static napi_value unix_connect(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  uint32_t timeout;
  size_t len = 0;
  if (!get_args(env, info, 2, argv)) return NULL;
  char* path = get_string(env, argv[0], "unixConnect", "path", &len);
  if (path == NULL) return NULL;
  napi_value result = NULL;
  if (get_uint(env, argv[1], "unixConnect", "timeoutMs", INT_MAX, &timeout)) {
    char what[WHAT_MAX];
    snprintf(what, sizeof what, "unix connect %s", path);
    struct sockaddr_un addr;
    socklen_t addrlen = 0;
    int err = unix_addr(path, len, &addr, &addrlen);
    if (err == 0) {
      result = start_connect(env, AF_UNIX, (const struct sockaddr*)&addr, addrlen, timeout, what);
    } else { /* a bad path is a failed connect, like ENOENT: reject, do not throw */
      napi_deferred deferred;
      if (napi_create_promise(env, &deferred, &result) == napi_ok)
        settle(env, deferred, -1, err, "connect", what);
    }
  }
  free(path);
  return result;
}

static napi_value tcp_connect(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  uint32_t port, timeout;
  size_t len = 0;
  if (!get_args(env, info, 3, argv)) return NULL;
  char* ip = get_string(env, argv[0], "tcpConnect", "ip", &len);
  if (ip == NULL) return NULL;
  napi_value result = NULL;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in* a4 = (struct sockaddr_in*)&ss;
  struct sockaddr_in6* a6 = (struct sockaddr_in6*)&ss;
  socklen_t addrlen = 0;
  if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    addrlen = sizeof *a4;
  } else if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    addrlen = sizeof *a6;
  }
  if (addrlen == 0) {
    napi_throw_range_error(env, "ERR_INVALID_ARG_VALUE",
                           "tcpConnect: ip must be a numeric IPv4 or IPv6 address");
  } else if (get_uint(env, argv[1], "tcpConnect", "port", 65535, &port) &&
             get_uint(env, argv[2], "tcpConnect", "timeoutMs", INT_MAX, &timeout)) {
    in_port_t nport = htons((uint16_t)port);
    if (ss.ss_family == AF_INET) a4->sin_port = nport;
    else a6->sin6_port = nport;
    char what[WHAT_MAX];
    snprintf(what, sizeof what, ss.ss_family == AF_INET ? "tcp connect %s:%u" : "tcp connect [%s]:%u",
             ip, port);
    result = start_connect(env, ss.ss_family, (const struct sockaddr*)&ss, addrlen, timeout, what);
  }
  free(ip);
  return result;
}

/* ---- small helpers --------------------------------------------------------------- */

static napi_value local_cid(napi_env env, napi_callback_info info) {
  (void)info;
  const char* what = "vsock local CID (/dev/vsock)";
  int fd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);
  if (fd < 0) { /* ENOENT: no vsock device in this VM */
    throw_errno(env, errno, "open", what);
    return NULL;
  }
  unsigned int cid = 0;
  int err = ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) == 0 ? 0 : errno;
  close(fd);
  if (err != 0) {
    throw_errno(env, err, "ioctl", what);
    return NULL;
  }
  napi_value v;
  return napi_create_uint32(env, cid, &v) == napi_ok ? v : NULL;
}

static napi_value socket_pair(napi_env env, napi_callback_info info) {
  (void)info;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) {
    throw_errno(env, errno, "socketpair", "socketpair");
    return NULL;
  }
  napi_value arr, a, b;
  if (napi_create_array_with_length(env, 2, &arr) != napi_ok ||
      napi_create_int32(env, sv[0], &a) != napi_ok || napi_create_int32(env, sv[1], &b) != napi_ok ||
      napi_set_element(env, arr, 0, a) != napi_ok || napi_set_element(env, arr, 1, b) != napi_ok) {
    close(sv[0]);
    close(sv[1]);
    return NULL;
  }
  return arr;
}

static napi_value close_fd(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  uint32_t fd;
  if (!get_args(env, info, 1, argv) || !get_uint(env, argv[0], "closeFd", "fd", INT_MAX, &fd))
    return NULL;
  /* Linux closes the fd even when close() reports EINTR, so that is not an error. */
  int err = close((int)fd) == 0 ? 0 : errno;
  if (err != 0 && err != EINTR) {
    char what[32];
    snprintf(what, sizeof what, "close %u", fd);
    throw_errno(env, err, "close", what);
  }
  return NULL;
}

/* readNow(fd, buffer) -> bytes read, or null when nothing waits (EAGAIN): one read of a
 * non-blocking fd that does not throw for what ends nearly every poll. fs.readSync reports
 * EAGAIN by throwing, and the probe, its compilers off, took ~130 us to make that exception
 * each time it polled /dev/kmsg (every tick: kmsg.ts). EINTR is retried; any other failure
 * throws Error{code, errno, syscall}. */
static napi_value read_now(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  uint32_t fd;
  if (!get_args(env, info, 2, argv) || !get_uint(env, argv[0], "readNow", "fd", INT_MAX, &fd))
    return NULL;
  bool is_buffer = false;
  void* data = NULL;
  size_t len = 0;
  if (napi_is_buffer(env, argv[1], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, argv[1], &data, &len) != napi_ok) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "readNow(fd, buffer): buffer must be a Buffer");
    return NULL;
  }
  ssize_t n;
  do {
    n = read((int)fd, data, len);
  } while (n < 0 && errno == EINTR);
  napi_value out = NULL;
  if (n >= 0) {
    napi_create_int64(env, (int64_t)n, &out);
    return out;
  }
  int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK) {
    napi_get_null(env, &out);
    return out;
  }
  char what[32];
  snprintf(what, sizeof what, "read %u", fd);
  throw_errno(env, err, "read", what);
  return NULL;
}

napi_status vsock_register(napi_env env, napi_value exports) {
#define FN(name, cb) {name, NULL, cb, NULL, NULL, NULL, napi_enumerable, NULL}
  napi_property_descriptor props[] = {
      FN("vsockListen", vsock_listen), FN("vsockConnect", vsock_connect),
      FN("unixListen", unix_listen),   FN("unixConnect", unix_connect),
      FN("tcpConnect", tcp_connect),   FN("localCid", local_cid),
      FN("socketPair", socket_pair),   FN("closeFd", close_fd),
      FN("readNow", read_now),
  };
#undef FN
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
