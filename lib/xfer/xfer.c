/*
 * Transfers: validation of every iov before anything is posted, requests,
 * and posting in chunks of at most max_msg bytes with at most tx_depth
 * operations in flight per rail.
 */
#include "xfer/xfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "base/clock.h"
#include "reg/dlist.h"
#include "reg/rcache.h"
#include "xfer/live.h"
#include "xfer/notify.h"
#include "xfer/resume.h"
#include "xfer/stage.h"

#define MIN_STRIPE_CHUNK (1u << 20)

static int check_local(const struct ferry_peer *peer,
                       const struct ferry_iov *iov, size_t i)
{
    const struct ferry_mem *m = iov->lmem;
    uintptr_t lo = (uintptr_t)iov->local;
    int ret;

    if (iov->local == NULL)
        return ferry__error(FERRY_EINVAL, "iov[%zu]: local address is NULL",
                            i);
    if (lo + iov->len < lo)
        return ferry__error(FERRY_ERANGE,
                            "iov[%zu]: local [%p, +%zu) wraps around the "
                            "address space",
                            i, iov->local, iov->len);
    if (m == NULL)
        return 0;
    if ((ret = ferry__check_mem(m, "iov.lmem")))
        return ferry__error(ret, "iov[%zu]: lmem is not a live ferry "
                            "registration (closed, or another kind of "
                            "handle)", i);
    if (m->ctx != peer->ctx)
        return ferry__error(FERRY_EHANDLE,
                            "iov[%zu]: lmem was registered with another "
                            "context than the peer's",
                            i);
    if (lo < (uintptr_t)m->addr ||
        lo + iov->len > (uintptr_t)m->addr + m->len)
        return ferry__error(FERRY_ERANGE,
                            "iov[%zu]: local [%p, +%zu) is not inside its "
                            "registration [%p, +%zu)",
                            i, iov->local, iov->len, (void *)m->addr, m->len);
    return 0;
}

static int check_remote(const struct ferry_peer *peer,
                        const struct ferry_iov *iov, size_t i,
                        enum ferry__op_kind kind)
{
    const struct ferry_rmem *r = iov->rmem;
    unsigned need = kind == FERRY__OP_WRITE ? FERRY_ACCESS_REMOTE_WRITE
                                            : FERRY_ACCESS_REMOTE_READ;

    if (r == NULL)
        return ferry__error(FERRY_EINVAL, "iov[%zu]: rmem is NULL", i);
    if (r->magic != FERRY__MAGIC_RMEM)
        return ferry__error(FERRY_EHANDLE,
                            "iov[%zu]: rmem is not a live remote region "
                            "(closed, or another kind of handle)",
                            i);
    if (r->peer != peer)
        return ferry__error(FERRY_EHANDLE,
                            "iov[%zu]: rmem was imported from another peer "
                            "than the one this request goes to",
                            i);
    if (iov->roffset + iov->len < iov->roffset)
        return ferry__error(FERRY_ERANGE,
                            "iov[%zu]: remote offset %llu + length %zu "
                            "overflows 64 bits",
                            i, (unsigned long long)iov->roffset, iov->len);
    if (iov->roffset + iov->len > r->len)
        return ferry__error(FERRY_ERANGE,
                            "iov[%zu]: remote offset %llu + length %zu "
                            "exceeds the %llu-byte region",
                            i, (unsigned long long)iov->roffset, iov->len,
                            (unsigned long long)r->len);
    if (!(r->access & need))
        return ferry__error(FERRY_EINVAL,
                            "iov[%zu]: the remote region was exported without "
                            "%s; the owner must register it with %s",
                            i,
                            kind == FERRY__OP_WRITE ? "remote write access"
                                                    : "remote read access",
                            kind == FERRY__OP_WRITE
                                ? "FERRY_ACCESS_REMOTE_WRITE"
                                : "FERRY_ACCESS_REMOTE_READ");
    return 0;
}

/* Ids from FERRY_NOTIFY_ID_RESERVED up are the fan-out's (fan.c). */
static int check_id(uint64_t id, const char *call)
{
    if (id < FERRY_NOTIFY_ID_RESERVED)
        return 0;
    return ferry__error(FERRY_EINVAL,
                        "%s: notification id 0x%llx is one of ferry's own "
                        "(from FERRY_NOTIFY_ID_RESERVED up, the fan-out's); "
                        "use an id below 0x%llx",
                        call, (unsigned long long)id,
                        (unsigned long long)FERRY_NOTIFY_ID_RESERVED);
}

/* own: ferry's own request (the fan-out), which may use reserved ids. */
static int check_opts(const struct ferry_xfer_opts *opts, const char *call,
                      bool own)
{
    if (opts == NULL)
        return 0;
    if (opts->size == 0 || opts->size > sizeof(*opts))
        return ferry__error(FERRY_EINVAL,
                            "%s: opts->size is %zu; initialise opts with "
                            "FERRY_XFER_OPTS_INIT",
                            call, opts->size);
    if (opts->flags & ~(unsigned)FERRY_XFER_NOTIFY)
        return ferry__error(FERRY_EINVAL,
                            "%s: opts->flags 0x%x has bits that are not "
                            "FERRY_XFER_* flags",
                            call, opts->flags);
    if ((opts->flags & FERRY_XFER_NOTIFY) && !own)
        return check_id(opts->notify_id, call);
    return 0;
}

static int check_args(ferry_peer_t *peer, const struct ferry_iov *iov,
                      size_t n, const struct ferry_xfer_opts *opts,
                      ferry_req_t **out, enum ferry__op_kind kind, bool own)
{
    const char *call = kind == FERRY__OP_WRITE ? "ferry_write" : "ferry_read";
    int ret;

    if ((ret = ferry__check_peer(peer, call)))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "%s: req is NULL", call);
    if (iov == NULL || n == 0)
        return ferry__error(FERRY_EINVAL,
                            "%s: %s; pass at least one iov", call,
                            iov == NULL ? "iov is NULL" : "n is 0");
    if (n > SIZE_MAX / sizeof(*iov))
        return ferry__error(FERRY_EINVAL, "%s: n = %zu iovs is too many",
                            call, n);
    if ((ret = check_opts(opts, call, own)))
        return ret;
    for (size_t i = 0; i < n; i++) {
        if (iov[i].len == 0)
            return ferry__error(FERRY_EINVAL,
                                "iov[%zu]: length is 0; every iov moves at "
                                "least one byte",
                                i);
        if ((ret = check_local(peer, &iov[i], i)) ||
            (ret = check_remote(peer, &iov[i], i, kind)))
            return ret;
    }
    return 0;
}

static uint64_t deadline_of(const struct ferry__xfer *x,
                            const struct ferry_xfer_opts *opts, uint64_t now)
{
    int ms = x->reg.fab.cfg.timeout_ms;

    if (opts != NULL && opts->timeout_ms != 0)
        ms = opts->timeout_ms;
    if (ms <= 0)
        return 0;
    return now + (uint64_t)ms * 1000000u;
}

/* One more request (take) or one fewer holds a region or a prepared
 * transfer. */
static void count_request(unsigned *requests, bool take)
{
    if (take)
        (*requests)++;
    else
        (*requests)--;
}

/*
 * Holds keep regions alive while operations may touch them (take), or
 * let them go (!take).  A prepared request holds its prepared transfer,
 * whose lists hold theirs.  The counts are plain: every take and drop is
 * under the lock, or after the last thread left the context.  Atomic,
 * they cost four locked instructions per request, about 2 % of shm's
 * 4 KiB writes on libfabric 2.6 (docs/performance.md).
 */
static void hold_regions(struct ferry_req *req, bool take)
{
    if (req->prep != NULL) {
        count_request(&req->prep->requests, take);
        return;
    }
    /* One hold per run of iovs in the same region, not one per iov: a
     * batch of blocks in one region costs two counts, not two per
     * block.  The iovs do not change, so dropping skips the same ones. */
    for (size_t i = 0; i < req->niov; i++) {
        const struct ferry_iov *v = &req->iov[i];
        bool same_l = i > 0 && v->lmem == v[-1].lmem;
        bool same_r = i > 0 && v->rmem == v[-1].rmem;

        if (v->lmem != NULL && !same_l)
            count_request(&v->lmem->requests, take);
        if (!same_r)
            count_request(&v->rmem->requests, take);
    }
}

/* Gives back the registrations ferry found or made for n iovs without
 * lmem (find_registrations), and frees the array; under the lock. */
static void release_found(struct ferry__found *found, size_t n)
{
    for (size_t i = 0; found != NULL && i < n; i++) {
        if (found[i].entry != NULL)
            ferry__rcache_put(found[i].entry);
        else if (found[i].mem != NULL)
            ferry__mem_close_locked(found[i].mem);
    }
    free(found);
}

/* Gives back what the request was handed when it was made: its copy of
 * the iovs or block pairs, and the registrations found for them. */
static void free_items(struct ferry_req *req)
{
    release_found(req->found, req->niov);
    if (req->iov != req->iov_inline)
        free(req->iov);
    free(req->lidx); /* ridx shares the allocation */
    req->found = NULL;
    req->iov = NULL;
    req->lidx = req->ridx = NULL;
}

static void req_release(struct ferry_req *req)
{
    hold_regions(req, false);
    free_items(req);
    req->prep = NULL;
    req->niov = 0;
}

/*
 * Keeps req for req_new, or frees it; under the lock, as every take is.
 * Up to FERRY__SPARE_REQS a context (op.h): calloc and free were about
 * 430 of the 4,500 instructions ferry's initiator spent on a 4 KiB shm
 * write (bench/opcount.sh).  Taking them without the lock cost three
 * atomic instructions a take and two a put, 1-2 % of shm's 4 KiB
 * writes on libfabric 2.6 (docs/performance.md).
 */
static void req_put_spare(struct ferry__xfer *x, struct ferry_req *req)
{
    /* One more would pass the bound: written so, not as ">=
     * FERRY__SPARE_REQS", which is always true where that is 0 and then
     * a warning. */
    if (x->req.spares + 1 > FERRY__SPARE_REQS) {
        free(req);
        return;
    }
    req->stack_next = x->req.spare;
    x->req.spare = req;
    x->req.spares++;
}

/* A kept request, not zeroed, or NULL; under the lock. */
static struct ferry_req *req_take_spare(struct ferry__xfer *x)
{
    struct ferry_req *top = x->req.spare;

    if (top != NULL) {
        x->req.spare = top->stack_next;
        x->req.spares--;
    }
    return top;
}

/* Frees the kept requests, once no other thread can use the context. */
static void free_spares(struct ferry__xfer *x)
{
    struct ferry_req *req = x->req.spare;

    while (req != NULL) {
        struct ferry_req *next = req->stack_next;

        free(req);
        req = next;
    }
    x->req.spare = NULL;
    x->req.spares = 0;
}

static void req_free(struct ferry_req *req)
{
    ferry__req_list_remove(req);
    req->magic = FERRY__MAGIC_DEAD;
    req_put_spare(ferry__xfer_of(req->ctx), req);
}

/* A request that was never published goes away whole; under the lock. */
static void req_discard(struct ferry_req *req)
{
    free_items(req);
    req_free(req);
}

/*
 * ferry_req_close of a retired request takes no lock: the request goes on
 * a stack (pushed by any thread, taken whole by one holding the lock, so
 * a pointer seen again on top is always the right next link) and the
 * next progress pass frees it.
 */
static void give_back(struct ferry__xfer *x, struct ferry_req *req)
{
    struct ferry_req *top =
        atomic_load_explicit(&x->req.given_back, memory_order_relaxed);

    /* Release: free_given_back, taking the stack (acquire), sees req's
     * link. */
    do
        req->stack_next = top;
    while (!atomic_compare_exchange_weak_explicit(
        &x->req.given_back, &top, req, memory_order_release,
        memory_order_relaxed));
}

/* Frees what give_back put on the stack; under the lock, or once no
 * other thread can use the context. */
static void free_given_back(struct ferry__xfer *x)
{
    struct ferry_req *req;

    if (atomic_load_explicit(&x->req.given_back, memory_order_relaxed) ==
        NULL)
        return;
    /* Acquire pairs with give_back's release: every link is visible. */
    req = atomic_exchange_explicit(&x->req.given_back, NULL,
                                   memory_order_acquire);
    while (req != NULL) {
        struct ferry_req *next = req->stack_next;

        req_free(req);
        req = next;
    }
}

void ferry__reqs_free_given_back(struct ferry__xfer *x)
{
    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    free_given_back(x);
}

/*
 * Registrations for the n iovs of a request on ctx, for those without
 * lmem: from the registration cache, or made for this request alone when
 * the cache cannot keep them; *found is NULL when every iov has its
 * lmem.  Every operation then passes a desc, whether the provider asks
 * for it or not: a provider without one would register internally,
 * uncached.  Without the lock: registering may take long.
 */
static int find_registrations(struct ferry_context *ctx,
                              const struct ferry_iov *iov, size_t n,
                              struct ferry__found **found)
{
    struct ferry__xfer *x = ferry__xfer_of(ctx);
    int ret = 0;

    *found = NULL;
    for (size_t i = 0; i < n && ret == 0; i++) {
        struct ferry__found *f;

        if (iov[i].lmem != NULL)
            continue;
        if (*found == NULL && (*found = calloc(n, sizeof(**found))) == NULL)
            return ferry__error(FERRY_ENOMEM,
                                "out of memory for registrations");
        f = &(*found)[i];
        ret = ferry__rcache_get(ctx, iov[i].local, iov[i].len, &f->mem,
                                &f->entry);
        if (ret != 0)
            ret = ferry__error(ret, "iov[%zu]: registering the local buffer "
                               "failed: %s", i, ferry_last_error());
        else if (f->entry == NULL) {
            ferry__lock_acquire(&x->reg.fab.lock);
            x->req.oneshot_registrations++;
            ferry__lock_release(&x->reg.fab.lock);
        }
    }
    if (ret != 0) {
        ferry__lock_acquire(&x->reg.fab.lock);
        release_found(*found, n);
        ferry__lock_release(&x->reg.fab.lock);
        *found = NULL;
    }
    return ret;
}

/* A request of kind to peer, taken by ferry at taken_ns (ferry__now_ns),
 * from the context's spares or calloc, or NULL; under the lock. */
static struct ferry_req *req_new(struct ferry_peer *peer,
                                enum ferry__op_kind kind,
                                const struct ferry_xfer_opts *opts,
                                uint64_t taken_ns)
{
    struct ferry__xfer *x = ferry__xfer_of(peer->ctx);
    struct ferry_req *req;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    req = req_take_spare(x);

    /* A kept request is cleared up to the fields each request writes
     * before it reads them (op.h), and of its sentence the first byte:
     * 720 bytes fewer to clear per request. */
    if (req != NULL) {
        memset(req, 0, offsetof(struct ferry_req, iov_inline));
        req->errmsg[0] = '\0';
    } else if ((req = calloc(1, sizeof(*req))) == NULL) {
        return NULL;
    }
    req->ctx = peer->ctx;
    req->peer = peer;
    req->kind = kind;
    req->status = FERRY_EINPROGRESS;
    atomic_init(&req->outcome, FERRY_EINPROGRESS);
    req->rail_pending = -1;
    /* One clock reading: the request's start, and its deadline from it. */
    req->posted_ns = taken_ns;
    req->deadline_ns = deadline_of(x, opts, taken_ns);
    req->failed_item = FERRY__NO_ITEM;
    /* A caller built with an older header has a shorter opts. */
    if (opts != NULL &&
        opts->size >= offsetof(struct ferry_xfer_opts, user_data) +
                          sizeof(opts->user_data))
        req->user_data = opts->user_data;
    if (opts != NULL && (opts->flags & FERRY_XFER_NOTIFY)) {
        req->notify = FERRY__NOTIFY_PENDING;
        req->notify_id = opts->notify_id;
        req->notify_value = opts->notify_value;
    }
    return req;
}

/*
 * The chunk of a striped request: about a quarter of each rail's share,
 * so that weights can shape the split, and never below MIN_STRIPE_CHUNK,
 * an operation of the default size (1 MiB; on tcp here 512 KiB-1 MiB
 * operations move the most, docs/performance.md), nor above max_msg.
 */
static size_t stripe_chunk(const struct ferry__xfer *x,
                           const struct ferry_req *req)
{
    uint64_t chunk = req->bytes / (4u * req->peer->nrails);

    chunk = (chunk + 4095) & ~(uint64_t)4095;
    if (chunk < MIN_STRIPE_CHUNK)
        chunk = MIN_STRIPE_CHUNK;
    return chunk < x->reg.fab.max_msg ? (size_t)chunk : x->reg.fab.max_msg;
}

/*
 * The i-th piece of a request: its iov, or its pair of prepared blocks,
 * with lmem set to the registration it uses (found in the cache or made
 * for the request when the caller gave none).
 */
static void req_item(const struct ferry_req *req, size_t i,
                     struct ferry_iov *out)
{
    if (req->prep == NULL) {
        *out = req->iov[i];
        if (out->lmem == NULL && req->found != NULL)
            out->lmem = req->found[i].mem;
    } else {
        struct ferry__block lb, rb;

        ferry__dlist_block(req->prep->local, req->lidx[i], &lb);
        ferry__dlist_block(req->prep->remote, req->ridx[i], &rb);
        out->local = lb.mem->addr + lb.offset;
        out->lmem = lb.mem;
        out->rmem = rb.rmem;
        out->roffset = rb.offset;
        out->len = lb.len;
    }
}

/*
 * Whether the request may post small writes without waiting for their
 * delivery (ferry__transport.covered_writes; which ones: write_covered):
 * a write of several items, to a peer whose transport has covered
 * writes, and not into peer mirrors, whose sync messages go once its
 * writes have landed.
 */
static bool covers_writes(const struct ferry_req *req)
{
    return req->kind == FERRY__OP_WRITE && !req->sync_mirrors &&
           req->niov >= 2 &&
           ferry__peer_transport(req->peer)->covered_writes != 0;
}

static bool keeps_to_first_rail(const struct ferry_req *req)
{
    return req->kind == FERRY__OP_WRITE &&
           req->bytes <= ferry__peer_transport(req->peer)->first_rail_writes;
}

/* Publishes the request and posts what the provider takes now; refuses
 * it (and frees it) when its peer is gone.  Under the lock. */
static int req_start(struct ferry_req *req, ferry_req_t **out,
                     const char *call)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    int ret;

    if ((ret = ferry__live_check_peer(req->peer, call)) != 0) {
        req_discard(req);
        return ret;
    }
    req->magic = FERRY__MAGIC_REQ;
    ferry__live_wait_begins(req->peer);
    req->peer->live.running++;
    /* Large requests are striped over the rails; smaller ones take the
     * rails in turn, one rail each, but for the small writes a transport
     * keeps to the peer's first rail (fabric.h). */
    req->striped = req->peer->nrails > 1 &&
                   req->bytes >= x->reg.fab.cfg.stripe_threshold;
    req->rail = keeps_to_first_rail(req) ? 0 : x->req.next_rail++;
    req->chunk = req->striped ? stripe_chunk(x, req) : x->reg.fab.max_msg;
    /* A striped request's round robin starts on its turn's rail: one
     * that goes as a single operation (a run merged up to the operation
     * size) would otherwise always take rail 0. */
    if (req->striped) {
        memset(req->credit, 0, sizeof(req->credit));
        req->credit[req->rail % req->peer->nrails] = 1;
    }
    /* Writes into a peer's host mirror of device memory tell the peer
     * what they wrote (post_syncs); only contexts that imported one look. */
    req->sync_mirrors =
        req->kind == FERRY__OP_WRITE && x->reg.mem.mirror_rmems > 0;
    if ((req->covers = covers_writes(req)))
        memset(req->cover, 0, sizeof(req->cover));
    hold_regions(req, true);
    ferry__req_list_append(&x->req.active, req);
    ferry__req_post_pending(req);
    ferry__req_settle(req);
    *out = req;
    return 0;
}

static int submit(ferry_peer_t *peer, const struct ferry_iov *iov, size_t n,
                  const struct ferry_xfer_opts *opts, ferry_req_t **out,
                  enum ferry__op_kind kind, bool own)
{
    struct ferry__lock *lock;
    struct ferry_iov *long_iov = NULL;
    struct ferry__found *found;
    struct ferry_req *req;
    uint64_t taken_ns;
    int ret;

    ferry__error_clear();
    if ((ret = check_args(peer, iov, n, opts, out, kind, own)))
        return ret;
    taken_ns = ferry__clock_ns(); /* its deadline counts registering too */
    /* What may take long, copying a long array and registering buffers,
     * is done before the lock. */
    if (n > FERRY__REQ_INLINE_IOVS) {
        if ((long_iov = malloc(n * sizeof(*iov))) == NULL)
            return ferry__error(FERRY_ENOMEM, "out of memory for a request");
        memcpy(long_iov, iov, n * sizeof(*iov));
    }
    if ((ret = find_registrations(peer->ctx, iov, n, &found)) != 0) {
        free(long_iov);
        return ret;
    }
    lock = &ferry__fabric_of(peer->ctx)->lock;
    ferry__lock_acquire(lock);
    if ((req = req_new(peer, kind, opts, taken_ns)) == NULL) {
        release_found(found, n);
        ferry__lock_release(lock);
        free(long_iov);
        return ferry__error(FERRY_ENOMEM, "out of memory for a request");
    }
    if (long_iov != NULL) {
        req->iov = long_iov;
    } else {
        req->iov = req->iov_inline;
        memcpy(req->iov_inline, iov, n * sizeof(*iov));
    }
    req->niov = n;
    req->found = found;
    for (size_t i = 0; i < n; i++)
        req->bytes += iov[i].len; /* bounded: each iov lies in a region */
    ret = req_start(req, out,
                    kind == FERRY__OP_WRITE ? "ferry_write" : "ferry_read");
    ferry__lock_release(lock);
    return ret;
}

int ferry_xfer_post(ferry_prep_t *prep, const uint32_t *local_idx,
                    const uint32_t *remote_idx, size_t n,
                    const struct ferry_xfer_opts *opts, ferry_req_t **out)
{
    struct ferry__lock *lock;
    struct ferry_req *req;
    uint32_t *idx;
    uint64_t bytes, taken_ns;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_prep(prep, "ferry_xfer_post")) ||
        (ret = check_opts(opts, "ferry_xfer_post", false)))
        return ret;
    if (out == NULL || local_idx == NULL || remote_idx == NULL || n == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_xfer_post: req, local_idx and remote_idx "
                            "must not be NULL and n must be at least 1");
    if (n > SIZE_MAX / (2 * sizeof(uint32_t)))
        return ferry__error(FERRY_EINVAL, "ferry_xfer_post: n = %zu is too "
                            "many blocks", n);
    if ((ret = ferry__prep_check_indices(prep, local_idx, remote_idx, n)))
        return ret;
    taken_ns = ferry__clock_ns();
    /* One allocation for both index arrays, none per block, filled
     * before the lock. */
    if ((idx = malloc(2 * n * sizeof(uint32_t))) == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a request");
    memcpy(idx, local_idx, n * sizeof(uint32_t));
    memcpy(idx + n, remote_idx, n * sizeof(uint32_t));
    bytes = ferry__prep_bytes(prep, local_idx, n);
    lock = &ferry__fabric_of(prep->peer->ctx)->lock;
    ferry__lock_acquire(lock);
    req = req_new(prep->peer,
                  prep->op == FERRY_OP_WRITE ? FERRY__OP_WRITE : FERRY__OP_READ,
                  opts, taken_ns);
    if (req == NULL) {
        ferry__lock_release(lock);
        free(idx);
        return ferry__error(FERRY_ENOMEM, "out of memory for a request");
    }
    req->lidx = idx;
    req->ridx = idx + n;
    req->prep = prep;
    req->niov = n;
    req->bytes = bytes;
    ret = req_start(req, out, "ferry_xfer_post");
    ferry__lock_release(lock);
    return ret;
}

static int notify_send(ferry_peer_t *peer, uint64_t id, uint64_t value,
                       const struct ferry_xfer_opts *opts, ferry_req_t **out,
                       bool own)
{
    struct ferry_xfer_opts with = FERRY_XFER_OPTS_INIT;
    struct ferry__lock *lock;
    struct ferry_req *req;
    uint64_t taken_ns;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_notify_send")) ||
        (ret = check_opts(opts, "ferry_notify_send", own)) ||
        (!own && (ret = check_id(id, "ferry_notify_send"))))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_notify_send: req is NULL");
    if (opts != NULL)
        with.timeout_ms = opts->timeout_ms;
    with.flags = FERRY_XFER_NOTIFY;
    with.notify_id = id;
    with.notify_value = value;
    taken_ns = ferry__clock_ns();
    lock = &ferry__fabric_of(peer->ctx)->lock;
    ferry__lock_acquire(lock);
    if ((req = req_new(peer, FERRY__OP_SEND, &with, taken_ns)) == NULL) {
        ferry__lock_release(lock);
        return ferry__error(FERRY_ENOMEM, "out of memory for a request");
    }
    /* no data: the notification goes at once */
    ret = req_start(req, out, "ferry_notify_send");
    ferry__lock_release(lock);
    return ret;
}

int ferry_notify_send(ferry_peer_t *peer, uint64_t id, uint64_t value,
                      const struct ferry_xfer_opts *opts, ferry_req_t **out)
{
    return notify_send(peer, id, value, opts, out, false);
}

int ferry__notify_send_own(ferry_peer_t *peer, uint64_t id, uint64_t value,
                           const struct ferry_xfer_opts *opts,
                           ferry_req_t **out)
{
    return notify_send(peer, id, value, opts, out, true);
}

int ferry_write(ferry_peer_t *peer, const struct ferry_iov *iov, size_t n,
                const struct ferry_xfer_opts *opts, ferry_req_t **req)
{
    return submit(peer, iov, n, opts, req, FERRY__OP_WRITE, false);
}

int ferry__write_own(ferry_peer_t *peer, const struct ferry_iov *iov,
                     size_t n, const struct ferry_xfer_opts *opts,
                     ferry_req_t **req)
{
    return submit(peer, iov, n, opts, req, FERRY__OP_WRITE, true);
}

int ferry_read(ferry_peer_t *peer, const struct ferry_iov *iov, size_t n,
               const struct ferry_xfer_opts *opts, ferry_req_t **req)
{
    return submit(peer, iov, n, opts, req, FERRY__OP_READ, false);
}

/*
 * What the request's next operation covers: from its current byte, up to
 * its chunk (op_chunk), the rest of the current item and then as many of
 * the items after it as continue it (merge_run).  Positions are (item,
 * offset).
 */
struct run {
    size_t len;
    size_t last;              /* the item it ends in */
    size_t end_iov, end_off;  /* the request's position after it */
    /* The item at end_iov when merge_run read it and stopped at its
     * start: the next operation begins there without reading it again. */
    bool peeked;
    struct ferry_iov peek;
};

/*
 * Whether next starts where item's run ends, locally and remotely, under
 * the same registrations: then both can go as one operation.
 */
static bool continues(const struct ferry_iov *item, const struct ferry_iov *next,
                      const uint8_t *local_end, uint64_t remote_end)
{
    return next->local == local_end && next->lmem == item->lmem &&
           next->rmem == item->rmem && next->roffset == remote_end;
}

/*
 * Neighbouring blocks of a paged cache are often posted in runs; where
 * item's remainder fits the chunk, the items that continue it are merged
 * into the same operation, the last one possibly in part.  Bounds were
 * checked item by item when the request was made; an error still names
 * the items of the operation (first and last).
 */
static void merge_run(const struct ferry_req *req,
                      const struct ferry_iov *item, size_t chunk,
                      struct run *run)
{
    const uint8_t *local_end = (const uint8_t *)item->local + item->len;
    uint64_t remote_end = item->roffset + item->len;
    size_t rest = item->len - req->cur_off;

    run->last = req->cur_iov;
    run->peeked = false;
    if (rest > chunk) { /* the chunk ends inside this item */
        run->len = chunk;
        run->end_iov = req->cur_iov;
        run->end_off = req->cur_off + chunk;
        return;
    }
    run->len = rest;
    run->end_iov = req->cur_iov + 1;
    run->end_off = 0;
    while (run->len < chunk && run->end_iov < req->niov) {
        struct ferry_iov *next = &run->peek;
        size_t take;

        req_item(req, run->end_iov, next);
        if (!continues(item, next, local_end, remote_end)) {
            run->peeked = true;
            break;
        }
        take = next->len < chunk - run->len ? next->len : chunk - run->len;
        run->len += take;
        run->last = run->end_iov;
        if (take < next->len) {
            run->end_off = take;
            break;
        }
        run->end_iov++;
        local_end += next->len;
        remote_end += next->len;
    }
}

/*
 * The most the operation that starts at item may cover: the request's
 * chunk, or, for device memory shm registered, what shm takes whole
 * (ferry__transport.device_max_op, never below the chunk).  Elsewhere a
 * striped request keeps its chunks, device memory or not.
 */
static size_t op_chunk(const struct ferry_req *req,
                       const struct ferry_iov *item)
{
    const struct ferry_mem *lmem = item->lmem;
    const struct ferry__transport *t = ferry__peer_transport(req->peer);

    if (lmem == NULL || lmem->kind != FERRY_MEM_CUDA || lmem->staged ||
        !t->shm)
        return req->chunk;
    return t->device_max_op;
}

/* A staged item's len more bytes are on their way. */
static void advance(struct ferry_req *req, const struct ferry_iov *item,
                    size_t len)
{
    req->rail_pending = -1;
    req->cur_off += len;
    if (req->cur_off == item->len) {
        req->cur_iov++;
        req->cur_off = 0;
    }
}

/*
 * The rail of the request's next chunk, among its peer's (the k of
 * ferry__peer_rail).  A request below the striping
 * threshold keeps the rail it was given (requests take turns); a striped
 * one spreads its chunks by smooth weighted round robin, so each rail
 * carries a share in proportion to its speed.
 */
static unsigned next_rail(struct ferry_req *req, unsigned nrails)
{
    int64_t total = 0;
    unsigned best = 0;

    if (!req->striped || nrails < 2)
        return req->rail % nrails;
    for (unsigned r = 0; r < nrails; r++) {
        int64_t weight = ferry__peer_rail(req->peer, r)->weight;

        req->credit[r] += weight;
        total += weight;
        if (req->credit[r] > req->credit[best])
            best = r;
    }
    req->credit[best] -= total;
    return best;
}

/*
 * A write between plain memories: no staged chunk of its own and no peer
 * mirror to sync, so nothing but its writes must land before its
 * notification.  Only such a request's notification may go before all
 * its writes came back (ridden on the last one, or sent right behind it).
 */
static bool plain_write(const struct ferry_req *req)
{
    return req->kind == FERRY__OP_WRITE && !req->sync_mirrors && !req->staged;
}

/*
 * Whether the request's pending notification may be sent once everything
 * is posted: when every operation has come back, or, for writes between
 * plain memories on a provider that processes sends after the writes
 * before them (notify_ordered), at once (a staged chunk may not be posted
 * yet when its copy has only started).  Syncs of remote mirrors, if any,
 * go first (ferry__req_settle).
 */
static bool notification_may_go(const struct ferry_req *req)
{
    return req->notify == FERRY__NOTIFY_PENDING &&
           (req->ops_in_flight == 0 ||
            (ferry__peer_transport(req->peer)->notify_ordered &&
             plain_write(req)));
}

/*
 * The first peer rail, other than `but` (-1: any), where the request's
 * last write did not wait for its delivery and is still to be posted
 * again (post_covers); -1 for none.
 */
static int cover_owed(const struct ferry_req *req, int but)
{
    if (!req->covers) /* nothing of it went uncovered */
        return -1;
    for (unsigned k = 0; k < req->peer->nrails; k++)
        if (req->cover[k].len != 0 && (int)k != but)
            return (int)k;
    return -1;
}

/* Every operation of the request's data is posted, covers included. */
static bool all_posted(const struct ferry_req *req)
{
    return req->cur_iov == req->niov && cover_owed(req, -1) < 0;
}

/*
 * Whether the request, running, has everything posted and waits for
 * nothing but its operations, a notification (if any) included: each
 * completion settles it (ferry__op_complete), so it is parked (part.h).
 * Looking at such requests on every pass made each ferry_req_test cost
 * in proportion to the requests in flight; a caller testing n of them in
 * turn had n^2 looks for nothing (docs/performance.md).
 */
static bool waits_for_ops(const struct ferry_req *req)
{
    return req->status == FERRY_EINPROGRESS && !req->staged &&
           all_posted(req) && req->ops_in_flight > 0 &&
           !notification_may_go(req);
}

/*
 * The rail the running request's next operation goes to, by its index in
 * the context (a peer reached over a second transport has rails that do
 * not start at the first, reg/peer.h), when that rail has no slot for its
 * peer (op.h), so that it can do nothing until the rail's epoch moves; -1
 * otherwise.  The next operation is a chunk of its data (on the peer's
 * rail rail_pending), a cover (post_covers, on the rail it covers), or,
 * once all is posted, a sync or its notification:
 * those go on the peer's rail 0 (post_message), and wait in the same line
 * as the data, or a stream of writes would leave them no slot.
 */
static int rail_waited_for(const struct ferry_req *req)
{
    int k = -1;
    struct ferry__rail *rail;

    if (req->status != FERRY_EINPROGRESS || req->staged)
        return -1;
    if (req->cur_iov < req->niov)
        k = req->rail_pending;
    else if ((k = cover_owed(req, -1)) < 0 &&
             (req->ops_in_flight == 0 || notification_may_go(req)))
        k = 0;
    if (k < 0)
        return -1;
    rail = ferry__peer_rail(req->peer, (unsigned)k);
    if (ferry__op_slot(ferry__xfer_of(req->ctx), req->peer, rail) != NULL)
        return -1;
    return (int)rail->index;
}

/* Whether the peer's rail k holds a covered write of the request's into
 * another region than rmem: a write into rmem there does not cover it (a
 * write that waits covers those before it on its rail into its own
 * region). */
static bool covered_elsewhere(const struct ferry_req *req, int k,
                              const struct ferry_rmem *rmem)
{
    return req->covers && req->cover[k].len != 0 &&
           req->cover[k].rmem != rmem;
}

/*
 * Whether a write of the request's still waits for a cover that a write
 * into rmem on its peer's rail k, waiting, would not give: on another
 * rail, or on rail k into another region.
 */
static bool cover_left_behind(const struct ferry_req *req, int k,
                              const struct ferry_rmem *rmem)
{
    return cover_owed(req, k) >= 0 || covered_elsewhere(req, k, rmem);
}

/*
 * Whether the request's notification can ride on the write about to be
 * posted on rail, as its remote CQ data: one operation where a write and
 * a message would be two (the target sees the notification in the
 * write's own completion, after its data).  The write (run, from item)
 * must end the request, every earlier one delivered already or ordered
 * before it (writes_ordered), none waiting for a cover this one does not
 * give (post_covers), no peer mirror may need its sync message first,
 * and {id, value} must fit the rail's CQ data.
 */
static bool notify_rides(const struct ferry_req *req,
                         const struct ferry__rail *rail,
                         const struct ferry_iov *item, const struct run *run)
{
    return req->notify == FERRY__NOTIFY_PENDING && plain_write(req) &&
           run->end_iov == req->niov &&
           (req->ops_in_flight == 0 ||
            ferry__peer_transport(req->peer)->writes_ordered) &&
           !cover_left_behind(req, req->rail_pending, item->rmem) &&
           ferry__notify_fits(rail, req->notify_id, req->notify_value);
}

/* The region of the request's next operation after run, from item;
 * NULL after its last. */
static const struct ferry_rmem *next_region(const struct ferry_req *req,
                                            const struct ferry_iov *item,
                                            const struct run *run)
{
    struct ferry_iov next;

    if (run->end_off != 0) /* it ends inside an item that continues item */
        return item->rmem;
    if (run->end_iov == req->niov)
        return NULL;
    if (run->peeked)
        return run->peek.rmem;
    req_item(req, run->end_iov, &next);
    return next.rmem;
}

/*
 * Whether the write about to be posted (run, from item) may go without
 * waiting for its delivery: a small one of host memory that carries no
 * notification, followed by another of the request's into the same
 * region (which waits and covers it, or is covered in turn; the last one
 * waits).  A KV-cache transfer whose blocks go to a region per layer, or
 * to a K and a V region, thus waits once per run of blocks into one
 * region, not once per block.
 */
static bool write_covered(const struct ferry_req *req,
                          const struct ferry_iov *item, const struct run *run,
                          bool notifies)
{
    return req->covers && !notifies &&
           (item->lmem == NULL || item->lmem->kind != FERRY_MEM_CUDA) &&
           run->len <= ferry__peer_transport(req->peer)->covered_writes &&
           next_region(req, item, run) == item->rmem;
}

/*
 * Whether the request's next operation (len bytes over items first..last,
 * in item's region) must not be posted: the pulse says the region is gone
 * (the request ends with FERRY_ESTALE, naming the items), or that the
 * peer's whole context is (the request waits: liveness declares the peer
 * at its next look).  Posting it would cost more than this request:
 * tcp;ofi_rxm drops the connection under every operation to the peer,
 * shm never answers it and stalls the responses behind it
 * (fabric/pulse.h).
 */
static bool held_back(struct ferry_req *req, const struct ferry_iov *item,
                      size_t first, size_t last, size_t len)
{
    enum ferry__pulse_verdict v = ferry__rmem_verdict(item->rmem);
    char items[96];

    if (v != FERRY__PULSE_REGION_GONE)
        return v == FERRY__PULSE_CONTEXT_GONE;
    ferry__req_items_name(req, first, last, items, sizeof(items));
    ferry__req_end_at(req, first, FERRY_ESTALE, "%s of %zu bytes (%s): %s",
                      req->kind == FERRY__OP_WRITE ? "a write" : "a read",
                      len, items, ferry__rmem_gone_why());
    return true;
}

/* Ends the request: posting its operation over items first..last, len
 * bytes on rail, failed with ret. */
static void post_failed(struct ferry_req *req, size_t first, size_t last,
                        size_t len, const struct ferry__rail *rail,
                        ssize_t ret)
{
    char items[96];

    ferry__req_items_name(req, first, last, items, sizeof(items));
    ferry__req_end_at(req, first, ferry__error_from_fi((int)ret),
                      "posting %s of %zu bytes (%s) on rail %u (domain %s) "
                      "failed: %s",
                      req->kind == FERRY__OP_WRITE ? "a write" : "a read",
                      len, items, rail->index, rail->info->domain_attr->name,
                      fi_strerror((int)-ret));
}

/*
 * Posts the last covered write on the peer's rail k again, the same bytes
 * to the same place, waiting: shm places a peer's writes in order, so its
 * delivery is that of every write before it on the rail into its region.
 * False where it did not go: no slot for the peer (the request then waits
 * for one there, rail_waited_for), or the request ended.
 */
static bool post_cover(struct ferry_req *req, unsigned k)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    struct ferry__cover *c = &req->cover[k];
    struct ferry__rail *rail = ferry__peer_rail(req->peer, k);
    struct ferry__op *op = ferry__op_slot(x, req->peer, rail);
    struct ferry_iov item;
    ssize_t ret;

    if (op == NULL)
        return false;
    req_item(req, c->first_item, &item);
    if (held_back(req, &item, c->first_item, c->last_item, c->len))
        return false;
    ret = ferry__rma_post(
        req, op, (uint8_t *)item.local + c->off,
        item.lmem != NULL ? item.lmem->desc[rail->index] : NULL, item.rmem,
        item.roffset + c->off, c->len, false, FERRY__RMA_COVER, 0);
    if (ret == -FI_EAGAIN) {
        ferry__op_pushed_back(x, req->peer, rail);
        return false;
    }
    if (ret != 0) {
        post_failed(req, c->first_item, c->last_item, c->len, rail, ret);
        return false;
    }
    ferry__op_take(ferry__txq_of(x, rail), op, req, req->peer,
                   FERRY__OP_WRITE, c->len);
    op->first_item = c->first_item;
    op->last_item = c->last_item;
    c->len = 0;
    return true;
}

/* Once all of the request's data is posted: each rail's cover. */
static void post_covers(struct ferry_req *req)
{
    int k;

    while (req->status == FERRY_EINPROGRESS &&
           (k = cover_owed(req, -1)) >= 0)
        if (!post_cover(req, (unsigned)k))
            return;
}

void ferry__req_post_pending(struct ferry_req *req)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    struct run run = {.peeked = false}; /* the last operation's */

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    while (req->status == FERRY_EINPROGRESS && req->cur_iov < req->niov) {
        struct ferry_iov item;
        struct ferry__rail *rail;
        struct ferry__txq *tx;
        struct ferry__op *op;
        void *desc;
        bool notifies, covered;
        uint64_t data;
        ssize_t ret;

        if (run.peeked)
            item = run.peek;
        else
            req_item(req, req->cur_iov, &item);
        run.peeked = false;
        if (item.lmem != NULL && item.lmem->staged) {
            ssize_t n = ferry__stage_post(req, &item);

            req->staged = true;
            if (n <= 0)
                break; /* no room now, or the request ended */
            advance(req, &item, (size_t)n);
            continue;
        }
        if (req->rail_pending < 0)
            req->rail_pending = (int)next_rail(req, item.rmem->nrails);
        rail = ferry__peer_rail(req->peer, (unsigned)req->rail_pending);
        tx = ferry__txq_of(x, rail);
        if ((op = ferry__op_slot(x, req->peer, rail)) == NULL)
            break; /* every slot in flight, or the provider pushed back on
                    * this peer: progress will post the rest */
        desc = item.lmem != NULL ? item.lmem->desc[rail->index] : NULL;
        merge_run(req, &item, op_chunk(req, &item), &run);
        if (held_back(req, &item, req->cur_iov, run.last, run.len))
            break;
        notifies = notify_rides(req, rail, &item, &run);
        data = notifies ? ferry__notify_pack(rail, req->notify_id,
                                             req->notify_value)
                        : 0;
        covered = write_covered(req, &item, &run, notifies);
        /* The rail's last covered write went into another region (a
         * striped request's rails take turns): it gets its cover first,
         * which this write could not give. */
        if (covered &&
            covered_elsewhere(req, req->rail_pending, item.rmem) &&
            (!post_cover(req, (unsigned)req->rail_pending) ||
             (op = ferry__op_slot(x, req->peer, rail)) == NULL))
            break;
        ret = ferry__rma_post(req, op,
                              (uint8_t *)item.local + req->cur_off, desc,
                              item.rmem, item.roffset + req->cur_off, run.len,
                              notifies,
                              covered ? FERRY__RMA_COVERED : FERRY__RMA_WAITS,
                              data);
        /* A full provider queue, or a connection still being made: this
         * peer posts on this rail again once the rail's epoch moves
         * (op.h); other peers go on. */
        if (ret == -FI_EAGAIN) {
            ferry__op_pushed_back(x, req->peer, rail);
            break;
        }
        if (ret != 0) {
            post_failed(req, req->cur_iov, run.last, run.len, rail, ret);
            break;
        }
        ferry__op_take(tx, op, req, req->peer, req->kind, run.len);
        op->first_item = req->cur_iov;
        op->last_item = run.last;
        /* A write that waits covers the rail's last covered one only if
         * it goes into the same region. */
        if (req->covers &&
            (covered || req->cover[req->rail_pending].rmem == item.rmem))
            req->cover[req->rail_pending] =
                covered ? (struct ferry__cover){item.rmem, req->cur_iov,
                                                run.last, req->cur_off,
                                                run.len}
                        : (struct ferry__cover){NULL, 0, 0, 0, 0};
        if (notifies) {
            op->notifies = true;
            req->notify = FERRY__NOTIFY_SENT;
            x->req.notifications_in_writes++;
        }
        tx->bytes_posted += run.len;
        tx->writes_covered += covered;
        ferry__traffic_posted(req, rail, run.len);
        req->rail_pending = -1;
        req->cur_iov = run.end_iov;
        req->cur_off = run.end_off;
    }
    if (req->status == FERRY_EINPROGRESS && req->cur_iov == req->niov)
        post_covers(req);
}

/*
 * After its writes completed, tells the peer which ranges of its host
 * mirrors they filled (one message per run of contiguous items), so it
 * copies them to its device before the notification that follows.
 */
static void post_syncs(struct ferry_req *req)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    struct ferry__rail *rail = ferry__peer_rail(req->peer, 0);
    struct ferry__txq *tx = ferry__txq_of(x, rail);

    while (req->sync_next < req->niov) {
        struct ferry_iov item, more;
        size_t next = req->sync_next + 1;
        uint64_t end;
        struct ferry__op *op;
        ssize_t ret;

        req_item(req, req->sync_next, &item);
        if (!item.rmem->mirror) {
            req->sync_next = next;
            continue;
        }
        end = item.roffset + item.len;
        for (; next < req->niov; next++) {
            req_item(req, next, &more);
            if (more.rmem != item.rmem || more.roffset != end)
                break;
            end += more.len;
        }
        if ((op = ferry__op_slot(x, req->peer, rail)) == NULL)
            return; /* no slot now: the next progress call goes on */
        ret = ferry__sync_send(req, rail, op, item.rmem->mirror_id,
                               item.roffset, end - item.roffset);
        if (ret == -FI_EAGAIN) {
            ferry__op_pushed_back(x, req->peer, rail);
            return;
        }
        if (ret != 0) {
            ferry__req_end(req, ferry__error_from_fi((int)ret),
                           "telling the peer about data written into its "
                           "staged device memory failed on domain %s: %s",
                           rail->info->domain_attr->name,
                           fi_strerror((int)-ret));
            return;
        }
        ferry__op_take(tx, op, req, req->peer, FERRY__OP_SYNC, 0);
        req->sync_next = next;
    }
}

/*
 * Posts one message of the request on its peer's first rail, its
 * notification (FERRY__OP_SEND) or its abort (FERRY__OP_ABORT).  Returns 0,
 * -FI_EAGAIN when there is no slot or the provider pushed back (the next
 * settle tries again), or the provider's error.
 */
static ssize_t post_message(struct ferry_req *req, enum ferry__op_kind kind)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    struct ferry__rail *rail = ferry__peer_rail(req->peer, 0);
    struct ferry__op *op = ferry__op_slot(x, req->peer, rail);
    ssize_t ret;

    if (op == NULL)
        return -FI_EAGAIN;
    ret = kind == FERRY__OP_SEND ? ferry__notify_send(req, rail, op)
                                 : ferry__abort_send(req, rail, op);
    if (ret == -FI_EAGAIN)
        ferry__op_pushed_back(x, req->peer, rail);
    else if (ret == 0)
        ferry__op_take(ferry__txq_of(x, rail), op, req, req->peer, kind, 0);
    return ret;
}

/* Sends the request's notification once all its data has landed. */
static void post_notification(struct ferry_req *req)
{
    ssize_t ret = post_message(req, FERRY__OP_SEND);

    if (ret == 0)
        req->notify = FERRY__NOTIFY_SENT;
    else if (ret != -FI_EAGAIN)
        ferry__req_end(req, ferry__error_from_fi((int)ret),
                       "sending the notification on domain %s failed: %s",
                       ferry__peer_rail(req->peer, 0)->info->domain_attr->name,
                       fi_strerror((int)-ret));
}

/*
 * A request that failed before its notification went tells the peer, so
 * that a waiter there ends too (FERRY_NOTIFICATION_ABORT).  No slot or a
 * push-back: the next settle tries again, and the request is kept until
 * then -- unless liveness is off, when nothing would bound that wait.
 */
static void post_abort(struct ferry_req *req)
{
    ssize_t ret = post_message(req, FERRY__OP_ABORT);

    if (ret == 0)
        req->notify = FERRY__NOTIFY_ABORT_SENT;
    else if (ret != -FI_EAGAIN ||
             ferry__fabric_of(req->ctx)->cfg.liveness_ms == 0)
        req->notify = FERRY__NOTIFY_DONE; /* given up */
}

/* Whether the request still owes its peer an abort (post_abort). */
static bool abort_owed(const struct ferry_req *req)
{
    return req->status != FERRY_EINPROGRESS && req->status != 0 &&
           req->notify == FERRY__NOTIFY_PENDING &&
           !ferry__live_gone(req->peer);
}

/* The list a request under way belongs on (part.h); a blocked one's
 * peer is then in line, on the ring that unblock walks. */
static struct ferry__req_list *list_for(const struct ferry_req *req)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    struct ferry_peer *peer = req->peer;
    struct ferry__req_list *blocked;
    int rail;

    if (waits_for_ops(req))
        return &x->req.parked;
    if ((rail = rail_waited_for(req)) < 0)
        return &x->req.active;
    blocked = &peer->live.blocked[rail];
    /* The peer's lists count into the context's total; set here, as
     * peer.c, a layer below, cannot name the total when it makes them. */
    blocked->tally = &x->req.blocked;
    if (!ferry__peer_ring_on(&peer->live.in_line))
        ferry__peer_ring_append(&x->req.blocked_peers, &peer->live.in_line);
    return blocked;
}

void ferry__req_settle(struct ferry_req *req)
{
    struct ferry__xfer *x = ferry__xfer_of(req->ctx);
    bool syncs_left = req->sync_mirrors && req->sync_next < req->niov;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    /* Once every write has come back (FI_DELIVERY_COMPLETE: the data is
     * visible at the target), the syncs of staged remote memory go; the
     * notification after them, when notification_may_go says. */
    if (req->status == FERRY_EINPROGRESS && all_posted(req)) {
        if (syncs_left && req->ops_in_flight == 0)
            post_syncs(req);
        else if (!syncs_left && notification_may_go(req))
            post_notification(req);
    }
    /* The request ends once everything, its notification included, has
     * come back. */
    syncs_left = req->sync_mirrors && req->sync_next < req->niov;
    if (req->status == FERRY_EINPROGRESS && all_posted(req) &&
        req->ops_in_flight == 0 && req->notify != FERRY__NOTIFY_PENDING &&
        !syncs_left)
        ferry__req_end(req, 0, NULL);
    if (abort_owed(req))
        post_abort(req);
    if (req->list == &x->req.done)
        return;
    if (req->status == FERRY_EINPROGRESS || req->ops_in_flight != 0 ||
        abort_owed(req)) {
        ferry__req_list_move(list_for(req), req);
        return;
    }
    req->peer->live.running--;
    req_release(req);
    ferry__req_list_remove(req);
    if (req->user_freed) {
        req_free(req);
        return;
    }
    ferry__req_list_append(&x->req.done, req);
    /* Release: ferry_req_test and ferry_req_close, reading the outcome
     * without the lock (acquire), see everything written under it before,
     * the error's sentence included. */
    atomic_store_explicit(&req->outcome, req->status, memory_order_release);
}

void ferry__op_complete(struct ferry__op *op, int err, const char *why)
{
    struct ferry_req *req = op->req;
    struct ferry__rail *rail = op->rail;
    struct ferry__xfer *x = ferry__xfer_of(op->peer->ctx);
    bool staged = op->slot != NULL;
    bool cover = op->cover; /* give_back clears it */
    char what[192];
    size_t item;

    if (op->kind == FERRY__OP_PING) {
        ferry__live_ping_done(x, op, err);
        ferry__op_give_back(ferry__txq_of(x, rail), op);
        return;
    }
    if (op->kind == FERRY__OP_CHECK) {
        ferry__resume_checked(x, op, err, why);
        ferry__req_settle(req);
        return;
    }
    /* Its connection dropped: it waits for the peer's answer over a new
     * one (resume.h), its request still running. */
    if (err != 0 && ferry__live_holds(x, op->peer, err)) {
        ferry__live_dropped(x, op->peer, why);
        ferry__resume_hold(x, op);
        return;
    }
    /* A covered write completes once it is on its way: no sign of life. */
    if (err == 0 && !(op->kind == FERRY__OP_WRITE && op->covered))
        ferry__live_heard(x, op->peer);
    else if (err != 0)
        ferry__live_op_failed(x, op->peer, err, why);
    /* Named now: giving the slot back takes its request from it. */
    if (err != 0 && op->kind != FERRY__OP_ABORT)
        ferry__op_describe(op, what, sizeof(what));
    item = op->first_item;
    ferry__op_give_back(ferry__txq_of(x, rail), op);
    if (op->kind == FERRY__OP_ABORT)
        req->notify = FERRY__NOTIFY_DONE;
    else if (err != 0) {
        ferry__req_end_at(req, item, err, "%s failed: %s", what, why);
    } else if (op->kind == FERRY__OP_SEND)
        req->notify = FERRY__NOTIFY_DONE;
    else if (op->kind != FERRY__OP_SYNC) {
        req->bytes_done += cover ? 0 : op->len;
        if (op->notifies)
            req->notify = FERRY__NOTIFY_DONE;
    }
    /* A staged chunk goes on (a read's copy to the device) or frees its
     * buffer; the slot is still the op's until this call. */
    if (staged)
        ferry__stage_rma_done(op, err);
    ferry__req_settle(req);
}

/* Posts p's blocked requests, rail by rail, while each rail takes them;
 * says whether any went, and whether any are left. */
static bool unblock_peer(struct ferry__xfer *x, struct ferry_peer *p,
                         bool *left)
{
    bool went = false;

    *left = false;
    for (unsigned r = 0; r < x->reg.fab.nrails; r++) {
        struct ferry__req_list *l = &p->live.blocked[r];

        /* Each turn takes the first off the list, or leaves it there
         * because the rail has no slot for p again: this ends. */
        while (l->head != NULL &&
               ferry__op_slot(x, p, &x->reg.fab.rails[r]) != NULL) {
            struct ferry_req *req = l->head;

            ferry__req_post_pending(req);
            ferry__req_settle(req);
            went = true;
        }
        *left |= l->head != NULL;
    }
    return went;
}

void ferry__reqs_unblock(struct ferry__xfer *x)
{
    struct ferry__peer_ring *ring = &x->req.blocked_peers;
    struct ferry__peer_ring *link = ring->next, *last = ring->prev;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    if (x->req.blocked == 0) {
        /* Peers whose last blocked request left its line some other way
         * (its operations came back, its deadline passed) leave too. */
        while (ring->next != ring)
            ferry__peer_ring_leave(ring->next);
        return;
    }
    /* Only the peers in line, each once: a peer that posted goes to the
     * back, behind those it went before.  Where the rail's slots
     * (tx_depth) are what is short, the first peer would otherwise take
     * every slot that came free for as long as its line lasted.  A peer
     * with nothing left blocked leaves the ring. */
    while (link != ring) {
        struct ferry__peer_ring *next = link->next;
        bool went, left;

        went = unblock_peer(x, ferry__peer_in_line(link), &left);
        if (!left) {
            ferry__peer_ring_leave(link);
        } else if (went) { /* to the back */
            ferry__peer_ring_leave(link);
            ferry__peer_ring_append(ring, link);
        }
        if (link == last)
            break;
        link = next;
    }
}

int ferry_req_cancel(ferry_req_t *req)
{
    struct ferry__lock *lock;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_req(req, "ferry_req_cancel")))
        return ret;
    lock = &ferry__fabric_of(req->ctx)->lock;
    ferry__lock_acquire(lock);
    ferry__req_end(req, FERRY_ECANCELED,
                   "cancelled by ferry_req_cancel after %llu bytes",
                   (unsigned long long)req->bytes_done);
    ferry__req_settle(req);
    ferry__lock_release(lock);
    return 0;
}

int ferry_req_close(ferry_req_t *req)
{
    struct ferry__xfer *x;
    int ret;

    ferry__error_clear();
    if (req == NULL)
        return 0;
    if ((ret = ferry__check_req(req, "ferry_req_close")))
        return ret;
    /* A second close of the handle, from any thread, stops here. */
    if (atomic_exchange_explicit(&req->freed_once, true,
                                 memory_order_relaxed))
        return ferry__error(FERRY_EHANDLE, "ferry_req_close: the request "
                            "is already closed");
    x = ferry__xfer_of(req->ctx);
    /* Acquire pairs with the release in ferry__req_settle: a retired
     * request is on the done list, which only this call takes it off. */
    if (atomic_load_explicit(&req->outcome, memory_order_acquire) !=
        FERRY_EINPROGRESS) {
        give_back(x, req);
        return 0;
    }
    ferry__lock_acquire(&x->reg.fab.lock);
    ferry__req_end(req, FERRY_ECANCELED, "freed before it ended");
    ferry__req_settle(req);
    if (req->list == &x->req.done)
        req_free(req);
    else
        req->user_freed = true; /* freed when its operations come back */
    ferry__lock_release(&x->reg.fab.lock);
    return 0;
}

int ferry_req_result(ferry_req_t *req, struct ferry_req_result *out)
{
    struct ferry_req_result r = {0};
    struct ferry__fabric *fab;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_req(req, "ferry_req_result")))
        return ret;
    if (out == NULL || out->size == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_req_result: %s; initialise it with "
                            "FERRY_REQ_RESULT_INIT",
                            out == NULL ? "out is NULL" : "out->size is 0");
    fab = ferry__fabric_of(req->ctx);
    ferry__lock_acquire(&fab->lock);
    r.status = req->status;
    r.bytes = req->bytes;
    r.bytes_done = req->bytes_done;
    r.posted_ns = req->posted_ns;
    r.ended_ns = req->ended_ns;
    r.failed_iov = req->failed_item; /* FERRY__NO_ITEM is FERRY_NO_IOV */
    r.error = req->errmsg;
    r.user_data = req->user_data;
    ferry__lock_release(&fab->lock);
    ferry__hand_back(out, &r, sizeof(r));
    return 0;
}

void ferry__reqs_destroy(struct ferry__xfer *x)
{
    /* The endpoints are closed: no operation can come back any more. */
    free_given_back(x);
    for (struct ferry_peer *p = x->reg.peers; p != NULL; p = p->next)
        for (unsigned r = 0; r < FERRY__MAX_RAILS; r++)
            while (p->live.blocked[r].head != NULL)
                ferry__req_list_move(&x->req.active, p->live.blocked[r].head);
    while (x->req.parked.head != NULL)
        ferry__req_list_move(&x->req.active, x->req.parked.head);
    while (x->req.active.head != NULL) {
        struct ferry_req *req = x->req.active.head;
        req_release(req);
        req_free(req);
    }
    while (x->req.done.head != NULL)
        req_free(x->req.done.head);
    free_spares(x);
}
