#ifndef VSOCKDIAG_READ_ALL_H
#define VSOCKDIAG_READ_ALL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

/* Reads exactly len bytes at the fd's current offset, again after EINTR; false on an error or
 * an early end. For the small whole-file reads done before the probe's first frame. */
static inline bool read_all(int fd, uint8_t *to, size_t len) {
  while (len > 0) {
    ssize_t n = read(fd, to, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    to += n;
    len -= (size_t)n;
  }
  return true;
}

#endif
