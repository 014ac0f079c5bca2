/*
 * dlist module through the API: prepared descriptor lists.  Paged lists
 * (one segment per layer) moved by index, block a to block b, for writes
 * and reads, with every moved block checked and every other byte
 * unchanged; two caches prepared separately and posted interleaved (the
 * regression another library had), from one thread and from two, and a
 * second preparation of the same lists; every check made when a segment
 * is added or lists are prepared, and the EBUSY rules; and prepared posts
 * that carry a notification.  (Explicit entries beside paged segments,
 * invalid indices, concurrent adds, releases in flight and 100k block
 * pairs, with what was posted and held counted inside:
 * test/unit/check_dlist.c.)
 */
#include "dlistutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- paged lists -------------------------------------------------------- */

#define LAYERS 4
#define LAYER_BLOCKS 256
#define PBLOCK (4 * KiB)
#define PBLOCKS (LAYERS * LAYER_BLOCKS)
/* Remote layers: their own regions, blocks with 512-byte gaps between. */
#define RGAP 512
#define RSTRIDE (PBLOCK + RGAP)
#define RLAYER_LEN (RGAP + LAYER_BLOCKS * RSTRIDE)

struct paged {
    struct tu_pair p;
    struct region local;
    struct region remote[LAYERS];
    struct tlist ll, rl;
};

static void paged_open(struct paged *g, const char *prov)
{
    tu_pair_open_threads(&g->p, prov, NULL, 0, 1);
    region_local(&g->local, g->p.init, PBLOCKS * PBLOCK);
    tl_create(&g->ll, g->p.init, FERRY_DLIST_LOCAL, "kv_local");
    tl_create(&g->rl, g->p.init, FERRY_DLIST_REMOTE, "kv_remote");
    for (size_t l = 0; l < LAYERS; l++) {
        region_remote(&g->remote[l], &g->p, RLAYER_LEN, RW);
        /* One paged segment per layer, on each side. */
        tl_add(&g->ll, &g->local, l * LAYER_BLOCKS * PBLOCK, PBLOCK,
               LAYER_BLOCKS, PBLOCK);
        tl_add(&g->rl, &g->remote[l], RGAP, PBLOCK, LAYER_BLOCKS, RSTRIDE);
    }
    ck_assert_uint_eq(ferry_dlist_count(g->ll.dl), PBLOCKS);
    ck_assert_uint_eq(ferry_dlist_count(g->rl.dl), PBLOCKS);
}

static void paged_assert(const struct paged *g, const char *what)
{
    region_assert(&g->local, what);
    for (size_t l = 0; l < LAYERS; l++)
        region_assert(&g->remote[l], what);
}

static void paged_close(struct paged *g)
{
    tl_destroy(&g->ll);
    tl_destroy(&g->rl);
    region_free(&g->local);
    for (size_t l = 0; l < LAYERS; l++)
        region_free(&g->remote[l]);
    tu_pair_close(&g->p);
}

/*
 * n pairs: dst indices all distinct (so the outcome is defined), sources
 * anywhere; every tenth pair moves a block onto the same index.
 */
static void make_pairs(uint32_t *src, uint32_t *dst, size_t n, size_t count,
                       uint32_t a, uint32_t b)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = (uint32_t)((i * 613 + a) % count); /* 613 odd: distinct */
        src[i] = i % 10 == 0 ? dst[i] : (uint32_t)((i * 37 + b) % count);
    }
}

START_TEST(test_paged_write)
{
    const char *prov = tu_providers[_i];
    static uint32_t lidx[400], ridx[400];
    struct paged g;
    ferry_prep_t *prep;
    size_t moved_across = 0;

    paged_open(&g, prov);
    region_fill(&g.local, 0x10);
    for (size_t l = 0; l < LAYERS; l++)
        region_fill(&g.remote[l], 0x20 + l);
    tl_fill_blocks(&g.ll, 0x100000);
    prep = prepare(g.p.peer, FERRY_OP_WRITE, &g.ll, &g.rl);

    for (unsigned round = 0; round < 3; round++) {
        size_t n = round == 0 ? 400 : round == 1 ? 1 : 97;

        make_pairs(lidx, ridx, n, PBLOCKS, 11 + round * 5, 500 + round);
        for (size_t i = 0; i < n; i++)
            moved_across += lidx[i] / LAYER_BLOCKS != ridx[i] / LAYER_BLOCKS;
        post_ok(prep, lidx, ridx, n, prov);
        shadow_move(&g.ll, lidx, &g.rl, ridx, n);
        assert_moved(&g.rl, ridx, lidx, n, 0x100000, prov);
        /* Untouched blocks, the gaps, and the local side stay as they
         * were. */
        paged_assert(&g, prov);
    }
    ck_assert_uint_gt(moved_across, 100);
    release(prep);
    paged_close(&g);
}
END_TEST

START_TEST(test_paged_read)
{
    const char *prov = tu_providers[_i];
    static uint32_t lidx[400], ridx[400];
    struct paged g;
    ferry_prep_t *prep;

    paged_open(&g, prov);
    region_fill(&g.local, 0x30);
    for (size_t l = 0; l < LAYERS; l++)
        region_fill(&g.remote[l], 0x40 + l);
    tl_fill_blocks(&g.rl, 0x200000);
    prep = prepare(g.p.peer, FERRY_OP_READ, &g.ll, &g.rl);
    for (unsigned round = 0; round < 3; round++) {
        size_t n = round == 0 ? 400 : round == 1 ? 1 : 230;

        /* Reads: local indices distinct. */
        make_pairs(ridx, lidx, n, PBLOCKS, 3 + round * 7, 900 + round);
        post_ok(prep, lidx, ridx, n, prov);
        shadow_move(&g.rl, ridx, &g.ll, lidx, n);
        assert_moved(&g.ll, lidx, ridx, n, 0x200000, prov);
        paged_assert(&g, prov);
    }
    release(prep);
    paged_close(&g);
}
END_TEST

/* ---- two caches, prepared separately, posted interleaved ---------------- */

#define KV_BLOCKS 64
#define KV_BLOCK (16 * KiB)
#define ST_BLOCKS 200
#define ST_BLOCK 1000
#define ST_STRIDE 1024

struct caches {
    struct region kv_l, kv_r, st_l, st_r;
    struct tlist kvl, kvr, stl, str;
};

static void caches_open(struct caches *c, struct tu_pair *p)
{
    region_local(&c->kv_l, p->init, KV_BLOCKS * KV_BLOCK);
    region_remote(&c->kv_r, p, 2 * KV_BLOCKS * KV_BLOCK, RW);
    region_local(&c->st_l, p->init, ST_BLOCKS * ST_STRIDE);
    region_remote(&c->st_r, p, ST_BLOCKS * ST_STRIDE + 64, RW);
    region_fill(&c->kv_l, 0x61);
    region_fill(&c->kv_r, 0x62);
    region_fill(&c->st_l, 0x63);
    region_fill(&c->st_r, 0x64);
    tl_create(&c->kvl, p->init, FERRY_DLIST_LOCAL, "kv");
    tl_create(&c->kvr, p->init, FERRY_DLIST_REMOTE, "kv_remote");
    tl_create(&c->stl, p->init, FERRY_DLIST_LOCAL, "state");
    tl_create(&c->str, p->init, FERRY_DLIST_REMOTE, "state_remote");
    tl_add(&c->kvl, &c->kv_l, 0, KV_BLOCK, KV_BLOCKS, KV_BLOCK);
    /* The remote KV cache: two layers of 32 blocks, K and V interleaved. */
    tl_add(&c->kvr, &c->kv_r, 0, KV_BLOCK, KV_BLOCKS / 2, 2 * KV_BLOCK);
    tl_add(&c->kvr, &c->kv_r, KV_BLOCKS * KV_BLOCK + KV_BLOCK, KV_BLOCK,
           KV_BLOCKS / 2, 2 * KV_BLOCK);
    tl_add(&c->stl, &c->st_l, 0, ST_BLOCK, ST_BLOCKS, ST_STRIDE);
    tl_add(&c->str, &c->st_r, 64, ST_BLOCK, ST_BLOCKS, ST_STRIDE);
}

static void caches_assert(const struct caches *c, const char *what)
{
    region_assert(&c->kv_l, what);
    region_assert(&c->kv_r, what);
    region_assert(&c->st_l, what);
    region_assert(&c->st_r, what);
}

static void caches_close(struct caches *c)
{
    tl_destroy(&c->kvl);
    tl_destroy(&c->kvr);
    tl_destroy(&c->stl);
    tl_destroy(&c->str);
    region_free(&c->kv_l);
    region_free(&c->kv_r);
    region_free(&c->st_l);
    region_free(&c->st_r);
}

START_TEST(test_two_caches_interleaved)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    struct caches c;
    ferry_prep_t *kv, *st, *kv2, *kvread, *stread;
    uint32_t kl[KV_BLOCKS], kr[KV_BLOCKS], sl[ST_BLOCKS], sr[ST_BLOCKS];
    char what[96];
    int ret;

    tu_pair_open_threads(&p, prov, NULL, 0, 1);
    caches_open(&c, &p);
    kv = prepare(p.peer, FERRY_OP_WRITE, &c.kvl, &c.kvr);
    st = prepare(p.peer, FERRY_OP_WRITE, &c.stl, &c.str);

    for (unsigned it = 0; it < 40; it++) {
        size_t nk = 1 + it % KV_BLOCKS, ns = 1 + (it * 37) % ST_BLOCKS;
        uint64_t kseed = 0x1000000 + it * 0x1000, sseed = 0x2000000 +
                                                          it * 0x1000;
        ferry_req_t *a, *b;

        snprintf(what, sizeof(what), "%s, iteration %u", prov, it);
        tl_fill_blocks(&c.kvl, kseed);
        tl_fill_blocks(&c.stl, sseed);
        make_pairs(kl, kr, nk, KV_BLOCKS, it, 2 * it + 1);
        make_pairs(sl, sr, ns, ST_BLOCKS, 3 * it, it + 7);
        /* Both in flight at once, finished in either order. */
        if (it % 2 == 0) {
            a = post(kv, kl, kr, nk, NULL, what);
            b = post(st, sl, sr, ns, NULL, what);
        } else {
            b = post(st, sl, sr, ns, NULL, what);
            a = post(kv, kl, kr, nk, NULL, what);
        }
        if (it % 3 == 0) {
            req_ok(b, what);
            req_ok(a, what);
        } else {
            req_ok(a, what);
            req_ok(b, what);
        }
        shadow_move(&c.kvl, kl, &c.kvr, kr, nk);
        shadow_move(&c.stl, sl, &c.str, sr, ns);
        assert_moved(&c.kvr, kr, kl, nk, kseed, what);
        assert_moved(&c.str, sr, sl, ns, sseed, what);
        caches_assert(&c, what);
    }

    /* A second preparation of the very same lists, and reads over both,
     * alongside the first ones. */
    kv2 = prepare(p.peer, FERRY_OP_WRITE, &c.kvl, &c.kvr);
    kvread = prepare(p.peer, FERRY_OP_READ, &c.kvl, &c.kvr);
    stread = prepare(p.peer, FERRY_OP_READ, &c.stl, &c.str);
    /* Three preparations use the list: it cannot go, and says so. */
    ck_assert_int_eq(ferry_dlist_close(c.kvl.dl), FERRY_EBUSY);
    tu_assert_sentence("'kv'", "used by 3 prepared transfers;", NULL);
    for (unsigned it = 0; it < 12; it++) {
        ferry_prep_t *w = it % 2 ? kv2 : kv;
        uint64_t kseed = 0x3000000 + it * 0x1000;
        ferry_req_t *a, *b;
        size_t nk = 1 + (it * 11) % KV_BLOCKS, ns = 1 + (it * 53) %
                                                          ST_BLOCKS;

        snprintf(what, sizeof(what), "%s, second round %u", prov, it);
        tl_fill_blocks(&c.kvl, kseed);
        make_pairs(kl, kr, nk, KV_BLOCKS, 5 * it, it);
        a = post(w, kl, kr, nk, NULL, what);
        /* Read state blocks back into distinct local blocks. */
        make_pairs(sr, sl, ns, ST_BLOCKS, it, 13 * it);
        b = post(stread, sl, sr, ns, NULL, what);
        req_ok(a, what);
        req_ok(b, what);
        shadow_move(&c.kvl, kl, &c.kvr, kr, nk);
        shadow_move(&c.str, sr, &c.stl, sl, ns);
        assert_moved(&c.kvr, kr, kl, nk, kseed, what);
        caches_assert(&c, what);

        /* And read some KV blocks back through the third preparation. */
        make_pairs(kr, kl, nk, KV_BLOCKS, it + 1, 3 * it);
        req_ok(post(kvread, kl, kr, nk, NULL, what), what);
        shadow_move(&c.kvr, kr, &c.kvl, kl, nk);
        caches_assert(&c, what);
    }

    /* Releasing one preparation leaves the others working. */
    release(kv);
    ret = ferry_dlist_close(c.kvl.dl);
    ck_assert_int_eq(ret, FERRY_EBUSY);
    tu_assert_sentence("'kv'", "2 prepared transfers", NULL);
    tl_fill_blocks(&c.kvl, 0x4000000);
    make_pairs(kl, kr, KV_BLOCKS, KV_BLOCKS, 9, 4);
    post_ok(kv2, kl, kr, KV_BLOCKS, prov);
    shadow_move(&c.kvl, kl, &c.kvr, kr, KV_BLOCKS);
    assert_moved(&c.kvr, kr, kl, KV_BLOCKS, 0x4000000, prov);
    caches_assert(&c, "after releasing the first preparation");

    release(kv2);
    release(kvread);
    release(st);
    release(stread);
    caches_close(&c);
    tu_pair_close(&p);
}
END_TEST

/*
 * The same, from two threads at once: each posts its own preparation over
 * its own cache, in a loop, and checks its blocks every time.
 */
struct cache_thread {
    pthread_t tid;
    ferry_prep_t *prep;
    struct tlist *l, *r;
    unsigned iters;
    uint64_t seed;
    char err[256];
};

static void *cache_thread_main(void *arg)
{
    struct cache_thread *ct = arg;
    uint32_t li[ST_BLOCKS], ri[ST_BLOCKS];

    for (unsigned it = 0; it < ct->iters && ct->err[0] == 0; it++) {
        size_t n = 1 + (it * 29) % ct->l->count;
        uint64_t seed = ct->seed + it * 0x1000;
        ferry_req_t *req = NULL;
        int ret;

        if (n > ct->r->count)
            n = ct->r->count;
        tl_fill_blocks(ct->l, seed);
        make_pairs(li, ri, n, ct->r->count < ct->l->count ? ct->r->count
                                                          : ct->l->count,
                   it, 2 * it);
        ret = ferry_xfer_post(ct->prep, li, ri, n, NULL, &req);
        if (ret == 0)
            ret = ferry_req_wait(req, 60000);
        if (ret != 0) {
            snprintf(ct->err, sizeof(ct->err), "'%s' iteration %u: %s: %s",
                     ct->l->name, it, ferry_strerror(ret),
                     ferry_last_error());
        }
        ferry_req_close(req);
        for (size_t i = 0; i < n && ct->err[0] == 0; i++) {
            size_t len;
            uint8_t *b = tl_block(ct->r, ri[i], NULL, &len);
            size_t bad = tu_check(b, len, seed + li[i]);

            if (bad != SIZE_MAX)
                snprintf(ct->err, sizeof(ct->err),
                         "'%s' iteration %u: block %u byte %zu wrong",
                         ct->r->name, it, ri[i], bad);
        }
    }
    return NULL;
}

START_TEST(test_two_caches_threads)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    struct caches c;
    struct cache_thread ct[2];

    tu_pair_open_threads(&p, prov, NULL, 0, 1);
    caches_open(&c, &p);
    ct[0] = (struct cache_thread){.prep = prepare(p.peer, FERRY_OP_WRITE,
                                                  &c.kvl, &c.kvr),
                                  .l = &c.kvl,
                                  .r = &c.kvr,
                                  .iters = 60,
                                  .seed = 0x7000000};
    ct[1] = (struct cache_thread){.prep = prepare(p.peer, FERRY_OP_WRITE,
                                                  &c.stl, &c.str),
                                  .l = &c.stl,
                                  .r = &c.str,
                                  .iters = 60,
                                  .seed = 0x8000000};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&ct[i].tid, NULL, cache_thread_main,
                                        &ct[i]),
                         0);
    for (int i = 0; i < 2; i++)
        pthread_join(ct[i].tid, NULL);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(ct[i].err[0] == 0, "%s: %s", prov, ct[i].err);
    release(ct[0].prep);
    release(ct[1].prep);
    caches_close(&c);
    tu_pair_close(&p);
}
END_TEST

/* ---- checks when adding ------------------------------------------------- */

/* Adds seg to dl, expecting err; the list must not change. */
static void add_refused(ferry_dlist_t *dl, struct ferry_dlist_segment seg,
                        int err, const char *why)
{
    size_t before = ferry_dlist_count(dl), first = 12345;
    int ret = ferry_dlist_add(dl, &seg, &first);

    ck_assert_msg(ret == err, "%s: expected %s, got %s: %s", why,
                  ferry_strerror(err), ferry_strerror(ret),
                  ferry_last_error());
    ck_assert_msg(ferry_last_error()[0] != 0, "%s: no sentence", why);
    ck_assert_uint_eq(ferry_dlist_count(dl), before);
    ck_assert_uint_eq(first, 12345);
}

START_TEST(test_add_validation)
{
    struct tu_pair p;
    struct region lr, rr, tr;
    struct tlist l, r;
    ferry_dlist_t *dl = NULL;
    struct ferry_dlist_segment seg;
    const size_t len = MiB;

    tu_pair_open_threads(&p, tu_tcp(), NULL, 0, 1);
    region_local(&lr, p.init, len);
    region_remote(&rr, &p, len, RW);
    /* A region of the target's context, not the initiator's. */
    region_local(&tr, p.target, 4096);
    tl_create(&l, p.init, FERRY_DLIST_LOCAL, "kv");
    tl_create(&r, p.init, FERRY_DLIST_REMOTE, "kvr");
    tl_add(&l, &lr, 0, 4096, 10, 4096);

    /* Past the end of the region: 10 + 256 blocks from 4096 end at
     * 1 MiB + 4096. */
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = 4096,
                                       .block_size = 4096,
                                       .count = 256,
                                       .stride = 4096};
    add_refused(l.dl, seg, FERRY_ERANGE, "past the end");
    tu_assert_sentence("list 'kv'", "blocks 10..265", "1048576-byte region",
                       NULL);
    /* Exactly to the end is fine. */
    seg.offset = 0;
    tl_add(&l, &lr, 0, 4096, 256, 4096);
    /* The stride counts, not only the block size. */
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = 0,
                                       .block_size = 100,
                                       .count = 257,
                                       .stride = 4096};
    add_refused(l.dl, seg, FERRY_ERANGE, "stride past the end");
    tu_assert_sentence("list 'kv'", "blocks 266..522", NULL);
    /* One explicit entry one byte too long, then just right. */
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = len - 100,
                                       .block_size = 101,
                                       .count = 1};
    add_refused(l.dl, seg, FERRY_ERANGE, "entry past the end");
    tu_assert_sentence("list 'kv'", "blocks 266..266", NULL);
    tl_add(&l, &lr, len - 100, 100, 1, 0);

    /* Overflow of (count - 1) * stride, and of offset + span. */
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = 0,
                                       .block_size = 64,
                                       .count = 1u << 20,
                                       .stride = (size_t)1 << 48};
    add_refused(l.dl, seg, FERRY_ERANGE, "count * stride overflows");
    tu_assert_sentence("list 'kv'", "run past", NULL);
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = UINT64_MAX - 10,
                                       .block_size = 64,
                                       .count = 1};
    add_refused(l.dl, seg, FERRY_ERANGE, "offset + block overflows");
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = 0,
                                       .block_size = SIZE_MAX,
                                       .count = 2,
                                       .stride = SIZE_MAX};
    add_refused(l.dl, seg, FERRY_ERANGE, "block size overflows");
    /* More blocks than 32-bit indices reach. */
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = 0,
                                       .block_size = 1,
                                       .count = (size_t)UINT32_MAX + 1,
                                       .stride = 1};
    add_refused(l.dl, seg, FERRY_EOVERFLOW, "2^32 blocks");
    tu_assert_sentence("list 'kv'", "32-bit", NULL);

    /* Shapes. */
    seg = (struct ferry_dlist_segment){.mem = lr.mem,
                                       .offset = 0,
                                       .block_size = 4096,
                                       .count = 2,
                                       .stride = 4095};
    add_refused(l.dl, seg, FERRY_EINVAL, "stride < block size");
    tu_assert_sentence("list 'kv'", "stride 4095", "block size 4096", NULL);
    seg.stride = 0;
    add_refused(l.dl, seg, FERRY_EINVAL, "stride 0");
    /* One block: the stride does not matter. */
    tl_add(&l, &lr, 8192, 4096, 1, 0);
    seg = (struct ferry_dlist_segment){.mem = lr.mem, .block_size = 0,
                                       .count = 1};
    add_refused(l.dl, seg, FERRY_EINVAL, "block size 0");
    seg = (struct ferry_dlist_segment){.mem = lr.mem, .block_size = 64,
                                       .count = 0};
    add_refused(l.dl, seg, FERRY_EINVAL, "count 0");
    ck_assert_int_eq(ferry_dlist_add(l.dl, NULL, NULL), FERRY_EINVAL);
    ck_assert_int_eq(ferry_dlist_add(NULL, &seg, NULL), FERRY_EINVAL);
    ck_assert_int_eq(ferry_dlist_add((ferry_dlist_t *)lr.mem, &seg, NULL),
                     FERRY_EHANDLE);

    /* Regions of the wrong kind for the list. */
    seg = (struct ferry_dlist_segment){.rmem = rr.rmem, .block_size = 64,
                                       .count = 1};
    add_refused(l.dl, seg, FERRY_EINVAL, "rmem on a local list");
    tu_assert_sentence("list 'kv' is local", NULL);
    seg = (struct ferry_dlist_segment){.mem = lr.mem, .block_size = 64,
                                       .count = 1};
    add_refused(r.dl, seg, FERRY_EINVAL, "mem on a remote list");
    tu_assert_sentence("list 'kvr' is remote", NULL);
    seg = (struct ferry_dlist_segment){.mem = lr.mem, .rmem = rr.rmem,
                                       .block_size = 64, .count = 1};
    add_refused(l.dl, seg, FERRY_EINVAL, "both on a local list");
    add_refused(r.dl, seg, FERRY_EINVAL, "both on a remote list");
    seg = (struct ferry_dlist_segment){.block_size = 64, .count = 1};
    add_refused(l.dl, seg, FERRY_EINVAL, "neither");
    /* A handle of another kind where the region goes. */
    seg = (struct ferry_dlist_segment){.mem = (ferry_mem_t *)rr.rmem,
                                       .block_size = 64, .count = 1};
    add_refused(l.dl, seg, FERRY_EHANDLE, "rmem passed as mem");
    /* A registration of another context. */
    seg = (struct ferry_dlist_segment){.mem = tr.mem, .block_size = 64,
                                       .count = 1};
    add_refused(l.dl, seg, FERRY_EHANDLE, "mem of another context");
    tu_assert_sentence("list 'kv'", "another context", NULL);
    {
        /* A remote region imported by another context. */
        ferry_context_t *other;
        ferry_peer_t *opeer;
        ferry_rmem_t *ormem;
        struct ferry_config cfg;
        uint8_t addr[512];
        size_t alen = sizeof(addr);

        tu_config(&cfg, tu_tcp());
        ck_assert_int_eq(ferry_context_create(&cfg, &other), 0);
        ck_assert_int_eq(ferry_context_address(p.target, addr, &alen), 0);
        ck_assert_int_eq(ferry_peer_add(other, addr, alen, &opeer), 0);
        ormem = tu_share(rr.mem, opeer);
        seg = (struct ferry_dlist_segment){.rmem = ormem, .block_size = 64,
                                           .count = 1};
        add_refused(r.dl, seg, FERRY_EHANDLE, "rmem of another context");
        tu_assert_sentence("list 'kvr'", "another context", NULL);
        ck_assert_int_eq(ferry_rmem_close(ormem), 0);
        ferry_context_close(other);
    }

    /* ferry_dlist_create's own refusals. */
    ck_assert_int_eq(ferry_dlist_create(NULL, FERRY_DLIST_LOCAL, "x", &dl),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_dlist_create(p.init, 3, "x", &dl), FERRY_EINVAL);
    tu_assert_sentence("kind 3", NULL);
    ck_assert_int_eq(ferry_dlist_create(p.init, FERRY_DLIST_LOCAL, "x", NULL),
                     FERRY_EINVAL);
    ck_assert_ptr_null(dl);
    /* A name is optional, and one too long is cut, not overrun. */
    ck_assert_int_eq(ferry_dlist_create(p.init, FERRY_DLIST_LOCAL, NULL, &dl),
                     0);
    seg = (struct ferry_dlist_segment){.mem = lr.mem, .block_size = 64,
                                       .count = 2, .stride = 1};
    add_refused(dl, seg, FERRY_EINVAL, "unnamed");
    tu_assert_sentence("'(unnamed)'", NULL);
    ck_assert_int_eq(ferry_dlist_close(dl), 0);
    {
        char longname[200];

        memset(longname, 'n', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = 0;
        ck_assert_int_eq(ferry_dlist_create(p.init, FERRY_DLIST_LOCAL,
                                            longname, &dl),
                         0);
        add_refused(dl, seg, FERRY_EINVAL, "long name");
        ck_assert_ptr_nonnull(strstr(ferry_last_error(), "'nnnnnnnn"));
        ck_assert_int_eq(ferry_dlist_close(dl), 0);
    }
    ck_assert_int_eq(ferry_dlist_close(NULL), 0);
    ck_assert_uint_eq(ferry_dlist_count(NULL), 0);

    /* The list holds its regions: they cannot go while it lives. */
    ck_assert_int_eq(ferry_mem_close(lr.mem), FERRY_EBUSY);
    ck_assert_ptr_nonnull(ferry_mem_path(lr.mem)); /* still a live handle */
    tl_add(&r, &rr, 0, 4096, 4, 4096);
    ck_assert_int_eq(ferry_rmem_close(rr.rmem), FERRY_EBUSY);
    ck_assert_uint_eq(ferry_rmem_length(rr.rmem), rr.len);

    tl_destroy(&l);
    tl_destroy(&r);
    region_free(&lr); /* asserts that both can go now */
    region_free(&rr);
    region_free(&tr);
    tu_pair_close(&p);
}
END_TEST

/* ---- checks when preparing, and the EBUSY rules ------------------------- */

START_TEST(test_prepare_validation)
{
    struct tu_pair p, q;
    struct region lr, rr, ro, wo, qr;
    struct tlist l, r, empty, rol, wol, ql, otherl;
    ferry_prep_t *prep = NULL;
    struct ferry_dlist_segment seg;
    int ret;

    tu_pair_open_threads(&p, tu_tcp(), NULL, 0, 1);
    region_local(&lr, p.init, 64 * KiB);
    region_remote(&rr, &p, 64 * KiB, RW);
    region_remote(&ro, &p, 64 * KiB, FERRY_ACCESS_REMOTE_READ);
    region_remote(&wo, &p, 64 * KiB, FERRY_ACCESS_REMOTE_WRITE);
    tl_create(&l, p.init, FERRY_DLIST_LOCAL, "loc");
    tl_create(&r, p.init, FERRY_DLIST_REMOTE, "rem");
    tl_create(&empty, p.init, FERRY_DLIST_REMOTE, "nothing");
    tl_create(&rol, p.init, FERRY_DLIST_REMOTE, "readonly");
    tl_create(&wol, p.init, FERRY_DLIST_REMOTE, "writeonly");
    tl_add(&l, &lr, 0, 4096, 16, 4096);
    tl_add(&r, &rr, 0, 4096, 16, 4096);
    tl_add(&rol, &rr, 0, 4096, 2, 4096); /* fine, then a read-only region */
    tl_add(&rol, &ro, 0, 4096, 4, 4096);
    tl_add(&wol, &wo, 0, 4096, 4, 4096);

    /* Kinds. */
    ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, r.dl, l.dl, &prep);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    tu_assert_sentence("'rem' must be local", "'loc' remote", NULL);
    ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, l.dl, &prep);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ret = ferry_xfer_prepare(p.peer, 7, l.dl, r.dl, &prep);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    tu_assert_sentence("op 7", NULL);
    /* Empty. */
    ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, empty.dl, &prep);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    tu_assert_sentence("'nothing' is empty", NULL);
    /* Access. */
    ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, rol.dl, &prep);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    tu_assert_sentence("list 'readonly'", "blocks from 2",
                       "without remote write access", NULL);
    ret = ferry_xfer_prepare(p.peer, FERRY_OP_READ, l.dl, wol.dl, &prep);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    tu_assert_sentence("list 'writeonly'", "without remote read access", NULL);
    /* Handles. */
    ck_assert_int_eq(ferry_xfer_prepare(NULL, FERRY_OP_WRITE, l.dl, r.dl,
                                        &prep),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, NULL, r.dl,
                                        &prep),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, NULL,
                                        &prep),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, r.dl,
                                        NULL),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_xfer_prepare(p.peer, FERRY_OP_WRITE,
                                        (ferry_dlist_t *)lr.mem, r.dl, &prep),
                     FERRY_EHANDLE);
    ck_assert_ptr_null(prep);

    /* A second target, reached through a second peer. */
    tu_pair_open_threads(&q, tu_tcp(), NULL, 0, 1);
    {
        uint8_t addr[512];
        size_t alen = sizeof(addr);
        ferry_peer_t *peer2;

        ck_assert_int_eq(ferry_context_address(q.target, addr, &alen), 0);
        ck_assert_int_eq(ferry_peer_add(p.init, addr, alen, &peer2), 0);
        /* qr: a region of q's target, imported into p.init via peer2. */
        memset(&qr, 0, sizeof(qr));
        qr.len = 64 * KiB;
        qr.buf = tu_alloc_buf(qr.len);
        qr.want = tu_alloc_buf(qr.len);
        ck_assert_int_eq(ferry_mem_register(q.target, qr.buf, qr.len,
                                            FERRY_MEM_HOST, 0, RW, &qr.mem),
                         0);
        qr.rmem = tu_share(qr.mem, peer2);
        tl_create(&ql, p.init, FERRY_DLIST_REMOTE, "elsewhere");
        tl_add(&ql, &rr, 0, 4096, 3, 4096);
        tl_add(&ql, &qr, 0, 4096, 3, 4096);
        ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, ql.dl, &prep);
        ck_assert_int_eq(ret, FERRY_EHANDLE);
        tu_assert_sentence("list 'elsewhere'", "blocks from 3",
                           "another peer", NULL);
        /* The same lists are fine towards the peer they came from... as
         * long as all of them did. */
        ret = ferry_xfer_prepare(peer2, FERRY_OP_WRITE, l.dl, ql.dl, &prep);
        ck_assert_int_eq(ret, FERRY_EHANDLE);
        tu_assert_sentence("list 'elsewhere'", "blocks from 0", NULL);
        ck_assert_ptr_null(prep);
    }
    /* A local list of another context than the peer's. */
    tl_create(&otherl, q.init, FERRY_DLIST_LOCAL, "foreign");
    {
        struct region fr;

        region_local(&fr, q.init, 64 * KiB);
        tl_add(&otherl, &fr, 0, 4096, 16, 4096);
        ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, otherl.dl, r.dl,
                                 &prep);
        ck_assert_int_eq(ret, FERRY_EHANDLE);
        tu_assert_sentence("'foreign'", "another context", NULL);
        tl_destroy(&otherl);
        region_free(&fr);
    }
    /* A remote list of another context than the peer's. */
    {
        struct region qq;
        struct tlist qrl;

        region_remote(&qq, &q, 64 * KiB, RW);
        tl_create(&qrl, q.init, FERRY_DLIST_REMOTE, "qremote");
        ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, qrl.dl, &prep);
        ck_assert_int_eq(ret, FERRY_EHANDLE);
        tu_assert_sentence("'qremote'", "another context", NULL);
        tl_add(&qrl, &qq, 0, 4096, 16, 4096);
        ret = ferry_xfer_prepare(p.peer, FERRY_OP_WRITE, l.dl, qrl.dl, &prep);
        ck_assert_int_eq(ret, FERRY_EHANDLE);
        tu_assert_sentence("'qremote'", "another context", NULL);
        ck_assert_ptr_null(prep);
        tl_destroy(&qrl);
        region_free(&qq);
    }
    /* None of the refusals froze a list. */
    tl_add(&l, &lr, 0, 4096, 1, 0);
    tl_add(&r, &rr, 4096, 4096, 1, 0);

    /* Prepared: the lists freeze and stay. */
    prep = prepare(p.peer, FERRY_OP_WRITE, &l, &r);
    seg = (struct ferry_dlist_segment){.mem = lr.mem, .block_size = 64,
                                       .count = 1};
    add_refused(l.dl, seg, FERRY_EBUSY, "add after prepare");
    tu_assert_sentence("list 'loc'", "prepared", NULL);
    seg = (struct ferry_dlist_segment){.rmem = rr.rmem, .block_size = 64,
                                       .count = 1};
    add_refused(r.dl, seg, FERRY_EBUSY, "add to the remote after prepare");
    ck_assert_int_eq(ferry_dlist_close(l.dl), FERRY_EBUSY);
    tu_assert_sentence("list 'loc'", "1 prepared transfer;", NULL);
    ck_assert_int_eq(ferry_dlist_close(r.dl), FERRY_EBUSY);
    ck_assert_uint_eq(ferry_dlist_count(l.dl), l.count); /* still live */
    ck_assert_int_eq(ferry_mem_close(lr.mem), FERRY_EBUSY);
    release(prep);
    ck_assert_int_eq(ferry_xfer_close(NULL), 0);
    /* Still frozen after the release: a list, once prepared, is fixed. */
    add_refused(r.dl, seg, FERRY_EBUSY, "add after release");

    tl_destroy(&l);
    tl_destroy(&r);
    tl_destroy(&empty);
    tl_destroy(&rol);
    tl_destroy(&wol);
    tl_destroy(&ql);
    region_free(&lr);
    region_free(&rr);
    region_free(&ro);
    region_free(&wo);
    region_free(&qr);
    tu_pair_close(&q);
    tu_pair_close(&p);
}
END_TEST

/* ---- prepared posts with a notification --------------------------------- */

START_TEST(test_post_with_notification)
{
    const char *prov = tu_providers[_i];
    static const size_t parts[] = {100, 156, 200, 56}; /* 512 blocks */
    struct paged g;
    ferry_prep_t *prep, *rprep;
    ferry_req_t *reqs[TU_ARRAY_LEN(parts)];
    static uint32_t lidx[512], ridx[512];
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_notification n[8];
    uint64_t v = 0, t0;
    size_t at = 0;
    int got, ret;

    paged_open(&g, prov);
    region_fill(&g.local, 0xc1);
    for (size_t l = 0; l < LAYERS; l++)
        region_fill(&g.remote[l], 0xc2 + l);
    tl_fill_blocks(&g.ll, 0xd00000);
    prep = prepare(g.p.peer, FERRY_OP_WRITE, &g.ll, &g.rl);
    make_pairs(lidx, ridx, 512, PBLOCKS, 77, 300);

    /* Sequence 7: four posts, each telling how many blocks it carried. */
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 7;
    for (size_t k = 0; k < TU_ARRAY_LEN(parts); k++) {
        opts.notify_value = parts[k];
        reqs[k] = post(prep, lidx + at, ridx + at, parts[k], &opts, prov);
        at += parts[k];
    }
    shadow_move(&g.ll, lidx, &g.rl, ridx, 512);
    /* Drive the initiator (it has no thread) while watching the target's
     * counter; the moment it reaches 512, every block must be there. */
    t0 = tu_now_ns();
    for (;;) {
        ck_assert_int_ge(ferry_progress(g.p.init), 0);
        ck_assert_int_eq(ferry_counter_get(g.p.target, 7, &v), 0);
        if (v >= 512)
            break;
        ck_assert_msg(tu_ms_since(t0) < PATIENCE_MS,
                      "%s: counter 7 at %llu of 512", prov,
                      (unsigned long long)v);
    }
    assert_moved(&g.rl, ridx, lidx, 512, 0xd00000, prov);
    ck_assert_uint_eq(v, 512);
    for (size_t k = 0; k < TU_ARRAY_LEN(parts); k++)
        req_ok(reqs[k], prov);
    paged_assert(&g, prov);
    ret = ferry_counter_wait(g.p.target, 7, 512, 0);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    /* One notification per post, each with its count. */
    got = ferry_notify_poll(g.p.target, n, 8);
    ck_assert_int_eq(got, 4);
    v = 0;
    for (int i = 0; i < got; i++) {
        ck_assert_uint_eq(n[i].id, 7);
        v += n[i].value;
    }
    ck_assert_uint_eq(v, 512);

    /* A prepared read with a notification: the target learns the blocks
     * were taken. */
    rprep = prepare(g.p.peer, FERRY_OP_READ, &g.ll, &g.rl);
    tl_fill_blocks(&g.rl, 0xe00000);
    make_pairs(ridx, lidx, 64, PBLOCKS, 5, 6);
    opts.notify_id = 8;
    opts.notify_value = 64;
    req_ok(post(rprep, lidx, ridx, 64, &opts, prov), prov);
    shadow_move(&g.rl, ridx, &g.ll, lidx, 64);
    assert_moved(&g.ll, lidx, ridx, 64, 0xe00000, prov);
    paged_assert(&g, prov);
    ret = ferry_counter_wait(g.p.target, 8, 64, PATIENCE_MS);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());

    release(prep);
    release(rprep);
    paged_close(&g);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *dlist_suite(void)
{
    Suite *s = suite_create("dlist");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "paged", 60);
    tcase_add_loop_test(tc, test_paged_write, 0, np);
    tcase_add_loop_test(tc, test_paged_read, 0, np);

    tc = tu_tcase(s, "two_caches", 60);
    tcase_add_loop_test(tc, test_two_caches_interleaved, 0, np);
    tcase_add_loop_test(tc, test_two_caches_threads, 0, np);

    tc = tu_tcase(s, "invalid", 60);
    tcase_add_test(tc, test_add_validation);
    tcase_add_test(tc, test_prepare_validation);

    tc = tu_tcase(s, "notify", 60);
    tcase_add_loop_test(tc, test_post_with_notification, 0, np);
    return s;
}

int main(void)
{
    return tu_run(dlist_suite());
}
