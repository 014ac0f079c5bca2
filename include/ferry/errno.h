/*
 * ferry error codes.
 *
 * Every ferry call returns 0 or one of these negative values.  The
 * errno-derived ones equal -errno, so `ret == -EINVAL` works too; ferry's
 * own codes start at -1000, well clear of every errno value.  One X-macro
 * table generates both the enum and the strings of ferry_strerror().
 */
#ifndef FERRY_ERRNO_H
#define FERRY_ERRNO_H

#include <errno.h>

#define FERRY__OWN_ERRNO_BASE 1000

/* X(name, value, description) */
#define FERRY_ERRNO_MAP(X)                                                    \
    X(EINVAL, -EINVAL, "invalid argument")                                   \
    X(ENOMEM, -ENOMEM, "out of memory")                                      \
    X(ENOSPC, -ENOSPC, "buffer too small")                                   \
    X(EBUSY, -EBUSY, "still in use by requests in flight")                   \
    X(EAGAIN, -EAGAIN, "resource temporarily unavailable")                   \
    X(EINPROGRESS, -EINPROGRESS, "request in progress")                      \
    X(ETIMEDOUT, -ETIMEDOUT, "deadline passed")                              \
    X(ECANCELED, -ECANCELED, "request cancelled")                            \
    X(ENOTSUP, -ENOTSUP, "not supported")                                    \
    X(ENOENT, -ENOENT, "not found")                                          \
    X(ERANGE, -ERANGE, "outside the registered region")                      \
    X(EOVERFLOW, -EOVERFLOW, "value too large")                              \
    X(EIO, -EIO, "I/O error reported by the provider")                       \
    X(ECONNRESET, -ECONNRESET, "connection to the peer lost")                \
    X(EHOSTUNREACH, -EHOSTUNREACH, "peer unreachable")                       \
    X(EPROTO, -EPROTO, "protocol error")                                     \
    X(EEXIST, -EEXIST, "already exists")                                     \
    X(ENOPROVIDER, -(FERRY__OWN_ERRNO_BASE + 1),                             \
      "no usable libfabric provider")                                        \
    X(EBLOB, -(FERRY__OWN_ERRNO_BASE + 2),                                   \
      "malformed, truncated or corrupted blob")                              \
    X(EINCOMPAT, -(FERRY__OWN_ERRNO_BASE + 3),                               \
      "blob comes from an incompatible peer")                                \
    X(EPROVIDER, -(FERRY__OWN_ERRNO_BASE + 4),                               \
      "libfabric provider call failed")                                      \
    X(EHANDLE, -(FERRY__OWN_ERRNO_BASE + 5),                                 \
      "handle is of the wrong type or belongs to another context")             \
    X(EPEERDEAD, -(FERRY__OWN_ERRNO_BASE + 6),                               \
      "peer declared dead or unreachable")                                   \
    X(EABORTED, -(FERRY__OWN_ERRNO_BASE + 7),                                \
      "the sender abandoned the notified transfer")

enum ferry_errno {
#define FERRY__ERRNO_ENUM(name, value, text) FERRY_##name = (value),
    FERRY_ERRNO_MAP(FERRY__ERRNO_ENUM)
#undef FERRY__ERRNO_ENUM
};

#endif /* FERRY_ERRNO_H */
