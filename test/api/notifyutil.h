/*
 * Helpers of the notify suites (test/api/check_notify.c and
 * test/unit/check_notify.c): requests that carry or are a notification,
 * waited for and polled, on the public API only.
 */
#ifndef FERRY_NOTIFYUTIL_H
#define FERRY_NOTIFYUTIL_H

#include "testutil.h"

/* How long a test waits for something that should take milliseconds. */
#define PATIENCE_MS 30000

/* Waits for req (bounded), asserts it succeeded, frees it. */
void req_ok(ferry_req_t *req, const char *what);
/* A write of [x->lbuf + loff, +len) to roff carrying {id, value}. */
ferry_req_t *notified_write(struct tu_fx *x, size_t loff, uint64_t roff,
                            size_t len, uint64_t id, uint64_t value);
/* A notification alone. */
ferry_req_t *notify_only(ferry_peer_t *peer, uint64_t id, uint64_t value);
/* Polls ctx until at least one notification comes (bounded); returns how
 * many were moved into out. */
int poll_some(ferry_context_t *ctx, struct ferry_notification *out,
              size_t max, const char *what);

#endif /* FERRY_NOTIFYUTIL_H */
