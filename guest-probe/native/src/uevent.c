/* Kernel uevents: a NETLINK_KOBJECT_UEVENT socket in the kernel's multicast group (1), which
 * is where the kernel itself broadcasts (udevd's rebroadcasts go to group 2, in another
 * format). Listen-only: nothing is ever sent on it.
 *
 * ueventOpen() -> fd      non-blocking, close-on-exec, bound to group 1, in the calling
 *                         thread's network namespace. Throws Error{code: errno name}
 *                         (EPROTONOSUPPORT without CONFIG_NET, EPERM under a seccomp policy).
 * ueventRead(fd) -> Buffer | null
 *                         the next datagram (cut at UEVENT_MAX_DATAGRAM), an empty Buffer
 *                         when the kernel dropped some for a full receive buffer (ENOBUFS),
 *                         or null when there is nothing to read. Throws on other errors.
 *
 * Read by polling: the probe reads on its one-second tick and at once when its link to the
 * collector drops (a restore resets the link and announces itself here at the same moment),
 * so no poll handle is needed. The fd is closed with closeFd (vsock.c).
 */
#include <errno.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <node_api.h>

#include "errno-name.h"
#include "uevent.h"

/* Room for a burst of device events between two reads (a boot's hotplug storm is the worst). */
#define UEVENT_RCVBUF (256 * 1024)
#define KERNEL_GROUP 1

static void throw_sys(napi_env env, int err, const char* what) {
  char msg[256];
  snprintf(msg, sizeof msg, "uevent socket: %s: %s", what, strerror(err));
  napi_throw_error(env, errno_name(err), msg);
}

static napi_value uevent_open(napi_env env, napi_callback_info info) {
  (void)info;
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
  if (fd < 0) {
    throw_sys(env, errno, "socket");
    return NULL;
  }
  int size = UEVENT_RCVBUF;
  /* Best effort: the default (rmem_default) is enough for a quiet guest. */
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  struct sockaddr_nl addr;
  memset(&addr, 0, sizeof addr);
  addr.nl_family = AF_NETLINK;
  addr.nl_pid = 0; /* the kernel picks our port id */
  addr.nl_groups = KERNEL_GROUP;
  if (bind(fd, (struct sockaddr*)&addr, sizeof addr) != 0) {
    int err = errno;
    close(fd);
    throw_sys(env, err, "bind");
    return NULL;
  }
  napi_value out;
  if (napi_create_int32(env, fd, &out) != napi_ok) {
    close(fd);
    return NULL;
  }
  return out;
}

static napi_value uevent_read(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "ueventRead(fd): fd must be a non-negative integer");
    return NULL;
  }
  static unsigned char buf[UEVENT_MAX_DATAGRAM];
  ssize_t n;
  do {
    n = recv(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
  } while (n < 0 && errno == EINTR);
  napi_value out;
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      napi_get_null(env, &out);
      return out;
    }
    if (errno == ENOBUFS) n = 0; /* some were dropped: say so with an empty datagram */
    else {
      throw_sys(env, errno, "recv");
      return NULL;
    }
  }
  size_t len = (size_t)n > sizeof buf ? sizeof buf : (size_t)n;
  void* data = NULL;
  if (napi_create_buffer_copy(env, len, buf, &data, &out) != napi_ok) return NULL;
  return out;
}

napi_status uevent_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"ueventOpen", NULL, uevent_open, NULL, NULL, NULL, napi_enumerable, NULL},
      {"ueventRead", NULL, uevent_read, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
