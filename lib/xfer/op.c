/*
 * Requests and operations (op.h): operation slots per rail, posting one
 * RMA, ending a request.
 */
#include "xfer/op.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_rma.h>

#include "base/clock.h"

int ferry__txq_open(struct ferry__xfer *x, struct ferry__rail *rail)
{
    struct ferry__txq *tx = ferry__txq_of(x, rail);
    size_t depth = ferry__rail_ops_max(&x->reg.fab);

    tx->ops = calloc(depth, sizeof(*tx->ops));
    if (tx->ops == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for %zu op slots",
                            depth);
    for (size_t i = 0; i < depth; i++) {
        tx->ops[i].rail = rail;
        tx->ops[i].next_free = i + 1 < depth ? &tx->ops[i + 1] : NULL;
    }
    tx->free_ops = &tx->ops[0];
    tx->epoch = 1; /* 0 in a peer's blocked_epoch: never pushed back */
    return 0;
}

void ferry__txq_close(struct ferry__xfer *x, struct ferry__rail *rail)
{
    struct ferry__txq *tx = ferry__txq_of(x, rail);

    free(tx->ops);
    memset(tx, 0, sizeof(*tx));
}

void ferry__op_take(struct ferry__txq *tx, struct ferry__op *op,
                    struct ferry_req *req, struct ferry_peer *peer,
                    enum ferry__op_kind kind, size_t len)
{
    FERRY__ASSERT_LOCKED(&ferry__fabric_of(peer->ctx)->lock);
    tx->free_ops = op->next_free;
    op->req = req;
    op->peer = peer;
    peer->live.rail_ops[op->rail->index]++;
    op->slot = NULL;
    op->notifies = false;
    op->key_checked = false;
    op->posted_again = false;
    op->checked = NULL;
    op->answer = ferry__shm_mend_took(&op->rail->mend);
    op->kind = kind;
    op->len = len;
    op->first_item = op->last_item = FERRY__NO_ITEM;
    if ((kind == FERRY__OP_WRITE || kind == FERRY__OP_READ) && !op->cover)
        tx->rma_ops_posted++;
    tx->ops_in_flight++;
    if (req != NULL)
        req->ops_in_flight++;
    /* A peer of this host asleep on its bell must progress for the
     * operation to land (fabric/pulse.h). */
    ferry__pulse_ring(&peer->pulse);
}

/* One more of peer's operations on rail r came back: its window, if the
 * provider set one, doubles every FERRY__WINDOW_GROWS_AFTER (op.h). */
static void window_age(struct ferry_peer *peer, unsigned r)
{
    unsigned *window = &peer->live.window[r];

    if (*window == 0 ||
        ++peer->live.window_age[r] < FERRY__WINDOW_GROWS_AFTER)
        return;
    peer->live.window_age[r] = 0;
    *window = *window >= FERRY__WINDOW_FORGOTTEN ? 0 : *window * 2;
}

void ferry__op_give_back(struct ferry__txq *tx, struct ferry__op *op)
{
    struct ferry_peer *peer = op->peer;
    unsigned r = op->rail->index;

    if (op->req != NULL)
        op->req->ops_in_flight--;
    op->req = NULL;
    op->peer = NULL;
    op->covered = op->cover = false;
    op->answer = 0;
    peer->live.rail_ops[r]--;
    window_age(peer, r);
    if (peer->removed && ferry__peer_ops_out(peer) == 0)
        ferry__peer_free(ferry__reg_of(peer->ctx), peer);
    op->next_free = tx->free_ops;
    tx->free_ops = op;
    tx->ops_in_flight--;
}

/* Posts the RMA op's fields describe, with op->kind and op->notifies. */
static ssize_t rma_issue(struct ferry__op *op, size_t len)
{
    struct ferry__rail *rail = op->rail;
    uint64_t raddr = ferry__rma_addr(op->rmem, op->roff);
    uint64_t key = op->rmem->key[rail->index];
    fi_addr_t dest = op->peer->fi_addr[rail->index];

    if (op->notifies)
        return fi_writedata(rail->ep, op->local, len, op->desc, op->data,
                            dest, raddr, key, &op->fi_ctx);
    if (op->covered) {
        struct iovec iov = {.iov_base = op->local, .iov_len = len};
        struct fi_rma_iov rma = {.addr = raddr, .len = len, .key = key};
        struct fi_msg_rma msg = {
            .msg_iov = &iov,
            .desc = &op->desc,
            .iov_count = 1,
            .addr = dest,
            .rma_iov = &rma,
            .rma_iov_count = 1,
            .context = &op->fi_ctx,
        };

        /* Its flags replace the endpoint's FI_DELIVERY_COMPLETE. */
        return fi_writemsg(rail->ep, &msg, FI_COMPLETION);
    }
    if (op->kind == FERRY__OP_WRITE)
        return fi_write(rail->ep, op->local, len, op->desc, dest, raddr, key,
                        &op->fi_ctx);
    return fi_read(rail->ep, op->local, len, op->desc, dest, raddr, key,
                   &op->fi_ctx);
}

ssize_t ferry__rma_post(struct ferry_req *req, struct ferry__op *op,
                        void *local, void *desc,
                        const struct ferry_rmem *rmem, uint64_t roff,
                        size_t len, bool notifies, enum ferry__rma_wait wait,
                        uint64_t data)
{
    /* Not taken yet (ferry__op_take follows a post the provider took),
     * so its kind, peer and flag are set here for rma_issue. */
    op->peer = req->peer;
    op->kind = req->kind;
    op->notifies = notifies;
    op->covered = wait == FERRY__RMA_COVERED;
    op->cover = wait == FERRY__RMA_COVER;
    op->local = local;
    op->desc = desc;
    op->rmem = rmem;
    op->roff = roff;
    op->data = data;
    return rma_issue(op, len);
}

ssize_t ferry__rma_again(struct ferry__op *op)
{
    return rma_issue(op, op->len);
}

void ferry__req_items_name(const struct ferry_req *req, size_t first,
                           size_t last, char *buf, size_t size)
{
    if (req->prep == NULL && first == last)
        snprintf(buf, size, "iov[%zu]", first);
    else if (req->prep == NULL)
        snprintf(buf, size, "iov[%zu..%zu], merged", first, last);
    else if (first == last)
        snprintf(buf, size, "pair %zu: local block %" PRIu32
                 ", remote block %" PRIu32, first, req->lidx[first],
                 req->ridx[first]);
    else
        snprintf(buf, size, "pairs %zu..%zu, merged: local blocks %" PRIu32
                 "..%" PRIu32 ", remote blocks %" PRIu32 "..%" PRIu32, first,
                 last, req->lidx[first], req->lidx[last], req->ridx[first],
                 req->ridx[last]);
}

void ferry__op_describe(const struct ferry__op *op, char *buf, size_t size)
{
    char items[96] = "";

    if (op->first_item != FERRY__NO_ITEM)
        ferry__req_items_name(op->req, op->first_item, op->last_item, items,
                              sizeof(items));
    snprintf(buf, size, "%s of %zu bytes%s%s%s on domain %s",
             op->kind == FERRY__OP_SEND    ? "notification"
             : op->kind == FERRY__OP_SYNC  ? "staged-memory sync"
             : op->kind == FERRY__OP_WRITE ? "write"
                                           : "read",
             op->len, items[0] ? " (" : "", items, items[0] ? ")" : "",
             op->rail->info->domain_attr->name);
}

/* When a request ends: the clock, read once for all the requests a
 * batch of completions ends (part.h). */
static uint64_t end_time(struct ferry__req_part *reqs)
{
    if (!reqs->in_batch)
        return ferry__clock_ns();
    if (reqs->batch_ns == 0)
        reqs->batch_ns = ferry__clock_ns();
    return reqs->batch_ns;
}

__attribute__((format(printf, 4, 0))) static void
req_end_v(struct ferry_req *req, size_t item, int status, const char *fmt,
          va_list ap)
{
    struct ferry__req_part *reqs = &ferry__xfer_of(req->ctx)->req;

    FERRY__ASSERT_LOCKED(&ferry__fabric_of(req->ctx)->lock);
    if (req->status != FERRY_EINPROGRESS)
        return;
    req->status = status;
    req->ended_ns = end_time(reqs);
    /* Taken by another thread, its start may be read a little ahead of
     * this thread's clock (base/clock.h). */
    if (req->ended_ns < req->posted_ns)
        req->ended_ns = req->posted_ns;
    req->failed_item = status != 0 ? item : FERRY__NO_ITEM;
    reqs->ended++;
    if (req->kind <= FERRY__OP_SEND) {
        req->peer->traffic.ended[req->kind][ferry__outcome_of(status)]++;
        ferry__hist_add(&reqs->hist[req->kind],
                        req->ended_ns - req->posted_ns, req->bytes);
    }
    if (fmt != NULL)
        vsnprintf(req->errmsg, sizeof(req->errmsg), fmt, ap);
}

void ferry__req_end(struct ferry_req *req, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    req_end_v(req, FERRY__NO_ITEM, status, fmt, ap);
    va_end(ap);
}

void ferry__req_end_at(struct ferry_req *req, size_t item, int status,
                       const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    req_end_v(req, item, status, fmt, ap);
    va_end(ap);
}

void ferry__req_list_remove(struct ferry_req *r)
{
    struct ferry__req_list *l = r->list;

    if (l == NULL)
        return;
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    r->list = NULL;
    l->n--;
    if (l->tally != NULL)
        --*l->tally;
}

void ferry__req_list_append(struct ferry__req_list *l, struct ferry_req *r)
{
    r->prev = l->tail;
    r->next = NULL;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    r->list = l;
    l->n++;
    if (l->tally != NULL)
        ++*l->tally;
}

void ferry__req_list_move(struct ferry__req_list *to, struct ferry_req *r)
{
    if (r->list == to)
        return;
    ferry__req_list_remove(r);
    ferry__req_list_append(to, r);
}

void ferry__reqs_end_to(struct ferry__xfer *x, struct ferry_peer *peer,
                        int status, const char *why)
{
    struct ferry_req *r = x->req.parked.head;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    /* Its parked and blocked requests become active: once ended, the next
     * pass settles them. */
    while (r != NULL) {
        struct ferry_req *next = r->next;

        if (r->peer == peer)
            ferry__req_list_move(&x->req.active, r);
        r = next;
    }
    for (unsigned i = 0; i < FERRY__MAX_RAILS; i++)
        while (peer->live.blocked[i].head != NULL)
            ferry__req_list_move(&x->req.active, peer->live.blocked[i].head);
    for (r = x->req.active.head; r != NULL; r = r->next)
        if (r->peer == peer)
            ferry__req_end(r, status, "%s", why);
}
