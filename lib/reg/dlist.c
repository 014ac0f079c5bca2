/*
 * Prepared descriptor lists: describe many blocks once, validate once,
 * then post by index with no allocation per block.
 *
 * A list is local (blocks of ferry_mem_t registrations) or remote (blocks
 * of imported ferry_rmem_t regions).  It is made of segments; a segment is
 * `count` blocks of `block_size` bytes, `stride` bytes apart, from
 * `offset` in one region (count 1 is an explicit entry).  Block i of a list
 * is found by a binary search over the segments' first indices, so a paged
 * KV cache of a million blocks costs one segment, not a million entries.
 *
 * ferry_xfer_prepare() checks every block of both lists against its region
 * once and freezes the lists; ferry_xfer_post() then only range-checks the
 * indices it is given.  Lists and prepared transfers are independent
 * objects: any number of them coexist over the same or different regions,
 * and posting one never touches another's state.
 */
#include "reg/dlist.h"

#include "reg/peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Frees a list whose prepared transfers are gone. */
static void dlist_free(struct ferry_dlist *dl)
{
    for (size_t i = 0; i < dl->nseg; i++)
        ferry__users_drop(dl->segs[i].mem ? &dl->segs[i].mem->users
                                          : &dl->segs[i].rmem->users);
    free(dl->segs);
    dl->magic = FERRY__MAGIC_DEAD;
    free(dl);
}

/* The context closes: its prepared transfers went first (owned.h). */
static void dlist_release(struct ferry__owned *o)
{
    dlist_free(ferry__container_of(o, struct ferry_dlist, owned));
}

int ferry_dlist_create(ferry_context_t *ctx, enum ferry_dlist_kind kind,
                       const char *name, ferry_dlist_t **out)
{
    struct ferry_dlist *dl;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_dlist_create")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_dlist_create: out is NULL");
    if (kind != FERRY_DLIST_LOCAL && kind != FERRY_DLIST_REMOTE)
        return ferry__error(FERRY_EINVAL,
                            "ferry_dlist_create: kind %d is neither "
                            "FERRY_DLIST_LOCAL nor FERRY_DLIST_REMOTE",
                            (int)kind);
    dl = calloc(1, sizeof(*dl));
    if (dl == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a list");
    dl->magic = FERRY__MAGIC_DLIST;
    dl->ctx = ctx;
    dl->kind = kind;
    snprintf(dl->name, sizeof(dl->name), "%s",
             name != NULL && name[0] ? name : "(unnamed)");
    dl->owned.stage = FERRY__OWN_AFTER_REQUESTS;
    dl->owned.release = dlist_release;
    ferry__own(&ferry__fabric_of(ctx)->owned, &dl->owned);
    *out = dl;
    return 0;
}

static int check_segment(const struct ferry_dlist *dl,
                         const struct ferry_dlist_segment *seg,
                         uint64_t *region_len)
{
    const char *n = dl->name;

    if (seg == NULL)
        return ferry__error(FERRY_EINVAL, "list '%s': segment is NULL", n);
    if (seg->block_size == 0 || seg->count == 0)
        return ferry__error(FERRY_EINVAL,
                            "list '%s': block_size %zu and count %zu must "
                            "both be at least 1",
                            n, seg->block_size, seg->count);
    if (seg->count > 1 && seg->stride < seg->block_size)
        return ferry__error(FERRY_EINVAL,
                            "list '%s': stride %zu is smaller than the "
                            "block size %zu, so blocks would overlap",
                            n, seg->stride, seg->block_size);
    if (dl->kind == FERRY_DLIST_LOCAL) {
        if (seg->rmem != NULL || seg->mem == NULL)
            return ferry__error(FERRY_EINVAL,
                                "list '%s' is local: give segment.mem (a "
                                "ferry_mem_t) and no rmem",
                                n);
        if (ferry__check_mem(seg->mem, "segment.mem"))
            return FERRY_EHANDLE;
        if (seg->mem->ctx != dl->ctx)
            return ferry__error(FERRY_EHANDLE,
                                "list '%s': segment.mem belongs to another "
                                "context",
                                n);
        *region_len = seg->mem->len;
    } else {
        if (seg->mem != NULL || seg->rmem == NULL)
            return ferry__error(FERRY_EINVAL,
                                "list '%s' is remote: give segment.rmem (a "
                                "ferry_rmem_t) and no mem",
                                n);
        if (ferry__check_rmem(seg->rmem, "segment.rmem"))
            return FERRY_EHANDLE;
        if (seg->rmem->peer->ctx != dl->ctx)
            return ferry__error(FERRY_EHANDLE,
                                "list '%s': segment.rmem belongs to another "
                                "context",
                                n);
        *region_len = seg->rmem->len;
    }
    return 0;
}

/* Last byte a segment touches must lie inside its region. */
static int check_bounds(const struct ferry_dlist *dl,
                        const struct ferry__dseg *s, uint64_t region_len)
{
    uint64_t span, end;

    if (__builtin_mul_overflow((uint64_t)(s->count - 1), (uint64_t)s->stride,
                               &span) ||
        __builtin_add_overflow(span, (uint64_t)s->block_size, &span) ||
        __builtin_add_overflow(span, s->offset, &end) || end > region_len)
        return ferry__error(FERRY_ERANGE,
                            "list '%s': blocks %zu..%zu (offset %llu, %zu "
                            "blocks of %zu bytes every %zu bytes) run past "
                            "the end of their %llu-byte region",
                            dl->name, s->first, s->first + s->count - 1,
                            (unsigned long long)s->offset, s->count,
                            s->block_size, s->stride,
                            (unsigned long long)region_len);
    return 0;
}

/* ferry_dlist_add's work; caller holds the lock. */
static int append_locked(struct ferry__lock *lock, ferry_dlist_t *dl,
                         const struct ferry_dlist_segment *seg,
                         uint64_t region_len, size_t *first_index)
{
    struct ferry__dseg s = {0};
    int ret;

    FERRY__ASSERT_LOCKED(lock);
    if (atomic_load(&dl->frozen))
        return ferry__error(FERRY_EBUSY,
                            "list '%s' is used by a prepared transfer and "
                            "cannot change; build a new list",
                            dl->name);
    if (dl->count > SIZE_MAX - seg->count || dl->count + seg->count > UINT32_MAX)
        return ferry__error(FERRY_EOVERFLOW,
                            "list '%s' would hold more than %u blocks "
                            "(indices are 32-bit)",
                            dl->name, UINT32_MAX);
    s.mem = seg->mem;
    s.rmem = seg->rmem;
    s.offset = seg->offset;
    s.block_size = seg->block_size;
    s.count = seg->count;
    s.stride = seg->count > 1 ? seg->stride : seg->block_size;
    s.first = dl->count;
    if ((ret = check_bounds(dl, &s, region_len)))
        return ret;
    if (dl->nseg == dl->cap) {
        size_t cap = dl->cap ? dl->cap * 2 : 4;
        struct ferry__dseg *segs = realloc(dl->segs, cap * sizeof(*segs));
        if (segs == NULL)
            return ferry__error(FERRY_ENOMEM, "out of memory for list '%s'",
                                dl->name);
        dl->segs = segs;
        dl->cap = cap;
    }
    /* The list keeps its regions alive: deregistration says EBUSY. */
    ferry__users_take(s.mem ? &s.mem->users : &s.rmem->users, lock);
    dl->segs[dl->nseg++] = s;
    if (dl->nseg == 1)
        dl->uniform_block = s.block_size;
    else if (dl->uniform_block != s.block_size)
        dl->uniform_block = 0;
    if (first_index != NULL)
        *first_index = dl->count;
    dl->count += s.count;
    return 0;
}

int ferry_dlist_add(ferry_dlist_t *dl, const struct ferry_dlist_segment *seg,
                    size_t *first_index)
{
    struct ferry__lock *lock;
    uint64_t region_len = 0;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_dlist(dl, "ferry_dlist_add")))
        return ret;
    if ((ret = check_segment(dl, seg, &region_len)))
        return ret;
    /*
     * Appending is serialised with other appends and with
     * ferry_xfer_prepare() by the context lock.  Unlocked, two threads
     * adding to one list raced on count/nseg and on the realloc of segs
     * (lost blocks, duplicate indices, heap corruption), and an append
     * that had passed the frozen check could realloc segs under a
     * prepared transfer that was already posting from them.
     */
    lock = &ferry__fabric_of(dl->ctx)->lock;
    ferry__lock_acquire(lock);
    ret = append_locked(lock, dl, seg, region_len, first_index);
    ferry__lock_release(lock);
    return ret;
}

size_t ferry_dlist_count(const ferry_dlist_t *dl)
{
    return dl != NULL && dl->magic == FERRY__MAGIC_DLIST ? dl->count : 0;
}

int ferry_dlist_close(ferry_dlist_t *dl)
{
    struct ferry__lock *lock;
    unsigned users;
    int ret;

    ferry__error_clear();
    if (dl == NULL)
        return 0;
    if ((ret = ferry__check_dlist(dl, "ferry_dlist_close")))
        return ret;
    lock = &ferry__fabric_of(dl->ctx)->lock;
    ferry__lock_acquire(lock);
    users = ferry__users_read(&dl->prepared, lock);
    ferry__lock_release(lock);
    if (users != 0)
        return ferry__error(FERRY_EBUSY,
                            "list '%s' is used by %u prepared transfer%s; "
                            "ferry_xfer_close them first",
                            dl->name, users, users == 1 ? "" : "s");
    ferry__disown(&ferry__fabric_of(dl->ctx)->owned, &dl->owned);
    dlist_free(dl);
    return 0;
}

const struct ferry__dseg *ferry__dlist_find(const struct ferry_dlist *dl,
                                            size_t idx)
{
    size_t lo = 0, hi = dl->nseg;

    /* The last segment whose first index is <= idx. */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (dl->segs[mid].first <= idx)
            lo = mid;
        else
            hi = mid;
    }
    return &dl->segs[lo];
}

void ferry__dlist_block(const struct ferry_dlist *dl, size_t idx,
                        struct ferry__block *b)
{
    const struct ferry__dseg *s = ferry__dlist_find(dl, idx);
    uint64_t off = s->offset + (uint64_t)(idx - s->first) * s->stride;

    b->mem = s->mem;
    b->rmem = s->rmem;
    b->offset = off;
    b->len = s->block_size;
}

/* ---- prepared transfers ---------------------------------------------------- */

static int check_remote_list(const struct ferry_peer *peer,
                             const struct ferry_dlist *dl, unsigned need)
{
    for (size_t i = 0; i < dl->nseg; i++) {
        const struct ferry_rmem *r = dl->segs[i].rmem;

        if (r->peer != peer)
            return ferry__error(FERRY_EHANDLE,
                                "list '%s': blocks from %zu come from a "
                                "region imported from another peer",
                                dl->name, dl->segs[i].first);
        if (!(r->access & need))
            return ferry__error(FERRY_EINVAL,
                                "list '%s': blocks from %zu lie in a region "
                                "exported without remote %s access",
                                dl->name, dl->segs[i].first,
                                need == FERRY_ACCESS_REMOTE_WRITE ? "write"
                                                                  : "read");
    }
    return 0;
}

/* ferry_xfer_prepare's checks and freezing; caller holds the lock. */
static int prepare_locked(struct ferry__lock *lock, ferry_peer_t *peer,
                          enum ferry_op op,
                          ferry_dlist_t *local, ferry_dlist_t *remote,
                          struct ferry_prep *prep)
{
    unsigned need;
    int ret;

    FERRY__ASSERT_LOCKED(lock);
    if (local->count == 0 || remote->count == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_xfer_prepare: list '%s' is empty",
                            local->count == 0 ? local->name : remote->name);
    need = op == FERRY_OP_WRITE ? FERRY_ACCESS_REMOTE_WRITE
                                : FERRY_ACCESS_REMOTE_READ;
    if ((ret = check_remote_list(peer, remote, need)))
        return ret;
    prep->magic = FERRY__MAGIC_PREP;
    prep->peer = peer;
    prep->op = op;
    prep->local = local;
    prep->remote = remote;
    /* Equal uniform block sizes: no length check per posted block. */
    prep->same_blocks = local->uniform_block != 0 &&
                        local->uniform_block == remote->uniform_block;
    atomic_store(&local->frozen, true);
    atomic_store(&remote->frozen, true);
    ferry__users_take(&local->prepared, lock);
    ferry__users_take(&remote->prepared, lock);
    return 0;
}

/* Frees a prepared transfer with no request in flight. */
static void prep_free(struct ferry_prep *prep)
{
    ferry__users_drop(&prep->local->prepared);
    ferry__users_drop(&prep->remote->prepared);
    prep->magic = FERRY__MAGIC_DEAD;
    free(prep);
}

/* The context closes: its requests are gone (owned.h). */
static void prep_release(struct ferry__owned *o)
{
    prep_free(ferry__container_of(o, struct ferry_prep, owned));
}

int ferry_xfer_prepare(ferry_peer_t *peer, enum ferry_op op,
                       ferry_dlist_t *local, ferry_dlist_t *remote,
                       ferry_prep_t **out)
{
    struct ferry__lock *lock;
    struct ferry_prep *prep;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_xfer_prepare")) ||
        (ret = ferry__check_dlist(local, "ferry_xfer_prepare local")) ||
        (ret = ferry__check_dlist(remote, "ferry_xfer_prepare remote")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_xfer_prepare: out is NULL");
    if (op != FERRY_OP_WRITE && op != FERRY_OP_READ)
        return ferry__error(FERRY_EINVAL,
                            "ferry_xfer_prepare: op %d is neither "
                            "FERRY_OP_WRITE nor FERRY_OP_READ",
                            (int)op);
    if (local->kind != FERRY_DLIST_LOCAL || remote->kind != FERRY_DLIST_REMOTE)
        return ferry__error(FERRY_EINVAL,
                            "ferry_xfer_prepare: list '%s' must be local and "
                            "list '%s' remote",
                            local->name, remote->name);
    if (local->ctx != peer->ctx || remote->ctx != peer->ctx)
        return ferry__error(FERRY_EHANDLE,
                            "ferry_xfer_prepare: list '%s' belongs to another "
                            "context than the peer",
                            local->ctx != peer->ctx ? local->name
                                                    : remote->name);
    prep = calloc(1, sizeof(*prep));
    if (prep == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a prepared "
                            "transfer");
    /* Under the lock ferry_dlist_add appends with: the lists are checked
     * and frozen as one step, so no segment slips in after the check. */
    lock = &ferry__fabric_of(peer->ctx)->lock;
    ferry__lock_acquire(lock);
    ret = prepare_locked(lock, peer, op, local, remote, prep);
    ferry__lock_release(lock);
    if (ret != 0) {
        free(prep);
        return ret;
    }
    prep->owned.stage = FERRY__OWN_AFTER_REQUESTS;
    prep->owned.release = prep_release;
    ferry__own(&ferry__fabric_of(peer->ctx)->owned, &prep->owned);
    *out = prep;
    return 0;
}

int ferry_xfer_close(ferry_prep_t *prep)
{
    struct ferry__lock *lock;
    unsigned users;
    int ret;

    ferry__error_clear();
    if (prep == NULL)
        return 0;
    if ((ret = ferry__check_prep(prep, "ferry_xfer_close")))
        return ret;
    lock = &ferry__fabric_of(prep->peer->ctx)->lock;
    ferry__lock_acquire(lock);
    users = prep->requests;
    ferry__lock_release(lock);
    if (users != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_xfer_close: %u request%s posted from "
                            "this prepared transfer %s still in flight",
                            users, users == 1 ? "" : "s",
                            users == 1 ? "is" : "are");
    ferry__disown(&ferry__fabric_of(prep->peer->ctx)->owned, &prep->owned);
    prep_free(prep);
    return 0;
}

/* Range and length checks of the indices a post names. */
int ferry__prep_check_indices(const struct ferry_prep *prep,
                              const uint32_t *lidx, const uint32_t *ridx,
                              size_t n)
{
    const struct ferry_dlist *l = prep->local, *r = prep->remote;

    for (size_t i = 0; i < n; i++) {
        if (lidx[i] >= l->count)
            return ferry__error(FERRY_ERANGE,
                                "local_idx[%zu] = %u is out of range for "
                                "list '%s' (valid: 0..%zu)",
                                i, lidx[i], l->name, l->count - 1);
        if (ridx[i] >= r->count)
            return ferry__error(FERRY_ERANGE,
                                "remote_idx[%zu] = %u is out of range for "
                                "list '%s' (valid: 0..%zu)",
                                i, ridx[i], r->name, r->count - 1);
        if (!prep->same_blocks) {
            size_t ll = ferry__dlist_find(l, lidx[i])->block_size;
            size_t rl = ferry__dlist_find(r, ridx[i])->block_size;
            if (ll != rl)
                return ferry__error(FERRY_EINVAL,
                                    "pair %zu: block %u of list '%s' is %zu "
                                    "bytes but block %u of list '%s' is %zu",
                                    i, lidx[i], l->name, ll, ridx[i], r->name,
                                    rl);
        }
    }
    return 0;
}

uint64_t ferry__prep_bytes(const struct ferry_prep *prep, const uint32_t *lidx,
                           size_t n)
{
    uint64_t bytes = 0;

    if (prep->local->uniform_block != 0)
        return (uint64_t)n * prep->local->uniform_block;
    for (size_t i = 0; i < n; i++)
        bytes += ferry__dlist_find(prep->local, lidx[i])->block_size;
    return bytes;
}
