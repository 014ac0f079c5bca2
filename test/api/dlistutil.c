/*
 * Helpers of the dlist suites (see dlistutil.h).
 */
#include "dlistutil.h"

#include <string.h>

void region_local(struct region *r, ferry_context_t *ctx, size_t len)
{
    int ret;

    memset(r, 0, sizeof(*r));
    r->len = len;
    r->buf = tu_alloc_buf(len);
    r->want = tu_alloc_buf(len);
    ret = ferry_mem_register(ctx, r->buf, len, FERRY_MEM_HOST, 0, 0, &r->mem);
    ck_assert_msg(ret == 0, "local register: %s", ferry_last_error());
}

void region_remote(struct region *r, struct tu_pair *p, size_t len,
                   unsigned access)
{
    int ret;

    memset(r, 0, sizeof(*r));
    r->len = len;
    r->buf = tu_alloc_buf(len);
    r->want = tu_alloc_buf(len);
    ret = ferry_mem_register(p->target, r->buf, len, FERRY_MEM_HOST, 0,
                             access, &r->mem);
    ck_assert_msg(ret == 0, "target register: %s", ferry_last_error());
    r->rmem = tu_share(r->mem, p->peer);
}

void region_free(struct region *r)
{
    int ret = ferry_rmem_close(r->rmem);

    ck_assert_msg(ret == 0, "rmem_free: %s", ferry_last_error());
    ret = ferry_mem_close(r->mem);
    ck_assert_msg(ret == 0, "deregister: %s", ferry_last_error());
    tu_free_buf(r->buf, r->len);
    tu_free_buf(r->want, r->len);
    memset(r, 0, sizeof(*r));
}

void region_fill(struct region *r, uint64_t seed)
{
    tu_fill(r->buf, r->len, seed);
    memcpy(r->want, r->buf, r->len);
}

void region_assert(const struct region *r, const char *what)
{
    tu_assert_same(r->buf, r->want, r->len, what);
}

void tl_create(struct tlist *l, ferry_context_t *ctx,
               enum ferry_dlist_kind kind, const char *name)
{
    int ret;

    memset(l, 0, sizeof(*l));
    l->name = name;
    ret = ferry_dlist_create(ctx, kind, name, &l->dl);
    ck_assert_msg(ret == 0, "dlist_create '%s': %s", name, ferry_last_error());
}

void tl_add(struct tlist *l, struct region *r, uint64_t off, size_t bs,
            size_t count, size_t stride)
{
    struct ferry_dlist_segment seg = {
        .mem = r->rmem ? NULL : r->mem,
        .rmem = r->rmem,
        .offset = off,
        .block_size = bs,
        .count = count,
        .stride = stride,
    };
    size_t first = SIZE_MAX;
    int ret = ferry_dlist_add(l->dl, &seg, &first);

    ck_assert_msg(ret == 0, "dlist_add to '%s' (offset %llu, %zu x %zu): %s",
                  l->name, (unsigned long long)off, count, bs,
                  ferry_last_error());
    ck_assert_uint_eq(first, l->count);
    ck_assert_uint_lt(l->nseg, TL_MAXSEG);
    l->seg[l->nseg++] = (struct tseg){r, off, bs, count,
                                      count > 1 ? stride : bs, l->count};
    l->count += count;
    ck_assert_uint_eq(ferry_dlist_count(l->dl), l->count);
}

static const struct tseg *tl_seg(const struct tlist *l, size_t idx)
{
    for (size_t i = 0; i < l->nseg; i++)
        if (idx >= l->seg[i].first && idx < l->seg[i].first + l->seg[i].count)
            return &l->seg[i];
    ck_abort_msg("index %zu is not in list '%s'", idx, l->name);
    return NULL;
}

uint8_t *tl_block(const struct tlist *l, size_t idx, uint8_t **want,
                  size_t *len)
{
    const struct tseg *s = tl_seg(l, idx);
    uint64_t off = s->off + (uint64_t)(idx - s->first) * s->stride;

    if (want != NULL)
        *want = s->r->want + off;
    if (len != NULL)
        *len = s->bs;
    return s->r->buf + off;
}

void tl_fill_blocks(const struct tlist *l, uint64_t seed)
{
    for (size_t i = 0; i < l->count; i++) {
        uint8_t *want;
        size_t len;
        uint8_t *b = tl_block(l, i, &want, &len);

        tu_fill(b, len, seed + i);
        memcpy(want, b, len);
    }
}

void tl_destroy(struct tlist *l)
{
    int ret = ferry_dlist_close(l->dl);

    ck_assert_msg(ret == 0, "dlist_destroy '%s': %s", l->name,
                  ferry_last_error());
    l->dl = NULL;
}

void shadow_move(const struct tlist *src, const uint32_t *sidx,
                 const struct tlist *dst, const uint32_t *didx,
                 size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *sw, *dw;
        size_t sl, dl;

        tl_block(src, sidx[i], &sw, &sl);
        tl_block(dst, didx[i], &dw, &dl);
        ck_assert_uint_eq(sl, dl);
        memmove(dw, sw, sl);
    }
}

void assert_moved(const struct tlist *dst, const uint32_t *didx,
                  const uint32_t *sidx, size_t n, uint64_t seed,
                  const char *what)
{
    for (size_t i = 0; i < n; i++) {
        size_t len, bad;
        uint8_t *b = tl_block(dst, didx[i], NULL, &len);

        bad = tu_check(b, len, seed + sidx[i]);
        ck_assert_msg(bad == SIZE_MAX,
                      "%s: pair %zu: block %u of '%s' should hold block %u "
                      "but byte %zu of %zu differs",
                      what, i, didx[i], dst->name, sidx[i], bad, len);
    }
}

ferry_prep_t *prepare(ferry_peer_t *peer, enum ferry_op op,
                      struct tlist *local, struct tlist *remote)
{
    ferry_prep_t *prep = NULL;
    int ret = ferry_xfer_prepare(peer, op, local->dl, remote->dl, &prep);

    ck_assert_msg(ret == 0, "prepare %s '%s' <-> '%s': %s",
                  op == FERRY_OP_WRITE ? "write" : "read", local->name,
                  remote->name, ferry_last_error());
    ck_assert_ptr_nonnull(prep);
    return prep;
}

ferry_req_t *post(ferry_prep_t *prep, const uint32_t *lidx,
                  const uint32_t *ridx, size_t n,
                  const struct ferry_xfer_opts *opts, const char *what)
{
    ferry_req_t *req = NULL;
    int ret = ferry_xfer_post(prep, lidx, ridx, n, opts, &req);

    ck_assert_msg(ret == 0, "%s: post of %zu pairs failed with %s: %s", what,
                  n, ferry_strerror(ret), ferry_last_error());
    ck_assert_ptr_nonnull(req);
    return req;
}

void req_ok(ferry_req_t *req, const char *what)
{
    int ret = ferry_req_wait(req, 60000);

    ck_assert_msg(ret == 0, "%s: ended with %s: %s", what,
                  ferry_strerror(ret), ferry_last_error());
    ferry_req_close(req);
}

void post_ok(ferry_prep_t *prep, const uint32_t *lidx,
             const uint32_t *ridx, size_t n, const char *what)
{
    req_ok(post(prep, lidx, ridx, n, NULL, what), what);
}

void release(ferry_prep_t *prep)
{
    int ret = ferry_xfer_close(prep);

    ck_assert_msg(ret == 0, "xfer_release: %s", ferry_last_error());
}
