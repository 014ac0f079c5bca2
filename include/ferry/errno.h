/*
 * ferry error codes.
 *
 * Every ferry call returns 0 or one of these negative values.  The
 * errno-derived ones equal -errno, so `ret == -EINVAL` works too; ferry's
 * own codes start at -1000, well clear of every errno value.  One X-macro
 * table generates the enum, the strings of ferry_strerror() and the
 * exception classes of bindings (kind: ferry.TimeoutError in Python).
 */
#ifndef FERRY_ERRNO_H
#define FERRY_ERRNO_H

#include <errno.h>

#define FERRY__OWN_ERRNO_BASE 1000

/* X(name, value, kind, description) */
#define FERRY_ERRNO_MAP(X)                                                    \
    X(EINVAL, -EINVAL, InvalidArgument, "invalid argument")                   \
    X(ENOMEM, -ENOMEM, OutOfMemory, "out of memory")                          \
    X(ENOSPC, -ENOSPC, NoSpace, "buffer too small")                           \
    X(EBUSY, -EBUSY, Busy, "still in use by requests in flight")              \
    X(EAGAIN, -EAGAIN, TryAgain, "resource temporarily unavailable")          \
    X(EINPROGRESS, -EINPROGRESS, InProgress, "request in progress")           \
    X(ETIMEDOUT, -ETIMEDOUT, Timeout, "deadline passed")                      \
    X(ECANCELED, -ECANCELED, Canceled, "request cancelled")                   \
    X(ENOTSUP, -ENOTSUP, NotSupported, "not supported")                       \
    X(ENOENT, -ENOENT, NotFound, "not found")                                 \
    X(ERANGE, -ERANGE, Range, "outside the registered region")                \
    X(EOVERFLOW, -EOVERFLOW, Overflow, "value too large")                     \
    X(EIO, -EIO, IO, "I/O error reported by the provider")                    \
    X(ECONNRESET, -ECONNRESET, ConnectionReset,                               \
      "connection to the peer lost")                                          \
    X(EHOSTUNREACH, -EHOSTUNREACH, HostUnreachable, "peer unreachable")       \
    X(EPROTO, -EPROTO, Protocol, "protocol error")                            \
    X(EEXIST, -EEXIST, Exists, "already exists")                              \
    X(ESTALE, -ESTALE, Stale,                                                 \
      "the peer no longer has the remote region registered")                  \
    X(ENOPROVIDER, -(FERRY__OWN_ERRNO_BASE + 1), NoProvider,                  \
      "no usable libfabric provider")                                         \
    X(EBLOB, -(FERRY__OWN_ERRNO_BASE + 2), Blob,                              \
      "malformed, truncated or corrupted blob")                               \
    X(EINCOMPAT, -(FERRY__OWN_ERRNO_BASE + 3), Incompatible,                  \
      "blob comes from an incompatible peer")                                 \
    X(EPROVIDER, -(FERRY__OWN_ERRNO_BASE + 4), Provider,                      \
      "libfabric provider call failed")                                       \
    X(EHANDLE, -(FERRY__OWN_ERRNO_BASE + 5), Handle,                          \
      "handle is of the wrong type or belongs to another context")            \
    X(EPEERDEAD, -(FERRY__OWN_ERRNO_BASE + 6), PeerDead,                      \
      "peer declared dead or unreachable")                                    \
    X(EABORTED, -(FERRY__OWN_ERRNO_BASE + 7), Aborted,                        \
      "the sender abandoned the notified transfer")

enum ferry_errno {
#define FERRY__ERRNO_ENUM(name, value, kind, text) FERRY_##name = (value),
    FERRY_ERRNO_MAP(FERRY__ERRNO_ENUM)
#undef FERRY__ERRNO_ENUM
};

#endif /* FERRY_ERRNO_H */
