#ifndef VSOCKDIAG_ERRNO_NAME_H
#define VSOCKDIAG_ERRNO_NAME_H

#include <errno.h>

/* Node-style errno names (as uv_err_name spells them) for the errors sockets, netlink and
 * /proc produce: the `code` of the Errors vsock.c and diag.c throw. One table for the addon,
 * so a failure has the same name whichever area reports it. */
static inline const char* errno_name(int err) {
  switch (err) {
#define E(x) \
  case x:    \
    return #x;
    E(EPERM) E(ENOENT) E(ESRCH) E(EINTR) E(EIO) E(ENXIO) E(E2BIG) E(EBADF) E(EAGAIN) E(ENOMEM)
    E(EACCES) E(EFAULT) E(EBUSY) E(EEXIST) E(ENODEV) E(ENOTDIR) E(EISDIR) E(EINVAL) E(ENFILE)
    E(EMFILE) E(ENOTTY) E(ENOSPC) E(EROFS) E(EPIPE) E(ERANGE) E(ENAMETOOLONG) E(ENOSYS)
    E(ELOOP) E(EPROTO) E(EBADMSG) E(EOVERFLOW) E(ENOTSOCK) E(EDESTADDRREQ) E(EMSGSIZE)
    E(EPROTOTYPE) E(ENOPROTOOPT) E(EPROTONOSUPPORT) E(ESOCKTNOSUPPORT) E(EOPNOTSUPP)
    E(EPFNOSUPPORT) E(EAFNOSUPPORT) E(EADDRINUSE) E(EADDRNOTAVAIL) E(ENETDOWN) E(ENETUNREACH)
    E(ENETRESET) E(ECONNABORTED) E(ECONNRESET) E(ENOBUFS) E(EISCONN) E(ENOTCONN) E(ESHUTDOWN)
    E(ETIMEDOUT) E(ECONNREFUSED) E(EHOSTDOWN) E(EHOSTUNREACH) E(EALREADY) E(EINPROGRESS)
    E(ECANCELED)
#undef E
    default:
      return "UNKNOWN";
  }
}

#endif
