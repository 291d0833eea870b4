/* TCP socket queries over NETLINK_SOCK_DIAG (inet_diag): listeners and a per-remote census.
 *
 * diagListeners(port?) -> [{ family, address, port, inode, acceptQueue, backlog }]
 * diagListener(address, port) -> { family, address, port, inode, acceptQueue, backlog } | null
 * diagCensus({ states?, remote?: { address, port? }, top?, maxRemotes? })
 *   -> { total, byState, byRemote: [{ address, port, count }], remotesDistinct, otherRemotes }
 * diagAvailable() -> boolean
 *
 * Why: reading /proc/net/tcp makes the kernel format every socket of the namespace as text
 * (milliseconds of kernel time at a few thousand sockets). A LISTEN-only inet_diag dump walks
 * only the listening hash and costs tens of microseconds, so the probe can run it every tick.
 *
 * diagListener asks for one socket instead (a request without NLM_F_DUMP): the kernel looks the
 * address and port up in its hashes as it would for an incoming SYN (a listener bound to the
 * wildcard answers for any address) and replies with that socket or ENOENT. It walks nothing:
 * ~4 us against ~25 us for the two LISTEN dumps on an idle host, more when caches are cold
 * (the probe's case, once a second), so the probe checks a listener it already knows this way.
 *
 * Each dump opens one NETLINK_SOCK_DIAG datagram socket, sends one SOCK_DIAG_BY_FAMILY dump
 * request (inet_diag_req_v2, IPPROTO_TCP) for AF_INET and then one for AF_INET6, reads the
 * multi-part replies up to NLMSG_DONE and closes the socket. A fresh socket per dump (a few
 * microseconds) means a reply left over from an aborted dump can never be read by the next
 * one. diagListener's one-message answers come over a socket kept open instead (a lookup a
 * tick made it three syscalls in four), each under its own seq, and a lookup that fails part
 * way closes it. NLMSG_ERROR (or a negative NLMSG_DONE status) becomes a thrown Error whose
 * code is the errno name. ENOENT for AF_INET6 means the kernel has no IPv6 diag handler (IPv6
 * compiled out): that family then contributes nothing, as a missing /proc/net/tcp6 does in
 * net-tcp.ts.
 *
 * Replies are read into one 32 KiB buffer per thread (the kernel sizes dump messages by the
 * reader's buffer, capped at 32 KiB), so a call allocates nothing but its JS result. The census
 * keeps its counts in C: per-state counters and an open-addressing hash table keyed by
 * (family, remote address, remote port) holding at most maxRemotes distinct remotes (default
 * 16384). Sockets whose remote does not fit once the table is full are counted in otherRemotes;
 * remotes are admitted first come, first served, so with otherRemotes > 0 a heavy remote first
 * seen late can be missing from byRemote. The top N are picked from the table without sorting
 * it all. Per-thread state (buffer and table) lives behind a __thread pointer: every Node
 * environment runs on its own thread, and an env cleanup hook frees the state with it.
 *
 * Addresses: IPv4 dotted (inet_ntop); IPv6 as RFC 5952 text, with IPv4-mapped addresses as
 * ::ffff:a.b.c.d, exactly as net-tcp.ts prints them (formatted here rather than with
 * inet_ntop, whose glibc version prints IPv4-compatible addresses such as ::1.2.3.4 instead).
 *
 * States: the kernel's numbering (include/net/tcp_states.h, as TcpState in net-tcp.ts). The
 * kernel reports request sockets (TCP_NEW_SYN_RECV, 12) as SYN_RECV and adds bit 12 to the
 * requested states whenever SYN_RECV is asked for; a 12 seen anyway is counted as SYN_RECV.
 * TIME_WAIT entries carry the timewait substate (TIME_WAIT, or FIN_WAIT2), as /proc does.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>

#include <node_api.h>

#include "diag.h"
#include "errno-name.h"

/* include/net/tcp_states.h (not exported to user space). */
enum {
  ST_ESTABLISHED = 1,
  ST_SYN_RECV = 3,
  ST_LISTEN = 10,
  ST_MAX_NAMED = 11, /* CLOSING */
  ST_NEW_SYN_RECV = 12,
};

static const char* const STATE_NAMES[ST_MAX_NAMED + 1] = {
    NULL,        "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2",
    "TIME_WAIT", "CLOSE",       "CLOSE_WAIT", "LAST_ACK", "LISTEN",    "CLOSING",
};

#define STATES_ALL 0x1FFEu     /* bits 1..12 */
#define STATES_ALLOWED 0x1FFFu /* what a caller may pass */
#define RBUF_SIZE 32768
#define TOP_DEFAULT 10
#define TOP_MAX 100
#define REMOTES_DEFAULT 16384
#define REMOTES_MAX 65536
#define RECV_TIMEOUT_MS 2000

/* Returned by message callbacks when an N-API call failed (an exception may be pending). */
#define DIAG_ENAPI (-1)

typedef struct {
  uint8_t addr[16]; /* network order; IPv4 in the first 4 bytes, the rest zero */
  uint16_t port;    /* host order */
  uint8_t family;   /* AF_INET or AF_INET6 */
  uint8_t pad;
  uint32_t count;
} remote_ent;

typedef struct diag_ctx {
  _Alignas(8) unsigned char rbuf[RBUF_SIZE];
  remote_ent* ents;
  uint32_t ents_cap;
  uint32_t* slots; /* 0 = empty, else index + 1 into ents */
  uint32_t slots_cap;
  /* diagListener's socket, kept open between lookups (-1: none): the probe looks its listener
   * up every tick, and opening, setting up and closing a netlink socket each time was three
   * of the four syscalls a lookup made. Dumps open a socket each: one cut short would leave
   * the rest of its answer queued. */
  int lookup_fd;
  uint32_t lookup_seq;
} diag_ctx;

static __thread diag_ctx* t_ctx;

static void ctx_free(void* arg) {
  diag_ctx* ctx = arg;
  if (t_ctx == ctx) t_ctx = NULL;
  if (ctx->lookup_fd >= 0) close(ctx->lookup_fd);
  free(ctx->ents);
  free(ctx->slots);
  free(ctx);
}

/* The calling thread's state, created on first use (NULL: out of memory). */
static diag_ctx* ctx_get(napi_env env) {
  if (t_ctx != NULL) return t_ctx;
  diag_ctx* ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return NULL;
  ctx->lookup_fd = -1;
  if (napi_add_env_cleanup_hook(env, ctx_free, ctx) != napi_ok) {
    free(ctx);
    return NULL;
  }
  t_ctx = ctx;
  return ctx;
}

/* ---------------------------------------------------------------------------------------- */
/* Errors                                                                                   */

typedef struct {
  int err;          /* 0, an errno, or DIAG_ENAPI */
  const char* what; /* the step that failed */
} diag_err;

/* Throws Error{code: errno name, message: "sock_diag: <what>: <strerror>"}. */
static void throw_sys(napi_env env, int err, const char* what) {
  char msg[256];
  snprintf(msg, sizeof msg, "sock_diag: %s: %s", what, strerror(err));
  napi_throw_error(env, errno_name(err), msg);
}

static void throw_diag_err(napi_env env, const diag_err* e) {
  if (e->err == DIAG_ENAPI) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_error(env, NULL, "sock_diag: failed to build the result");
    return;
  }
  throw_sys(env, e->err, e->what);
}

/* ---------------------------------------------------------------------------------------- */
/* Netlink                                                                                  */

static int nl_open(int* out) {
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return errno;
  /* A dump is answered at once; the timeout only guards against a kernel that never answers
   * blocking the JS thread forever. */
  struct timeval tv = {.tv_sec = RECV_TIMEOUT_MS / 1000, .tv_usec = (RECV_TIMEOUT_MS % 1000) * 1000};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
    int err = errno;
    close(fd);
    return err;
  }
  *out = fd;
  return 0;
}

typedef int (*diag_msg_cb)(const struct inet_diag_msg* m, void* arg);

typedef struct {
  const void* bc; /* INET_DIAG_REQ_BYTECODE program, or NULL */
  size_t bc_len;  /* a multiple of 4, at most 64 */
} diag_filter;

/* Sends one SOCK_DIAG_BY_FAMILY request and calls cb for every inet_diag_msg of the reply: a
 * dump, or with `one` the request for that socket alone. Returns 0 at NLMSG_DONE (a dump) or
 * after the one socket, else an errno (or cb's nonzero result), with e->what set; ENOENT when
 * `one` names no socket. */
static int nl_query(diag_ctx* ctx, int fd, uint32_t seq, uint8_t family, uint32_t states,
                    const diag_filter* filter, const struct inet_diag_sockid* one, diag_msg_cb cb,
                    void* arg, diag_err* e) {
  const char* dump_what = one != NULL ? (family == AF_INET ? "AF_INET lookup" : "AF_INET6 lookup")
                                      : (family == AF_INET ? "AF_INET dump" : "AF_INET6 dump");
  _Alignas(8) unsigned char req[NLMSG_SPACE(sizeof(struct inet_diag_req_v2)) + NLA_HDRLEN + 64];
  memset(req, 0, sizeof req);
  struct nlmsghdr* nlh = (struct nlmsghdr*)req;
  struct inet_diag_req_v2* r = NLMSG_DATA(nlh);
  r->sdiag_family = family;
  r->sdiag_protocol = IPPROTO_TCP;
  r->idiag_ext = 0;
  r->idiag_states = states;
  if (one != NULL) r->id = *one;
  size_t len = NLMSG_LENGTH(sizeof *r);
  if (filter != NULL && filter->bc != NULL) {
    size_t at = NLMSG_ALIGN(len);
    struct nlattr* nla = (struct nlattr*)(req + at);
    nla->nla_type = INET_DIAG_REQ_BYTECODE;
    nla->nla_len = (uint16_t)(NLA_HDRLEN + filter->bc_len);
    memcpy(req + at + NLA_HDRLEN, filter->bc, filter->bc_len);
    len = at + NLA_ALIGN(nla->nla_len);
  }
  nlh->nlmsg_len = (uint32_t)len;
  nlh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
  nlh->nlmsg_flags = one != NULL ? NLM_F_REQUEST : NLM_F_REQUEST | NLM_F_DUMP;
  nlh->nlmsg_seq = seq;

  struct sockaddr_nl kernel;
  memset(&kernel, 0, sizeof kernel);
  kernel.nl_family = AF_NETLINK;
  for (;;) {
    ssize_t n = sendto(fd, req, len, 0, (struct sockaddr*)&kernel, sizeof kernel);
    if (n >= 0) break;
    if (errno == EINTR) continue;
    e->what = "sendto";
    return e->err = errno;
  }

  for (;;) {
    ssize_t n = recv(fd, ctx->rbuf, RBUF_SIZE, MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      e->what = "recv";
      return e->err = (errno == EAGAIN || errno == EWOULDBLOCK) ? ETIMEDOUT : errno;
    }
    if (n > RBUF_SIZE) {
      e->what = "recv (reply larger than the buffer)";
      return e->err = EMSGSIZE;
    }
    if (n == 0) {
      e->what = "recv (empty reply)";
      return e->err = EPROTO;
    }
    int left = (int)n;
    for (struct nlmsghdr* h = (struct nlmsghdr*)ctx->rbuf; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq) continue; /* not ours: an earlier query's, on a kept socket */
      if (h->nlmsg_type == NLMSG_DONE) {
        int status = 0;
        if (h->nlmsg_len >= NLMSG_LENGTH(sizeof status)) memcpy(&status, NLMSG_DATA(h), sizeof status);
        if (status < 0) {
          e->what = dump_what;
          return e->err = -status;
        }
        return 0;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
          e->what = dump_what;
          return e->err = EPROTO;
        }
        const struct nlmsgerr* ne = NLMSG_DATA(h);
        if (ne->error == 0) continue; /* an ACK */
        e->what = dump_what;
        return e->err = ne->error < 0 ? -ne->error : ne->error;
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
        e->what = dump_what;
        return e->err = EPROTO;
      }
      int rc = cb(NLMSG_DATA(h), arg);
      if (rc != 0) {
        e->what = "building the result";
        return e->err = rc;
      }
      if (one != NULL) return 0; /* the whole answer: no NLMSG_DONE follows */
    }
  }
}

/* Dumps AF_INET then AF_INET6 on one socket (families: bit 0 = AF_INET, bit 1 = AF_INET6). */
static int dump_tcp(napi_env env, unsigned families, uint32_t states, const diag_filter* filter,
                    diag_msg_cb cb, void* arg, diag_err* e) {
  diag_ctx* ctx = ctx_get(env);
  if (ctx == NULL) {
    e->what = "allocating state";
    return e->err = ENOMEM;
  }
  int fd = -1;
  int err = nl_open(&fd);
  if (err != 0) {
    e->what = "socket(AF_NETLINK, NETLINK_SOCK_DIAG)";
    return e->err = err;
  }
  err = 0;
  if (families & 1) err = nl_query(ctx, fd, 1, AF_INET, states, filter, NULL, cb, arg, e);
  if (err == 0 && (families & 2)) {
    err = nl_query(ctx, fd, 2, AF_INET6, states, filter, NULL, cb, arg, e);
    if (err == ENOENT) err = e->err = 0; /* no IPv6 diag handler: no IPv6 sockets */
  }
  close(fd);
  return err;
}

/* ---------------------------------------------------------------------------------------- */
/* Addresses                                                                                */

/* Copies the 4 or 16 address bytes of an inet_diag id field (an array of __be32). */
static void addr_bytes(uint8_t out[16], uint8_t family, const __be32* field) {
  memset(out, 0, 16);
  memcpy(out, field, family == AF_INET ? 4 : 16);
}

static bool is_v4_mapped(const uint8_t a[16]) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(a, prefix, 12) == 0;
}

/* out must hold INET6_ADDRSTRLEN bytes. */
static void format_addr(char* out, uint8_t family, const uint8_t a[16]) {
  if (family == AF_INET) {
    if (inet_ntop(AF_INET, a, out, INET6_ADDRSTRLEN) == NULL) out[0] = '\0';
    return;
  }
  if (is_v4_mapped(a)) {
    snprintf(out, INET6_ADDRSTRLEN, "::ffff:%u.%u.%u.%u", a[12], a[13], a[14], a[15]);
    return;
  }
  /* RFC 5952: lower-case hex without leading zeros; the first longest run of two or more
   * zero groups becomes "::" (the same rule as formatV6 in net-tcp.ts). */
  unsigned g[8];
  for (int i = 0; i < 8; i++) g[i] = ((unsigned)a[2 * i] << 8) | a[2 * i + 1];
  int best_at = -1, best_len = 1, run_at = -1;
  for (int i = 0; i <= 8; i++) {
    bool zero = i < 8 && g[i] == 0;
    if (zero) {
      if (run_at < 0) run_at = i;
    } else if (run_at >= 0) {
      if (i - run_at > best_len) {
        best_at = run_at;
        best_len = i - run_at;
      }
      run_at = -1;
    }
  }
  char* p = out;
  for (int i = 0; i < 8; i++) {
    if (i == best_at) {
      *p++ = ':';
      if (i == 0) *p++ = ':';
      i += best_len - 1;
      continue;
    }
    p += sprintf(p, "%x", g[i]);
    if (i < 7) *p++ = ':';
  }
  *p = '\0';
}

/* ---------------------------------------------------------------------------------------- */
/* Argument helpers                                                                         */

static bool is_nullish(napi_env env, napi_value v) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok) return false;
  return t == napi_undefined || t == napi_null;
}

/* Reads an optional integer in [lo, hi]: undefined/null leave *present false. Throws a
 * TypeError or RangeError and returns false when the value is unacceptable. */
static bool read_uint(napi_env env, napi_value v, const char* what, double lo, double hi,
                      bool* present, uint32_t* out) {
  *present = false;
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok) return false;
  if (t == napi_undefined || t == napi_null) return true;
  char msg[160];
  if (t != napi_number) {
    snprintf(msg, sizeof msg, "%s must be a number", what);
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
    return false;
  }
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok) return false;
  if (!(d >= lo && d <= hi) || d != (double)(uint32_t)d) {
    snprintf(msg, sizeof msg, "%s must be an integer from %.0f to %.0f", what, lo, hi);
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", msg);
    return false;
  }
  *present = true;
  *out = (uint32_t)d;
  return true;
}

static bool get_prop(napi_env env, napi_value obj, const char* name, napi_value* out) {
  return napi_get_named_property(env, obj, name, out) == napi_ok;
}

static bool set_u32(napi_env env, napi_value obj, const char* name, uint32_t v) {
  napi_value x;
  return napi_create_uint32(env, v, &x) == napi_ok && napi_set_named_property(env, obj, name, x) == napi_ok;
}

static bool set_str(napi_env env, napi_value obj, const char* name, const char* s) {
  napi_value x;
  return napi_create_string_utf8(env, s, NAPI_AUTO_LENGTH, &x) == napi_ok &&
         napi_set_named_property(env, obj, name, x) == napi_ok;
}

/* ---------------------------------------------------------------------------------------- */
/* diagListeners                                                                            */

typedef struct {
  napi_env env;
  napi_value arr;
  uint32_t n;
  bool has_port;
  uint16_t port;
} listen_acc;

static int on_listener(const struct inet_diag_msg* m, void* arg) {
  listen_acc* la = arg;
  if (m->idiag_state != ST_LISTEN) return 0;
  uint16_t port = ntohs(m->id.idiag_sport);
  if (la->has_port && port != la->port) return 0;
  uint8_t a[16];
  char text[INET6_ADDRSTRLEN];
  addr_bytes(a, m->idiag_family, m->id.idiag_src);
  format_addr(text, m->idiag_family, a);
  napi_env env = la->env;
  napi_value o;
  if (napi_create_object(env, &o) != napi_ok || !set_u32(env, o, "family", m->idiag_family == AF_INET ? 4 : 6) ||
      !set_str(env, o, "address", text) || !set_u32(env, o, "port", port) ||
      !set_u32(env, o, "inode", m->idiag_inode) ||
      /* For a listener, tcp_diag reports sk_ack_backlog and sk_max_ack_backlog here. */
      !set_u32(env, o, "acceptQueue", m->idiag_rqueue) || !set_u32(env, o, "backlog", m->idiag_wqueue) ||
      napi_set_element(env, la->arr, la->n, o) != napi_ok)
    return DIAG_ENAPI;
  la->n++;
  return 0;
}

static napi_value diag_listeners(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  listen_acc la = {.env = env};
  if (argc >= 1) {
    uint32_t port = 0;
    if (!read_uint(env, argv[0], "diagListeners: port", 0, 65535, &la.has_port, &port)) return NULL;
    la.port = (uint16_t)port;
  }
  if (napi_create_array(env, &la.arr) != napi_ok) return NULL;
  diag_err e = {0, NULL};
  if (dump_tcp(env, 3, 1u << ST_LISTEN, NULL, on_listener, &la, &e) != 0) {
    throw_diag_err(env, &e);
    return NULL;
  }
  return la.arr;
}

/* diagListener(address, port): the listener the kernel would hand a connection to that address
 * and port, or null. The family is the address text's: dotted IPv4 asks AF_INET, anything else
 * AF_INET6 (whose lookup of ::ffff:a.b.c.d is the kernel's IPv4 one). */
static napi_value diag_listener(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  napi_valuetype t = napi_undefined;
  if (argc >= 1 && napi_typeof(env, argv[0], &t) != napi_ok) return NULL;
  if (t != napi_string) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "diagListener: address must be a string");
    return NULL;
  }
  char text[INET6_ADDRSTRLEN + 1];
  size_t len = 0;
  if (napi_get_value_string_utf8(env, argv[0], text, sizeof text, &len) != napi_ok) return NULL;
  struct inet_diag_sockid id;
  memset(&id, 0, sizeof id);
  id.idiag_cookie[0] = id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  bool sane = len < INET6_ADDRSTRLEN && strlen(text) == len; /* not cut short, no NUL inside */
  bool v4 = sane && inet_pton(AF_INET, text, id.idiag_src) == 1;
  bool v6 = sane && !v4 && inet_pton(AF_INET6, text, id.idiag_src) == 1;
  if (!v4 && !v6) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", "diagListener: address must be an IPv4 or IPv6 address");
    return NULL;
  }
  uint8_t family = v4 ? AF_INET : AF_INET6;
  bool has_port = false;
  uint32_t port = 0;
  if (argc >= 2 && !read_uint(env, argv[1], "diagListener: port", 1, 65535, &has_port, &port)) return NULL;
  if (!has_port) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "diagListener: port must be a number");
    return NULL;
  }
  id.idiag_sport = htons((uint16_t)port);

  listen_acc la = {.env = env, .has_port = true, .port = (uint16_t)port};
  if (napi_create_array(env, &la.arr) != napi_ok) return NULL;
  diag_err e = {0, NULL};
  diag_ctx* ctx = ctx_get(env);
  if (ctx == NULL) {
    throw_sys(env, ENOMEM, "allocating state");
    return NULL;
  }
  if (ctx->lookup_fd < 0) {
    int err = nl_open(&ctx->lookup_fd);
    if (err != 0) {
      ctx->lookup_fd = -1;
      throw_sys(env, err, "socket(AF_NETLINK, NETLINK_SOCK_DIAG)");
      return NULL;
    }
  }
  /* A fresh seq per lookup, so an answer an earlier lookup left unread is passed over. */
  if (++ctx->lookup_seq == 0) ctx->lookup_seq = 1;
  int err = nl_query(ctx, ctx->lookup_fd, ctx->lookup_seq, family, 1u << ST_LISTEN, NULL, &id, on_listener, &la, &e);
  if (err != 0 && err != ENOENT) {
    /* Failed part way (a timeout, a reply we could not use): whatever state the socket is in
     * goes with it, and the next lookup opens another. ENOENT is a whole answer (no socket). */
    close(ctx->lookup_fd);
    ctx->lookup_fd = -1;
  }
  napi_value out;
  /* ENOENT: nothing there. on_listener also passes over a socket that is not listening. */
  if (err == ENOENT || (err == 0 && la.n == 0)) return napi_get_null(env, &out) == napi_ok ? out : NULL;
  if (err != 0) {
    throw_diag_err(env, &e);
    return NULL;
  }
  return napi_get_element(env, la.arr, 0, &out) == napi_ok ? out : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* diagCensus                                                                               */

typedef struct {
  bool on;
  bool v4; /* IPv4 address: also matches IPv4-mapped IPv6 remotes */
  bool has_port;
  uint16_t port;
  uint8_t addr[16];
} remote_filter;

typedef struct {
  diag_ctx* ctx;
  remote_filter rf;
  uint32_t max_remotes;
  uint32_t slot_mask;
  uint32_t total;
  uint32_t by_state[ST_NEW_SYN_RECV + 1];
  uint32_t distinct;
  uint32_t other;
} census_acc;

static bool remote_matches(const remote_filter* rf, uint8_t family, const uint8_t a[16], uint16_t port) {
  if (rf->has_port && port != rf->port) return false;
  if (rf->v4) {
    if (family == AF_INET) return memcmp(a, rf->addr, 4) == 0;
    return is_v4_mapped(a) && memcmp(a + 12, rf->addr, 4) == 0;
  }
  return family == AF_INET6 && memcmp(a, rf->addr, 16) == 0;
}

static uint32_t remote_hash(uint8_t family, const uint8_t a[16], uint16_t port) {
  uint32_t h = 0x811C9DC5u ^ ((uint32_t)family << 16) ^ port;
  for (int i = 0; i < 16; i += 4) {
    uint32_t w;
    memcpy(&w, a + i, 4);
    h = (h ^ w) * 0x85EBCA6Bu;
    h ^= h >> 13;
  }
  h *= 0xC2B2AE35u;
  return h ^ (h >> 16);
}

static int on_census(const struct inet_diag_msg* m, void* arg) {
  census_acc* c = arg;
  uint8_t family = m->idiag_family;
  uint8_t a[16];
  addr_bytes(a, family, m->id.idiag_dst);
  uint16_t port = ntohs(m->id.idiag_dport);
  if (c->rf.on && !remote_matches(&c->rf, family, a, port)) return 0;
  unsigned state = m->idiag_state;
  if (state == ST_NEW_SYN_RECV) state = ST_SYN_RECV;
  c->total++;
  if (state <= ST_NEW_SYN_RECV) c->by_state[state]++;
  /* Listeners (and anything else without a peer) have no remote. */
  if (state == ST_LISTEN || port == 0) return 0;

  diag_ctx* ctx = c->ctx;
  uint32_t s = remote_hash(family, a, port) & c->slot_mask;
  for (;;) {
    uint32_t idx = ctx->slots[s];
    if (idx == 0) break;
    remote_ent* r = &ctx->ents[idx - 1];
    if (r->port == port && r->family == family && memcmp(r->addr, a, 16) == 0) {
      r->count++;
      return 0;
    }
    s = (s + 1) & c->slot_mask;
  }
  if (c->distinct >= c->max_remotes) {
    c->other++;
    return 0;
  }
  remote_ent* r = &ctx->ents[c->distinct];
  memcpy(r->addr, a, 16);
  r->port = port;
  r->family = family;
  r->pad = 0;
  r->count = 1;
  ctx->slots[s] = ++c->distinct;
  return 0;
}

/* Makes room for max remotes (slots: a power of two, at least twice as many) and clears the
 * slots this call uses. Returns the slot mask, or 0 when out of memory. */
static uint32_t table_prepare(diag_ctx* ctx, uint32_t max) {
  uint32_t slots = 16;
  while (slots < 2 * max) slots <<= 1;
  if (ctx->ents_cap < max) {
    remote_ent* p = realloc(ctx->ents, (size_t)max * sizeof *p);
    if (p == NULL) return 0;
    ctx->ents = p;
    ctx->ents_cap = max;
  }
  if (ctx->slots_cap < slots) {
    uint32_t* p = realloc(ctx->slots, (size_t)slots * sizeof *p);
    if (p == NULL) return 0;
    ctx->slots = p;
    ctx->slots_cap = slots;
  }
  memset(ctx->slots, 0, (size_t)slots * sizeof *ctx->slots);
  return slots - 1;
}

/* Ranking: count descending, then family (IPv4 first), address bytes, port. */
static bool ranks_before(const remote_ent* a, const remote_ent* b) {
  if (a->count != b->count) return a->count > b->count;
  if (a->family != b->family) return a->family < b->family;
  int c = memcmp(a->addr, b->addr, 16);
  if (c != 0) return c < 0;
  return a->port < b->port;
}

/* Reads opts.remote into rf. Returns false after throwing. */
static bool read_remote(napi_env env, napi_value v, remote_filter* rf) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok) return false;
  if (t == napi_undefined || t == napi_null) return true;
  if (t != napi_object) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "diagCensus: remote must be an object");
    return false;
  }
  napi_value addr_v, port_v;
  if (!get_prop(env, v, "address", &addr_v) || !get_prop(env, v, "port", &port_v)) return false;
  if (napi_typeof(env, addr_v, &t) != napi_ok) return false;
  if (t != napi_string) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "diagCensus: remote.address must be a string");
    return false;
  }
  char text[INET6_ADDRSTRLEN + 1];
  size_t len = 0;
  if (napi_get_value_string_utf8(env, addr_v, text, sizeof text, &len) != napi_ok) return false;
  memset(rf->addr, 0, sizeof rf->addr);
  bool sane = len < INET6_ADDRSTRLEN && strlen(text) == len; /* not cut short, no NUL inside */
  if (sane && inet_pton(AF_INET, text, rf->addr) == 1) {
    rf->v4 = true;
  } else if (sane && inet_pton(AF_INET6, text, rf->addr) == 1) {
    rf->v4 = false;
    if (is_v4_mapped(rf->addr)) { /* ::ffff:a.b.c.d means the IPv4 address */
      memmove(rf->addr, rf->addr + 12, 4);
      memset(rf->addr + 4, 0, 12);
      rf->v4 = true;
    }
  } else {
    napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE",
                          "diagCensus: remote.address must be an IPv4 or IPv6 address");
    return false;
  }
  uint32_t port = 0;
  if (!read_uint(env, port_v, "diagCensus: remote.port", 0, 65535, &rf->has_port, &port)) return false;
  rf->port = (uint16_t)port;
  rf->on = true;
  return true;
}

static napi_value diag_census(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;

  uint32_t states = STATES_ALL, top = TOP_DEFAULT, max_remotes = REMOTES_DEFAULT;
  remote_filter rf;
  memset(&rf, 0, sizeof rf);
  if (argc >= 1 && !is_nullish(env, argv[0])) {
    napi_valuetype t;
    if (napi_typeof(env, argv[0], &t) != napi_ok) return NULL;
    if (t != napi_object) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "diagCensus: options must be an object");
      return NULL;
    }
    napi_value v;
    bool present;
    uint32_t x;
    if (!get_prop(env, argv[0], "states", &v)) return NULL;
    if (!read_uint(env, v, "diagCensus: states", 0, STATES_ALLOWED, &present, &x)) return NULL;
    if (present) states = x;
    if (!get_prop(env, argv[0], "top", &v)) return NULL;
    if (!read_uint(env, v, "diagCensus: top", 0, TOP_MAX, &present, &x)) return NULL;
    if (present) top = x;
    if (!get_prop(env, argv[0], "maxRemotes", &v)) return NULL;
    if (!read_uint(env, v, "diagCensus: maxRemotes", 1, REMOTES_MAX, &present, &x)) return NULL;
    if (present) max_remotes = x;
    if (!get_prop(env, argv[0], "remote", &v)) return NULL;
    if (!read_remote(env, v, &rf)) return NULL;
  }

  diag_ctx* ctx = ctx_get(env);
  uint32_t mask = ctx == NULL ? 0 : table_prepare(ctx, max_remotes);
  if (mask == 0) {
    throw_sys(env, ENOMEM, "allocating the remote table");
    return NULL;
  }
  census_acc c;
  memset(&c, 0, sizeof c);
  c.ctx = ctx;
  c.rf = rf;
  c.max_remotes = max_remotes;
  c.slot_mask = mask;

  if ((states & STATES_ALL) != 0) {
    /* A remote filter also goes to the kernel as an INET_DIAG_BC_D_COND program, so that
     * sockets to other remotes are skipped before they are copied out. Its semantics are
     * those of remote_matches(), which still checks every reply. */
    struct {
      struct inet_diag_bc_op op;
      struct inet_diag_hostcond cond;
      uint8_t addr[16];
    } bc;
    diag_filter filter = {NULL, 0};
    unsigned families = 3;
    if (rf.on) {
      size_t alen = rf.v4 ? 4 : 16;
      size_t blen = sizeof bc.op + sizeof bc.cond + alen;
      memset(&bc, 0, sizeof bc);
      bc.op.code = INET_DIAG_BC_D_COND;
      bc.op.yes = (unsigned char)blen;     /* match: jump to the end = accept */
      bc.op.no = (unsigned short)(blen + 4); /* no match: jump past the end = reject */
      bc.cond.family = rf.v4 ? AF_INET : AF_INET6;
      bc.cond.prefix_len = (uint8_t)(alen * 8);
      bc.cond.port = rf.has_port ? rf.port : -1;
      memcpy(bc.addr, rf.addr, alen);
      filter.bc = &bc;
      filter.bc_len = blen;
      if (!rf.v4) families = 2; /* an IPv6 remote is never on an AF_INET socket */
    }
    diag_err e = {0, NULL};
    if (dump_tcp(env, families, states, &filter, on_census, &c, &e) != 0) {
      throw_diag_err(env, &e);
      return NULL;
    }
  }

  /* Top N by insertion into a small sorted array. */
  uint32_t best[TOP_MAX];
  uint32_t nbest = 0;
  for (uint32_t i = 0; i < c.distinct && top > 0; i++) {
    const remote_ent* r = &ctx->ents[i];
    if (nbest == top && !ranks_before(r, &ctx->ents[best[nbest - 1]])) continue;
    uint32_t j = nbest < top ? nbest++ : nbest - 1;
    while (j > 0 && ranks_before(r, &ctx->ents[best[j - 1]])) {
      best[j] = best[j - 1];
      j--;
    }
    best[j] = i;
  }

  napi_value out, by_state, by_remote;
  if (napi_create_object(env, &out) != napi_ok || !set_u32(env, out, "total", c.total) ||
      napi_create_object(env, &by_state) != napi_ok || napi_create_array_with_length(env, nbest, &by_remote) != napi_ok)
    return NULL;
  for (unsigned st = 1; st <= ST_MAX_NAMED; st++)
    if (!set_u32(env, by_state, STATE_NAMES[st], c.by_state[st])) return NULL;
  for (uint32_t i = 0; i < nbest; i++) {
    const remote_ent* r = &ctx->ents[best[i]];
    char text[INET6_ADDRSTRLEN];
    format_addr(text, r->family, r->addr);
    napi_value o;
    if (napi_create_object(env, &o) != napi_ok || !set_str(env, o, "address", text) ||
        !set_u32(env, o, "port", r->port) || !set_u32(env, o, "count", r->count) ||
        napi_set_element(env, by_remote, i, o) != napi_ok)
      return NULL;
  }
  if (napi_set_named_property(env, out, "byState", by_state) != napi_ok ||
      napi_set_named_property(env, out, "byRemote", by_remote) != napi_ok ||
      !set_u32(env, out, "remotesDistinct", c.distinct) || !set_u32(env, out, "otherRemotes", c.other))
    return NULL;
  return out;
}

/* ---------------------------------------------------------------------------------------- */
/* diagAvailable                                                                            */

static int on_ignore(const struct inet_diag_msg* m, void* arg) {
  (void)m;
  (void)arg;
  return 0;
}

static napi_value diag_available(napi_env env, napi_callback_info info) {
  (void)info;
  diag_err e = {0, NULL};
  bool ok = dump_tcp(env, 1, 1u << ST_LISTEN, NULL, on_ignore, NULL, &e) == 0;
  napi_value out;
  if (napi_get_boolean(env, ok, &out) != napi_ok) return NULL;
  return out;
}

napi_status diag_register(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"diagListeners", NULL, diag_listeners, NULL, NULL, NULL, napi_enumerable, NULL},
      {"diagListener", NULL, diag_listener, NULL, NULL, NULL, napi_enumerable, NULL},
      {"diagCensus", NULL, diag_census, NULL, NULL, NULL, napi_enumerable, NULL},
      {"diagAvailable", NULL, diag_available, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
