/*
 * Contiguous runs merged into one operation, through the API: iovs of a
 * request, and pairs of a prepared post, that continue each other in
 * local and remote memory under the same registrations go to the provider
 * as one write or read of at most max_msg_size bytes.  Each case counts
 * the operations posted (ferry_stats.rma_ops_posted) against the test's
 * own model of the runs, and checks every byte moved and every byte
 * around them untouched; a notification still rides the last merged
 * write; a bad item is still refused by name.
 */
#include "dlistutil.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Operations smaller than the runs, so that runs split, mid-item too. */
#define MAX_MSG (16 * KiB)
#define NITEMS 96
#define REGION (2 * MiB)

/*
 * The model: the operations a request of items with these lengths takes
 * when item i+1 continues item i exactly where joins[i] is true.  A run
 * of continuing items goes in operations of max bytes, the last shorter.
 */
static uint64_t model_ops(const size_t *len, const bool *joins, size_t n,
                          size_t max)
{
    uint64_t ops = 0, run = 0;

    for (size_t i = 0; i < n; i++) {
        run += len[i];
        if (i + 1 == n || !joins[i]) {
            ops += (run + max - 1) / max;
            run = 0;
        }
    }
    return ops;
}

/* Asserts that ctx posted want operations since it had posted before. */
static void assert_ops_since(ferry_context_t *ctx, uint64_t before,
                             uint64_t want, const char *what)
{
    uint64_t got = tu_ops_posted(ctx) - before;

    ck_assert_msg(got == want,
                  "%s: %" PRIu64 " operations posted, the runs make %" PRIu64,
                  what, got, want);
}

static void config_max_msg(struct ferry_config *cfg, const char *prov)
{
    tu_config(cfg, prov);
    cfg->max_msg_size = MAX_MSG;
}

/* ---- iovs ---------------------------------------------------------------- */

/*
 * The layout of the iov cases, shaped by `order`:
 *  - SORTED: every item right after the one before, locally and remotely:
 *    one run;
 *  - RUNS: runs of 1 to 9 items, separated by gaps on the remote side
 *    only, so that the local side alone would wrongly merge them;
 *  - SHUFFLED: the remote places permuted, locally contiguous: no run.
 * Lengths vary (3000 to 8999 bytes) so that runs split inside items.
 */
enum order { SORTED, RUNS, SHUFFLED };

static void iov_layout(struct ferry_iov *iov, bool *joins, enum order order)
{
    size_t loff = 0, roff = 0, slot[NITEMS];

    for (size_t i = 0; i < NITEMS; i++) {
        iov[i].len = 3000 + (i * 7919) % 6000;
        iov[i].local = (void *)(uintptr_t)loff; /* an offset for now */
        loff += iov[i].len;
        joins[i] = order == SORTED || (order == RUNS && (i * 5 + 3) % 9 != 0);
    }
    joins[NITEMS - 1] = false;
    if (order != SHUFFLED) {
        for (size_t i = 0; i < NITEMS; i++) {
            iov[i].roffset = roff;
            roff += iov[i].len + (joins[i] ? 0 : 512);
        }
        return;
    }
    /* Remote slots of 9000 bytes, item i in slot (i * 37) % NITEMS: no
     * item lands right after its predecessor. */
    for (size_t i = 0; i < NITEMS; i++)
        slot[i] = (i * 37) % NITEMS;
    for (size_t i = 0; i < NITEMS; i++) {
        iov[i].roffset = slot[i] * 9000;
        joins[i] = false;
    }
}

static void iov_case(const char *prov, bool write, enum order order)
{
    static const char *const names[] = {"sorted", "runs", "shuffled"};
    struct ferry_config cfg;
    struct ferry_iov iov[NITEMS];
    bool joins[NITEMS];
    size_t len[NITEMS];
    uint8_t *want = tu_alloc_buf(REGION);
    uint64_t before;
    struct tu_fx f;
    char what[96];

    snprintf(what, sizeof(what), "%s: %s %s iovs", prov,
             write ? "write" : "read", names[order]);
    config_max_msg(&cfg, prov);
    tu_fx_open(&f, prov, &cfg, 0, 1, REGION, REGION);
    iov_layout(iov, joins, order);
    tu_fill(f.tbuf, REGION, 0xaaaa);
    tu_fill(f.lbuf, REGION, 0xbbbb);
    memcpy(want, write ? f.tbuf : f.lbuf, REGION);
    for (size_t i = 0; i < NITEMS; i++) {
        size_t loff = (uintptr_t)iov[i].local;
        uint8_t *src = write ? f.lbuf + loff : f.tbuf + iov[i].roffset;

        iov[i].local = f.lbuf + loff;
        iov[i].lmem = f.lmem;
        iov[i].rmem = f.rmem;
        len[i] = iov[i].len;
        tu_fill(src, iov[i].len, 0x5000 + i);
        tu_fill(want + (write ? iov[i].roffset : loff), iov[i].len,
                0x5000 + i);
    }
    before = tu_ops_posted(f.p.init);
    tu_xfer_ok(f.p.peer, write, iov, NITEMS, what);
    assert_ops_since(f.p.init, before, model_ops(len, joins, NITEMS, MAX_MSG),
                     what);
    tu_assert_same(write ? f.tbuf : f.lbuf, want, REGION, what);
    tu_fx_close(&f);
    tu_free_buf(want, REGION);
}

START_TEST(test_iov_sorted_write) { iov_case(tu_providers[_i], true, SORTED); }
END_TEST
START_TEST(test_iov_sorted_read) { iov_case(tu_providers[_i], false, SORTED); }
END_TEST
START_TEST(test_iov_runs_write) { iov_case(tu_providers[_i], true, RUNS); }
END_TEST
START_TEST(test_iov_runs_read) { iov_case(tu_providers[_i], false, RUNS); }
END_TEST
START_TEST(test_iov_shuffled_write)
{
    iov_case(tu_providers[_i], true, SHUFFLED);
}
END_TEST

/*
 * Two registrations of one buffer, side by side: iovs contiguous in
 * memory but under different lmem are not merged (each operation passes
 * one registration's descriptor).
 */
START_TEST(test_iov_two_registrations)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_iov iov[2];
    ferry_mem_t *second;
    uint64_t before;
    struct tu_fx f;

    config_max_msg(&cfg, prov);
    tu_fx_open(&f, prov, &cfg, 0, 1, REGION, REGION);
    second = tu_register(f.p.init, f.lbuf + 4096, 4096, 0);
    tu_fill(f.lbuf, 8192, 0x7777);
    iov[0] = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, 4096};
    iov[1] = (struct ferry_iov){f.lbuf + 4096, second, f.rmem, 4096, 4096};
    before = tu_ops_posted(f.p.init);
    tu_xfer_ok(f.p.peer, true, iov, 2, prov);
    ck_assert_uint_eq(tu_ops_posted(f.p.init) - before, 2);
    tu_assert_pattern(f.tbuf, 8192, 0x7777, "%s: two registrations", prov);
    ck_assert_int_eq(ferry_mem_close(second), 0);
    tu_fx_close(&f);
}
END_TEST

/* ---- prepared posts ---------------------------------------------------- */

#define BLOCKS 256
#define BLOCK (4 * KiB)

struct lists {
    struct tu_pair p;
    struct region local, remote;
    struct tlist ll, rl;
};

static void lists_open(struct lists *g, const char *prov)
{
    struct ferry_config cfg;

    config_max_msg(&cfg, prov);
    tu_pair_open_threads(&g->p, prov, &cfg, 0, 1);
    region_local(&g->local, g->p.init, BLOCKS * BLOCK);
    region_remote(&g->remote, &g->p, BLOCKS * BLOCK,
                  FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ);
    tl_create(&g->ll, g->p.init, FERRY_DLIST_LOCAL, "local blocks");
    tl_create(&g->rl, g->p.init, FERRY_DLIST_REMOTE, "remote blocks");
    tl_add(&g->ll, &g->local, 0, BLOCK, BLOCKS, BLOCK);
    tl_add(&g->rl, &g->remote, 0, BLOCK, BLOCKS, BLOCK);
}

static void lists_close(struct lists *g)
{
    tl_destroy(&g->ll);
    tl_destroy(&g->rl);
    region_free(&g->local);
    region_free(&g->remote);
    tu_pair_close(&g->p);
}

/*
 * Pairs: sorted runs of 1 to 17 blocks at scattered places, the same
 * run on both sides (shifted remotely by `shift`), so that some pairs
 * continue their predecessor and the run boundaries do not.  Returns
 * how many.
 */
static size_t pairs_make(uint32_t *lidx, uint32_t *ridx, uint32_t shift)
{
    size_t n = 0;

    for (uint32_t start = 0; start + 17 < BLOCKS; start += 24) {
        uint32_t runlen = 1 + (start * 7) % 17;

        for (uint32_t k = 0; k < runlen; k++, n++) {
            lidx[n] = start + k;
            ridx[n] = (start + k + shift) % BLOCKS;
        }
    }
    return n;
}

/* The model's input for n pairs of blocks, by the rule the library must
 * follow: a pair joins the next when the next continues it in both
 * lists. */
static void pairs_joins(const uint32_t *lidx, const uint32_t *ridx,
                        size_t n, bool *joins, size_t *len)
{
    for (size_t i = 0; i < n; i++) {
        len[i] = BLOCK;
        joins[i] = i + 1 < n && lidx[i + 1] == lidx[i] + 1 &&
                   ridx[i + 1] == ridx[i] + 1;
    }
}

static void prepared_case(const char *prov, enum ferry_op op, bool sorted)
{
    uint32_t lidx[BLOCKS], ridx[BLOCKS];
    bool joins[BLOCKS];
    size_t len[BLOCKS], n;
    struct lists g;
    ferry_prep_t *prep;
    uint64_t before, want_ops;
    char what[96];

    snprintf(what, sizeof(what), "%s: prepared %s, %s", prov,
             op == FERRY_OP_WRITE ? "write" : "read",
             sorted ? "sorted runs" : "one block at a time");
    lists_open(&g, prov);
    region_fill(&g.local, 0x1111);
    region_fill(&g.remote, 0x2222);
    tl_fill_blocks(op == FERRY_OP_WRITE ? &g.ll : &g.rl, 0x9000);
    if (sorted) {
        n = pairs_make(lidx, ridx, 3);
    } else {
        /* Every block once, in an order where no pair continues the
         * one before it. */
        n = BLOCKS;
        for (size_t i = 0; i < n; i++) {
            lidx[i] = (uint32_t)((i * 101) % BLOCKS);
            ridx[i] = (uint32_t)((i * 53 + 7) % BLOCKS);
        }
    }
    pairs_joins(lidx, ridx, n, joins, len);
    want_ops = model_ops(len, joins, n, MAX_MSG);
    prep = prepare(g.p.peer, op, &g.ll, &g.rl);
    if (op == FERRY_OP_WRITE)
        shadow_move(&g.ll, lidx, &g.rl, ridx, n);
    else
        shadow_move(&g.rl, ridx, &g.ll, lidx, n);
    before = tu_ops_posted(g.p.init);
    post_ok(prep, lidx, ridx, n, what);
    assert_ops_since(g.p.init, before, want_ops, what);
    if (sorted)
        ck_assert_uint_lt(want_ops, n); /* the case does merge */
    region_assert(&g.local, what);
    region_assert(&g.remote, what);
    release(prep);
    lists_close(&g);
}

START_TEST(test_prepared_sorted_write)
{
    prepared_case(tu_providers[_i], FERRY_OP_WRITE, true);
}
END_TEST
START_TEST(test_prepared_sorted_read)
{
    prepared_case(tu_providers[_i], FERRY_OP_READ, true);
}
END_TEST
START_TEST(test_prepared_unsorted_write)
{
    prepared_case(tu_providers[_i], FERRY_OP_WRITE, false);
}
END_TEST

/* ---- notifications and errors ------------------------------------------ */

/*
 * A notified write of 16 contiguous blocks: one operation, and the
 * notification rides it; when the target sees the notification, every
 * block is there.
 */
START_TEST(test_notify_rides_merged)
{
    const char *prov = tu_providers[_i];
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov[16];
    struct ferry_notification note;
    uint64_t ops0, in_writes0;
    ferry_req_t *req;
    struct tu_fx f;
    uint64_t t0 = tu_now_ns();
    int got = 0;

    tu_fx_open(&f, prov, NULL, 0, 1, MiB, MiB);
    for (size_t i = 0; i < 16; i++) {
        iov[i] = (struct ferry_iov){f.lbuf + i * 1024, f.lmem, f.rmem,
                                    4096 + i * 1024, 1024};
        tu_fill(iov[i].local, 1024, 0x6000 + i);
    }
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 42;
    opts.notify_value = 7;
    ops0 = tu_ops_posted(f.p.init);
    in_writes0 = tu_stats(f.p.init).notifications_in_writes;
    ck_assert_int_eq(ferry_write(f.p.peer, iov, 16, &opts, &req), 0);
    while (got == 0 && tu_ms_since(t0) < 30000) {
        ck_assert_int_ge(ferry_progress(f.p.init), 0);
        got = ferry_notify_poll(f.p.target, &note, 1);
        ck_assert_int_ge(got, 0);
    }
    ck_assert_msg(got == 1, "%s: no notification in 30 s", prov);
    ck_assert_uint_eq(note.id, 42);
    ck_assert_uint_eq(note.value, 7);
    for (size_t i = 0; i < 16; i++)
        tu_assert_pattern(f.tbuf + 4096 + i * 1024, 1024, 0x6000 + i,
                          "%s: block %zu when notified", prov, i);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    ferry_req_close(req);
    ck_assert_uint_eq(tu_ops_posted(f.p.init) - ops0, 1);
    ck_assert_uint_eq(tu_stats(f.p.init).notifications_in_writes - in_writes0,
                      1);
    tu_fx_close(&f);
}
END_TEST

/*
 * Merging happens after the checks, which stay item by item: in a run of
 * six contiguous iovs, the last reaching past the remote region is
 * refused by name, and nothing is posted.  (How an operation that fails
 * names the items it carried: test/unit/check_xfer.c; the providers here
 * report a bad remote key as a lost connection, not as one failed write.)
 */
START_TEST(test_bounds_name_the_item)
{
    const char *prov = tu_providers[_i];
    struct ferry_iov iov[6];
    ferry_req_t *req = NULL;
    uint64_t before;
    struct tu_fx f;

    tu_fx_open(&f, prov, NULL, 0, 1, 5 * 4096, 8 * 4096);
    for (size_t i = 0; i < 6; i++)
        iov[i] = (struct ferry_iov){f.lbuf + i * 4096, f.lmem, f.rmem,
                                    i * 4096, 4096};
    before = tu_ops_posted(f.p.init);
    ck_assert_int_eq(ferry_write(f.p.peer, iov, 6, NULL, &req), FERRY_ERANGE);
    tu_assert_sentence("iov[5]", NULL);
    ck_assert_ptr_null(req);
    ck_assert_uint_eq(tu_ops_posted(f.p.init), before);
    tu_fx_close(&f);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *merge_suite(void)
{
    Suite *s = suite_create("merge");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "iov", 60);
    tcase_add_loop_test(tc, test_iov_sorted_write, 0, np);
    tcase_add_loop_test(tc, test_iov_sorted_read, 0, np);
    tcase_add_loop_test(tc, test_iov_runs_write, 0, np);
    tcase_add_loop_test(tc, test_iov_runs_read, 0, np);
    tcase_add_loop_test(tc, test_iov_shuffled_write, 0, np);
    tcase_add_loop_test(tc, test_iov_two_registrations, 0, np);

    tc = tu_tcase(s, "prepared", 60);
    tcase_add_loop_test(tc, test_prepared_sorted_write, 0, np);
    tcase_add_loop_test(tc, test_prepared_sorted_read, 0, np);
    tcase_add_loop_test(tc, test_prepared_unsorted_write, 0, np);

    tc = tu_tcase(s, "semantics", 60);
    tcase_add_loop_test(tc, test_notify_rides_merged, 0, np);
    tcase_add_loop_test(tc, test_bounds_name_the_item, 0, np);
    return s;
}

int main(void)
{
    return tu_run(merge_suite());
}
