/*
 * Staging: device memory on a domain that cannot register it moves
 * through pinned host buffers, copies overlapping the network (stage.c
 * says how), and on the target side the copies from host mirrors to the
 * device.  Everything but ferry__stage_ensure runs with the lock held.
 */
#ifndef FERRY_XFER_STAGE_H
#define FERRY_XFER_STAGE_H

#include "xfer/op.h"

/* Staging buffers and streams for device `ordinal` exist (no lock held):
 * the reg part's prepare_staging. */
int ferry__stage_ensure(ferry_context_t *ctx, int ordinal);
/*
 * Starts the next chunk of the request's current item (at req->cur_off),
 * whose local memory is staged: returns the bytes started, 0 when no
 * buffer or operation slot is free now (progress retries), or -1 when it
 * failed and ended the request.
 */
ssize_t ferry__stage_post(struct ferry_req *req,
                          const struct ferry_iov *item);
/*
 * Moves staged chunks whose copies finished on; a request whose chunk
 * finished is settled by the caller's pass over the active requests.
 * True when no mirror copy is queued any more, so the notifications held
 * back for them may be delivered (ferry__notify_release_held).
 */
bool ferry__stage_progress(struct ferry__xfer *x);
/* An RMA of a staged chunk came back (from ferry__op_complete). */
void ferry__stage_rma_done(struct ferry__op *op, int err);
void ferry__stage_destroy(struct ferry__xfer *x);
/*
 * Target side: a peer wrote [off, off + len) of the mirror of region
 * mirror_id; queues its copy to the device.
 */
void ferry__mirror_sync(struct ferry__xfer *x, uint64_t mirror_id,
                        uint64_t off, uint64_t len);
/* Whether mirror copies are still queued (notifications wait for them). */
bool ferry__mirror_busy(struct ferry__xfer *x);

#endif /* FERRY_XFER_STAGE_H */
