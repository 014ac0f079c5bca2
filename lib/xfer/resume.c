/*
 * Operations whose connection dropped under them (resume.h).
 */
#include "xfer/resume.h"

#include <stdio.h>

#include <rdma/fi_errno.h>

#include "xfer/live.h"
#include "xfer/notify.h"
#include "xfer/stage.h"

/* Puts op on its peer's list of held operations. */
static void hold(struct ferry__xfer *x, struct ferry__op *op)
{
    op->next_free = op->peer->live.held;
    op->peer->live.held = op;
    x->live.held_ops++;
}

void ferry__resume_hold(struct ferry__xfer *x, struct ferry__op *op)
{
    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    /* Whatever was checked before the drop is checked again. */
    op->key_checked = false;
    x->live.interrupted++;
    hold(x, op);
}

/* Done with op without a completion: its slot goes back, a staged
 * chunk's buffer too (err says it failed), and its request is looked at
 * by the settling that follows (it may retire). */
static void release(struct ferry__xfer *x, struct ferry__op *op, int err)
{
    struct ferry_req *req = op->req;
    bool staged = op->slot != NULL;

    ferry__op_give_back(ferry__txq_of(x, op->rail), op);
    /* The slot is still the op's until this call. */
    if (staged)
        ferry__stage_rma_done(op, err);
    ferry__req_list_move(&x->req.active, req);
}

/* Ends op's request with status, the sentence naming op first, and
 * releases op. */
static void end_with(struct ferry__xfer *x, struct ferry__op *op, int status,
                     const char *why)
{
    char what[192];

    ferry__op_describe(op, what, sizeof(what));
    ferry__req_end_at(op->req, op->first_item, status, "%s: %s", what, why);
    release(x, op, status);
}

/* Whether op's peer is pushed back on op's rail (op.h): nothing goes
 * there until the rail's epoch moves. */
static bool pushed_back(struct ferry__xfer *x, const struct ferry__op *op)
{
    return op->peer->live.blocked_epoch[op->rail->index] ==
           ferry__txq_of(x, op->rail)->epoch;
}

/* Posts a read of op's pulse slot on the peer's first rail; false when
 * the rail takes nothing now. */
static bool post_check(struct ferry__xfer *x, struct ferry__op *op)
{
    struct ferry_peer *peer = op->peer;
    struct ferry__rail *rail = ferry__peer_rail(peer, 0);
    struct ferry__op *chk = ferry__op_slot_control(x, peer, rail);
    ssize_t ret;

    if (chk == NULL)
        return false;
    ret = ferry__check_post(peer, rail, chk, op->rmem->slot);
    if (ret == -FI_EAGAIN) {
        ferry__op_pushed_back(x, peer, rail);
        return false;
    }
    if (ret != 0) {
        end_with(x, op, ferry__error_from_fi((int)ret),
                 "its connection dropped, and reading the peer's pulse to "
                 "check its key could not be posted");
        return true;
    }
    ferry__op_take(ferry__txq_of(x, rail), chk, op->req, peer,
                   FERRY__OP_CHECK, 0);
    chk->checked = op;
    return true;
}

/* Posts op again; false when the provider pushed back. */
static bool post_again(struct ferry__xfer *x, struct ferry__op *op)
{
    ssize_t ret;

    if (pushed_back(x, op))
        return false;
    ret = ferry__rma_again(op);
    if (ret == -FI_EAGAIN) {
        ferry__op_pushed_back(x, op->peer, op->rail);
        return false;
    }
    if (ret != 0) {
        end_with(x, op, ferry__error_from_fi((int)ret),
                 "its connection dropped, and posting it again over a new "
                 "one failed");
        return true;
    }
    op->posted_again = true;
    op->answer = ferry__shm_mend_took(&op->rail->mend);
    x->live.reposted++;
    return true;
}

/*
 * Whether the peer may have been told about op's data already: op carries
 * its request's notification, or the notification went on its own.  The
 * peer's application may then have used the region, and a second write
 * of the same bytes would land on what it wrote since.
 */
static bool told(const struct ferry__op *op)
{
    return op->notifies || (op->req->notify != FERRY__NOTIFY_NONE &&
                            op->req->notify != FERRY__NOTIFY_PENDING);
}

/*
 * One held operation of a peer that answers again (resume.h says what
 * becomes of each kind).  True when it is dealt with; false when the
 * rail takes nothing now: the caller holds it again.
 */
static bool resolve(struct ferry__xfer *x, struct ferry__op *op)
{
    if (op->req->status != FERRY_EINPROGRESS) {
        release(x, op, op->req->status); /* ended meanwhile */
        return true;
    }
    if (op->kind != FERRY__OP_WRITE && op->kind != FERRY__OP_READ) {
        end_with(x, op, FERRY_ECONNRESET,
                 "the connection to the peer dropped while it was in "
                 "flight; the peer answers again over a new connection, but "
                 "whether this reached it first is unknown, so it is not "
                 "sent twice");
        return true;
    }
    if (!op->key_checked && op->rmem->slot != FERRY__PULSE_NO_SLOT)
        return post_check(x, op);
    if (told(op)) {
        end_with(x, op, FERRY_ECONNRESET,
                 "the connection to the peer dropped while it was in "
                 "flight; the peer answers again over a new connection and "
                 "still has the region, but the request's notification may "
                 "have reached it first, so the data is not written twice");
        return true;
    }
    if (op->posted_again && !op->key_checked) {
        end_with(x, op, FERRY_ECONNRESET,
                 "the connection to the peer dropped under it twice, while "
                 "the peer answers: its side may refuse it (a region it no "
                 "longer has), and the key blob carries no pulse slot to "
                 "check that by; import the region's blob again");
        return true;
    }
    return post_again(x, op);
}

void ferry__resume_checked(struct ferry__xfer *x, struct ferry__op *chk,
                           int err, const char *why)
{
    struct ferry__op *op = chk->checked;
    uint64_t word = ferry__ping_answer(chk);

    /* op is still taken, so the peer keeps an operation out: giving chk
     * back cannot free a removed peer. */
    ferry__op_give_back(ferry__txq_of(x, chk->rail), chk);
    if (err != 0 && ferry__live_holds(x, op->peer, err)) {
        ferry__live_dropped(x, op->peer, why); /* dropped again */
        ferry__resume_hold(x, op);
        return;
    }
    if (err != 0) {
        char failed[256];

        snprintf(failed, sizeof(failed),
                 "its connection dropped, and reading the peer's pulse to "
                 "check its key failed: %s",
                 why);
        end_with(x, op, err, failed);
        return;
    }
    ferry__live_heard(x, op->peer); /* the answer is a sign of life */
    if (op->req->status == FERRY_EINPROGRESS &&
        word != op->rmem->generation) {
        /* Refused, so the notification it carried never arrived: the
         * peer is sent the request's abort instead (xfer.c). */
        if (op->notifies)
            op->req->notify = FERRY__NOTIFY_PENDING;
        end_with(x, op, FERRY_ESTALE, ferry__rmem_gone_why());
        return;
    }
    op->key_checked = true;
    if (!resolve(x, op))
        hold(x, op);
}

void ferry__resume_pass(struct ferry__xfer *x)
{
    struct ferry_peer *p, *next;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    if (x->live.held_ops == 0)
        return;
    for (p = x->reg.peers; p != NULL; p = next) {
        struct ferry__op *op = p->live.held;
        bool gone = ferry__live_gone(p);

        next = p->next;
        if (op == NULL || (p->live.dropped && !gone))
            continue; /* nothing held, or no answer yet */
        p->live.held = NULL;
        while (op != NULL) {
            struct ferry__op *later = op->next_free;

            x->live.held_ops--;
            if (gone)
                release(x, op, FERRY_EPEERDEAD); /* its request ended so */
            else if (!resolve(x, op))
                hold(x, op);
            op = later;
        }
    }
}
