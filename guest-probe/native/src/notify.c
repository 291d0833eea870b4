/* sd_notify receiver: an AF_UNIX SOCK_DGRAM socket watched with uv_poll.
 *
 * notifyBind(path, onDatagram) -> { fd, close(), pause(), resume() }
 *
 * Path: "@name" binds "\0name" in the Linux abstract namespace (addrlen covers
 * exactly the name, no trailing NUL). Any other path is a filesystem socket; if
 * a socket file already sits there, it is removed only when it is stale, meaning
 * a connect() to it gets ECONNREFUSED. A live datagram socket there gives
 * EADDRINUSE, and so does anything that is not a socket (bind() reports it).
 *
 * Datagrams: SO_PASSCRED is set, so each one carries SCM_CREDENTIALS and we
 * report the sender pid (0 if absent). The control buffer has room for the
 * credentials only, so fds sent with SCM_RIGHTS (systemd-notify's BARRIER=1
 * sends one) are dropped by the kernel (MSG_CTRUNC). Any fd that is installed
 * anyway is closed at once, and MSG_CMSG_CLOEXEC covers the gap.
 *
 * JS callbacks: each datagram is delivered with napi_make_callback inside a
 * handle scope, with the async context created at bind time. That gives the
 * callback the right async_hooks context and drains process.nextTick and
 * microtasks after it, just as for Node's own handles. If the callback throws,
 * napi_make_callback returns napi_pending_exception. We then take the exception
 * with napi_get_and_clear_last_exception and hand it to napi_fatal_exception.
 * Node does the same for N-API async work and thread-safe functions that throw
 * (napi_env CallbackIntoModule -> TriggerUncaughtException): the exception
 * becomes a normal 'uncaughtException'. With no handler the process exits as
 * usual; with a handler, reading goes on with the next datagram.
 *
 * Back-pressure: pause() stops the poll (uv_poll_stop), also from inside
 * onDatagram, where reading stops after the datagram being delivered; resume()
 * starts it again. While paused, datagrams stay in the kernel's queue, so once
 * it is full senders block or get EAGAIN instead of costing us a read each.
 * Both are no-ops once closing, and when already in the state asked for.
 *
 * Lifetime: the C state is shared by the uv_poll handle and the JS functions
 * close(), pause() and resume() (their data pointer). It is freed once all are
 * done: the uv_close callback has run (uv_closed), and every function has been
 * finalized (js_live == 0). While the socket is open, a strong reference to the
 * handle object keeps the functions alive, because they sit in non-configurable
 * properties of that object. The open poll handle is ref'd, so it keeps the
 * event loop alive, like a listening server; a paused (stopped) one does not, so
 * whoever pauses it keeps the loop alive until resume() (the listener's timer).
 * An async cleanup hook closes the socket if the environment (a Worker, say) is
 * torn down while it is still open.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <node_api.h>
#include <uv.h>

#include "notify.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un*)0)->sun_path)) /* 108 on Linux */

typedef struct notify_sock {
  napi_env env;
  uv_poll_t poll;
  int fd;
  bool abstract;
  bool closing;   /* close started: by close(), env teardown or a failed open */
  bool uv_closed; /* uv_close callback ran (or the poll was never initialised) */
  bool paused;    /* pause() stopped the poll; resume() starts it again */
  int js_live;    /* JS functions holding s that are not finalized yet */
  bool teardown;  /* env is being torn down: make no more N-API calls for refs */
  bool have_ino;
  dev_t dev;
  ino_t ino;
  napi_ref cb_ref;   /* onDatagram */
  napi_ref self_ref; /* handle object: `this` for callbacks, async resource */
  napi_async_context async_ctx;
  napi_async_cleanup_hook_handle cleanup_hook;
  char* path; /* as given, abstract names keep their '@' */
  unsigned char buf[NOTIFY_MAX_DATAGRAM];
} notify_sock;

/* Throws Error{code: errno name, message: "notify socket <path>: <strerror>"}. */
static void throw_errno(napi_env env, int err, const char* path) {
  char code[64];
  uv_err_name_r(-err, code, sizeof code);
  const char* reason = strerror(err);
  size_t n = strlen(path) + strlen(reason) + 32;
  char* msg = malloc(n);
  if (msg == NULL) {
    napi_throw_error(env, code, "notify socket: out of memory");
    return;
  }
  snprintf(msg, n, "notify socket %s: %s", path, reason);
  napi_throw_error(env, code, msg);
  free(msg);
}

/* Returns 0 when bind() may go ahead (path absent, not a socket, or a stale
 * socket that we removed), else an errno. */
static int remove_stale_socket(const struct sockaddr_un* addr, socklen_t addrlen) {
  struct stat st;
  if (lstat(addr->sun_path, &st) != 0 || !S_ISSOCK(st.st_mode))
    return 0; /* bind() reports what is wrong, if anything */
  int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (probe < 0) return errno;
  int r = connect(probe, (const struct sockaddr*)addr, addrlen);
  int err = r == 0 ? 0 : errno;
  close(probe);
  if (r == 0) return EADDRINUSE; /* a live datagram socket owns the path */
  if (err == ECONNREFUSED) {     /* nobody is bound: stale file */
    if (unlink(addr->sun_path) != 0 && errno != ENOENT) return errno;
    return 0;
  }
  /* EPROTOTYPE (a live stream/seqpacket socket), EACCES, ...: leave the file
   * alone; bind() then fails with EADDRINUSE. */
  return 0;
}

static void on_readable(uv_poll_t* h, int status, int events);

static void free_sock(notify_sock* s) {
  free(s->path);
  free(s);
}

static void release_js(notify_sock* s) {
  if (s->cb_ref != NULL) {
    napi_delete_reference(s->env, s->cb_ref);
    s->cb_ref = NULL;
  }
  if (s->self_ref != NULL) {
    napi_delete_reference(s->env, s->self_ref);
    s->self_ref = NULL;
  }
  if (s->async_ctx != NULL) {
    napi_async_destroy(s->env, s->async_ctx);
    s->async_ctx = NULL;
  }
}

/* Removes the socket file only if it is still the one we bound. */
static void unlink_if_ours(notify_sock* s) {
  struct stat st;
  if (s->abstract || !s->have_ino) return;
  if (lstat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino) unlink(s->path);
}

static void on_closed(uv_handle_t* h) {
  notify_sock* s = h->data;
  s->uv_closed = true;
  /* JS references are released here rather than in close(), so that close()
   * called from inside onDatagram never destroys the async context of the
   * callback that is still running. */
  if (!s->teardown) release_js(s);
  napi_async_cleanup_hook_handle hook = s->cleanup_hook;
  s->cleanup_hook = NULL;
  /* If one of the JS functions is still reachable, the last finalizer frees s
   * (perhaps during the hook removal below), so s must not be touched after
   * this point. */
  if (s->js_live == 0) free_sock(s);
  if (hook != NULL) napi_remove_async_cleanup_hook(hook);
}

static void start_close(notify_sock* s) {
  if (s->closing) return;
  s->closing = true;
  uv_poll_stop(&s->poll); /* takes the fd out of epoll right away */
  uv_close((uv_handle_t*)&s->poll, on_closed);
  close(s->fd);
  s->fd = -1;
  unlink_if_ours(s);
}

static void on_env_cleanup(napi_async_cleanup_hook_handle handle, void* arg) {
  (void)handle; /* same as s->cleanup_hook; on_closed removes it */
  notify_sock* s = arg;
  s->teardown = true;
  start_close(s); /* no-op if already closing: on_closed is pending */
}

static void on_fn_finalize(napi_env env, void* data, void* hint) {
  (void)env;
  (void)hint;
  notify_sock* s = data;
  if (--s->js_live > 0) return;
  if (!s->closing) { /* cannot happen while self_ref holds the handle object */
    s->teardown = true;
    start_close(s);
    return;
  }
  if (s->uv_closed) free_sock(s);
}

static napi_value notify_close(napi_env env, napi_callback_info info) {
  void* data = NULL;
  if (napi_get_cb_info(env, info, NULL, NULL, NULL, &data) != napi_ok) return NULL;
  start_close(data); /* idempotent */
  return NULL;       /* undefined */
}

static napi_value notify_pause(napi_env env, napi_callback_info info) {
  void* data = NULL;
  if (napi_get_cb_info(env, info, NULL, NULL, NULL, &data) != napi_ok) return NULL;
  notify_sock* s = data;
  if (s->closing || s->paused) return NULL;
  s->paused = true;
  uv_poll_stop(&s->poll); /* on_readable's loop sees paused and stops too */
  return NULL;
}

static napi_value notify_resume(napi_env env, napi_callback_info info) {
  void* data = NULL;
  if (napi_get_cb_info(env, info, NULL, NULL, NULL, &data) != napi_ok) return NULL;
  notify_sock* s = data;
  if (s->closing || !s->paused) return NULL;
  /* Level-triggered: datagrams queued while paused wake on_readable at once. */
  int r = uv_poll_start(&s->poll, UV_READABLE, on_readable);
  if (r != 0) {
    throw_errno(env, -r, s->path);
    return NULL;
  }
  s->paused = false;
  return NULL;
}

static void deliver(notify_sock* s, size_t len, int pid, bool truncated) {
  napi_env env = s->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value recv, cb, argv[3];
  if (napi_get_reference_value(env, s->self_ref, &recv) == napi_ok && recv != NULL &&
      napi_get_reference_value(env, s->cb_ref, &cb) == napi_ok && cb != NULL &&
      napi_create_buffer_copy(env, len, s->buf, NULL, &argv[0]) == napi_ok &&
      napi_create_int32(env, pid, &argv[1]) == napi_ok &&
      napi_get_boolean(env, truncated, &argv[2]) == napi_ok) {
    napi_status st = napi_make_callback(env, s->async_ctx, recv, cb, 3, argv, NULL);
    if (st == napi_pending_exception) {
      napi_value exc;
      if (napi_get_and_clear_last_exception(env, &exc) == napi_ok) napi_fatal_exception(env, exc);
    }
  }
  napi_close_handle_scope(env, scope);
}

static void on_readable(uv_poll_t* h, int status, int events) {
  (void)events;
  notify_sock* s = h->data;
  if (status < 0) return; /* libuv already stopped the poll (POLLERR) */
  while (!s->closing && !s->paused) {
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(struct ucred))];
    } ctrl;
    struct iovec iov = {.iov_base = s->buf, .iov_len = sizeof s->buf};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.buf;
    msg.msg_controllen = sizeof ctrl.buf;
    ssize_t n = recvmsg(s->fd, &msg, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      break; /* EAGAIN: drained (other errors: wait for the next wake-up) */
    }
    int pid = 0;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
        struct ucred uc;
        memcpy(&uc, CMSG_DATA(c), sizeof uc);
        pid = (int)uc.pid;
      } else if (c->cmsg_type == SCM_RIGHTS) {
        size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
          int fd;
          memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          close(fd);
        }
      }
    }
    bool truncated = (size_t)n > sizeof s->buf;
    deliver(s, truncated ? sizeof s->buf : (size_t)n, pid, truncated);
  }
}

napi_value notify_bind(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  napi_valuetype t0 = napi_undefined, t1 = napi_undefined;
  if (argc >= 1) napi_typeof(env, argv[0], &t0);
  if (argc >= 2) napi_typeof(env, argv[1], &t1);
  if (t0 != napi_string) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "notifyBind: path must be a string");
    return NULL;
  }
  if (t1 != napi_function) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "notifyBind: onDatagram must be a function");
    return NULL;
  }

  size_t len = 0;
  if (napi_get_value_string_utf8(env, argv[0], NULL, 0, &len) != napi_ok) return NULL;
  char* path = malloc(len + 1);
  if (path == NULL) {
    napi_throw_error(env, "ENOMEM", "notify socket: out of memory");
    return NULL;
  }
  if (napi_get_value_string_utf8(env, argv[0], path, len + 1, &len) != napi_ok) {
    free(path);
    return NULL;
  }

  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  socklen_t addrlen = 0;
  bool abstract = len > 0 && path[0] == '@';
  int err = 0;
  if (len == 0) {
    err = EINVAL;
  } else if (abstract) {
    if (len > SUN_PATH_MAX) {
      err = ENAMETOOLONG;
    } else {
      addr.sun_path[0] = '\0';
      memcpy(addr.sun_path + 1, path + 1, len - 1);
      addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    }
  } else if (memchr(path, '\0', len) != NULL) {
    err = EINVAL;
  } else if (len >= SUN_PATH_MAX) {
    err = ENAMETOOLONG; /* > 107 bytes: no room for the terminating NUL */
  } else {
    memcpy(addr.sun_path, path, len);
    addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
  }
  if (err != 0) {
    throw_errno(env, err, path);
    free(path);
    return NULL;
  }

  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    throw_errno(env, errno, path);
    free(path);
    return NULL;
  }
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) err = errno;
  if (err == 0 && !abstract) err = remove_stale_socket(&addr, addrlen);
  if (err == 0 && bind(fd, (const struct sockaddr*)&addr, addrlen) != 0) err = errno;
  if (err != 0) {
    close(fd);
    throw_errno(env, err, path);
    free(path);
    return NULL;
  }

  notify_sock* s = calloc(1, sizeof *s);
  if (s == NULL) {
    close(fd);
    if (!abstract) unlink(path);
    napi_throw_error(env, "ENOMEM", "notify socket: out of memory");
    free(path);
    return NULL;
  }
  s->env = env;
  s->fd = fd;
  s->abstract = abstract;
  s->path = path;
  s->poll.data = s;
  if (!abstract) {
    struct stat st;
    if (lstat(path, &st) == 0) {
      s->have_ino = true;
      s->dev = st.st_dev;
      s->ino = st.st_ino;
    }
  }

  napi_value handle, fns[3], fd_val, res_name;
  uv_loop_t* loop = NULL;
  if (napi_create_object(env, &handle) != napi_ok ||
      napi_create_function(env, "close", NAPI_AUTO_LENGTH, notify_close, s, &fns[0]) != napi_ok ||
      napi_create_function(env, "pause", NAPI_AUTO_LENGTH, notify_pause, s, &fns[1]) != napi_ok ||
      napi_create_function(env, "resume", NAPI_AUTO_LENGTH, notify_resume, s, &fns[2]) != napi_ok ||
      napi_create_int32(env, fd, &fd_val) != napi_ok)
    goto fail_early;
  napi_property_descriptor props[] = {
      {"fd", NULL, NULL, NULL, NULL, fd_val, napi_enumerable, NULL},
      {"close", NULL, NULL, NULL, NULL, fns[0], napi_enumerable, NULL},
      {"pause", NULL, NULL, NULL, NULL, fns[1], napi_enumerable, NULL},
      {"resume", NULL, NULL, NULL, NULL, fns[2], napi_enumerable, NULL},
  };
  if (napi_define_properties(env, handle, 4, props) != napi_ok ||
      napi_create_reference(env, argv[1], 1, &s->cb_ref) != napi_ok ||
      napi_create_reference(env, handle, 1, &s->self_ref) != napi_ok ||
      napi_create_string_utf8(env, "vsockdiag.NotifySocket", NAPI_AUTO_LENGTH, &res_name) != napi_ok ||
      napi_async_init(env, handle, res_name, &s->async_ctx) != napi_ok ||
      napi_get_uv_event_loop(env, &loop) != napi_ok)
    goto fail_early;
  /* Last, so that nothing fails after them but another of them (see fail_early). */
  for (int i = 0; i < 3; i++) {
    if (napi_add_finalizer(env, fns[i], s, on_fn_finalize, NULL, NULL) != napi_ok) goto fail_early;
    s->js_live++;
  }

  /* From here on s is freed through the uv_closed / js_live == 0 pair. */
  int r = uv_poll_init(loop, &s->poll, fd);
  if (r != 0) {
    s->closing = true;
    s->uv_closed = true;
    close(fd);
    s->fd = -1;
    unlink_if_ours(s);
    release_js(s);
    throw_errno(env, -r, path);
    return NULL;
  }
  s->poll.data = s;
  r = uv_poll_start(&s->poll, UV_READABLE, on_readable);
  if (r != 0) {
    start_close(s);
    throw_errno(env, -r, path);
    return NULL;
  }
  if (napi_add_async_cleanup_hook(env, on_env_cleanup, s, &s->cleanup_hook) != napi_ok)
    s->cleanup_hook = NULL; /* only teardown cleanup is lost */
  return handle;

fail_early: {
  /* An exception may be pending already; if not, throw a generic one. */
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  release_js(s);
  close(fd);
  unlink_if_ours(s);
  if (!pending) throw_errno(env, ENOMEM, path);
  if (s->js_live == 0) {
    free_sock(s);
  } else { /* some finalizers are in: the last of them frees s */
    s->closing = true;
    s->uv_closed = true;
  }
  return NULL;
}
}
