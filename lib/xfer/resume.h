/*
 * Operations whose connection dropped under them.
 *
 * tcp;ofi_rxm (libfabric 1.17) answers an operation its peer's side
 * refuses (a stale key, where the peer's pulse table is not mapped here
 * to catch it before posting: fabric/pulse.h) by dropping the connection,
 * and flushes every operation to that peer on it as if the peer had died
 * (FI_ECANCELED, with an errno of no meaning).  Such an operation is held,
 * its request still running, while liveness asks the peer for an answer
 * over a new connection (xfer/live.h, ferry__live_dropped).
 *
 * - The peer is declared: the held operations go back, and their
 *   requests end as liveness ended them.
 * - The peer answers: each held write or read has its key checked by a
 *   read of the peer's pulse slot (FERRY__OP_CHECK).  Its region gone:
 *   its request ends with FERRY_ESTALE, which nothing else pays for.  Its
 *   region there: it is posted again -- a write of the same bytes to the
 *   same place, or a read, is the same operation twice.  Where the key
 *   cannot be checked (its blob has no slot) it is posted again once.
 * - Messages (notifications, syncs, aborts) are not idempotent, and
 *   whether they reached the peer before the drop is unknown; nor is a
 *   write posted again harmless once its request's notification may have
 *   reached the peer (riding on a write, or sent on its own), which may
 *   have used the region since.  Their requests end with
 *   FERRY_ECONNRESET, saying so, unless the key check finds the region
 *   gone.
 *
 * All of it runs with the lock held.
 */
#ifndef FERRY_XFER_RESUME_H
#define FERRY_XFER_RESUME_H

#include "xfer/op.h"

/* op came back from a dropped connection (ferry__live_holds said so):
 * it is held on its peer's list. */
void ferry__resume_hold(struct ferry__xfer *x, struct ferry__op *op);

/* A key check came back (err 0: chk's message holds the slot's word);
 * gives chk back.  The caller settles chk's request. */
void ferry__resume_checked(struct ferry__xfer *x, struct ferry__op *chk,
                           int err, const char *why);

/* Once per progress call: the held operations of peers that answered
 * again are checked or posted again, those of declared peers go back;
 * their requests end up on the active list, which the call then settles.
 * Returns at once while nothing is held. */
void ferry__resume_pass(struct ferry__xfer *x);

#endif /* FERRY_XFER_RESUME_H */
