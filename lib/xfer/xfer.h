/*
 * Transfers: ferry_write, ferry_read, prepared posts and notifications
 * become requests (op.h), posted in chunks over the rails as operation
 * slots allow, settled as their operations come back.  All with the
 * lock held.
 */
#ifndef FERRY_XFER_XFER_H
#define FERRY_XFER_XFER_H

#include "xfer/op.h"

/* ferry_write and ferry_notify_send for ferry's own requests (the
 * fan-out, fan.c): notification ids from FERRY_NOTIFY_ID_RESERVED up
 * are allowed.  Caller holds no lock. */
int ferry__write_own(ferry_peer_t *peer, const struct ferry_iov *iov,
                     size_t n, const struct ferry_xfer_opts *opts,
                     ferry_req_t **req);
int ferry__notify_send_own(ferry_peer_t *peer, uint64_t id, uint64_t value,
                           const struct ferry_xfer_opts *opts,
                           ferry_req_t **req);
/* Posts what the request still has to post, as far as slots allow. */
void ferry__req_post_pending(struct ferry_req *req);
/* Marks it done if all is posted and back; retires it if ended and idle;
 * otherwise puts it on the list it now belongs on (part.h). */
void ferry__req_settle(struct ferry_req *req);
/* Posts blocked requests, in order, while the rails take them (part.h). */
void ferry__reqs_unblock(struct ferry__xfer *x);
/* Frees the requests ferry_req_close gave back without the lock. */
void ferry__reqs_free_given_back(struct ferry__xfer *x);
/* An operation came back, with err 0 or the error and its sentence. */
void ferry__op_complete(struct ferry__op *op, int err, const char *why);
/* Frees every request (context destruction, after the endpoints closed). */
void ferry__reqs_destroy(struct ferry__xfer *x);

#endif /* FERRY_XFER_XFER_H */
