/*
 * xfer module from inside: chunking by max_msg_size and operation slots by
 * tx_depth, counted on the rail; iovs without lmem (one-shot registrations
 * and the context's list); remote offsets versus virtual addresses; every
 * refusal of bad input, which names the iov and the bound and posts
 * nothing (no bytes, operation, request or reference); and regions that
 * cannot be released while a request still uses them.  (Transfers that
 * land, in one process and two, through the API: test/api/check_xfer.c.)
 */
#include "testutil.h"

#include "xfer/xfer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

/* Operations of the context's first rail currently out with the provider. */
static size_t ops_out(ferry_context_t *ctx)
{
    size_t n = 0;

    for (size_t i = 0; i < ferry__rail_ops_max(ferry__fabric_of(ctx)); i++)
        if (ferry__xfer_of(ctx)->req.tx[0].ops[i].req != NULL)
            n++;
    return n;
}

static size_t free_slots(ferry_context_t *ctx)
{
    size_t n = 0;

    for (struct ferry__op *op = ferry__xfer_of(ctx)->req.tx[0].free_ops; op; op = op->next_free)
        n++;
    return n;
}

/*
 * Drives req to its end (progressing a stalled target too), checking at
 * every step that the initiator's slot accounting holds and no operation
 * is longer than its max_msg.  Frees req.
 */
static void fx_drive(struct tu_fx *f, ferry_req_t *req, const char *what)
{
    ferry_context_t *ctx = f->p.init;
    uint64_t until = tu_now_ns() + 60ull * 1000000000u;
    int ret;

    /* The initiator has no progress thread: its state is ours to read. */
    do {
        const struct ferry__fabric *fab = ferry__fabric_of(ctx);
        const struct ferry__txq *tx = &ferry__xfer_of(ctx)->req.tx[0];

        ck_assert_uint_le(tx->ops_in_flight, fab->tx_depth);
        ck_assert_uint_eq(ops_out(ctx), tx->ops_in_flight);
        ck_assert_uint_eq(ops_out(ctx) + free_slots(ctx),
                          ferry__rail_ops_max(fab));
        for (size_t i = 0; i < ferry__rail_ops_max(fab); i++)
            if (tx->ops[i].req != NULL)
                ck_assert_msg(tx->ops[i].len >= 1 &&
                                  tx->ops[i].len <= fab->max_msg,
                              "%s: an operation of %zu bytes is out; the "
                              "limit is %zu",
                              what, tx->ops[i].len, fab->max_msg);
        if (f->stalled)
            ck_assert_int_ge(ferry_progress(f->p.target), 0);
        ret = ferry_req_test(req);
        ck_assert_msg(tu_now_ns() < until, "%s: still running after 60 s",
                      what);
    } while (ret == FERRY_EINPROGRESS);
    ck_assert_msg(ret == 0, "%s: ended with %s: %s", what, ferry_strerror(ret),
                  ferry_last_error());
    ferry_req_close(req);
}

/* Progresses only the initiator of a stalled pair, up to n times or until
 * req has posted everything. */
static void post_all_stalled(struct tu_fx *f, ferry_req_t *req, int n)
{
    for (int i = 0; i < n && req->cur_iov < req->niov; i++)
        ck_assert_int_ge(ferry_progress(f->p.init), 0);
}

/* ---- chunking and operation slots ---------------------------------------- */

/*
 * max_msg_size 4096 and a 1 MiB iov.  The target is stalled while the
 * request posts, so the operations stay out where the test can count them:
 * several, each exactly 4096 bytes.  Then the target progresses.
 */
static void small_msg(const char *prov, bool write)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct tu_fx f;
    struct ferry_iov iov;
    ferry_req_t *req;
    struct ferry__txq *tx;
    uint64_t posted_before, posted;
    size_t out;
    int ret;

    tu_config(&cfg, prov);
    cfg.max_msg_size = 4096;
    cfg.endpoints_per_domain = 1; /* ops_out and fx_drive see the first rail */
    tu_fx_open_stalled(&f, prov, &cfg, MiB, MiB, fx_drive);
    ck_assert_int_eq(ferry_context_info(f.p.init, &info), 0);
    ck_assert_uint_eq(info.max_msg_size, 4096);
    ck_assert_uint_eq(ferry__fabric_of(f.p.init)->max_msg, 4096);
    tx = &ferry__xfer_of(f.p.init)->req.tx[0];
    if (write)
        tu_fill(f.lbuf, MiB, 0x7070);
    else
        tu_fill(f.tbuf, MiB, 0x7070);
    posted_before = tu_bytes_posted(f.p.init);
    iov = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, MiB};
    ret = write ? ferry_write(f.p.peer, &iov, 1, NULL, &req)
                : ferry_read(f.p.peer, &iov, 1, NULL, &req);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    post_all_stalled(&f, req, 100);

    /* Whatever went out went as 4096-byte operations.  (How many can be
     * out at once is the provider's business: shm without CMA moves one
     * delivery-complete write per peer at a time and says -FI_EAGAIN to
     * the next, tcp takes them all.) */
    posted = tu_bytes_posted(f.p.init) - posted_before;
    out = ops_out(f.p.init);
    ck_assert_uint_eq(posted, req->cur_iov == 1 ? MiB : req->cur_off);
    ck_assert_uint_eq(out, req->ops_in_flight);
    ck_assert_uint_eq(out * 4096 + req->bytes_done, posted);
    ck_assert_msg(out >= 1, "%s: nothing out after 100 progress calls", prov);
    ck_assert_uint_lt(req->bytes_done, MiB);
    for (size_t i = 0; i < ferry__rail_ops_max(ferry__fabric_of(f.p.init));
         i++)
        if (tx->ops[i].req != NULL)
            ck_assert_uint_eq(tx->ops[i].len, 4096);

    fx_drive(&f, req, prov);
    ck_assert_uint_eq(tu_bytes_posted(f.p.init) - posted_before, MiB);
    ck_assert_uint_eq(tx->ops_in_flight, 0);
    ck_assert_uint_eq(free_slots(f.p.init),
                      ferry__rail_ops_max(ferry__fabric_of(f.p.init)));
    if (write)
        tu_assert_pattern(f.tbuf, MiB, 0x7070, "%s: chunked write", prov);
    else
        tu_assert_pattern(f.lbuf, MiB, 0x7070, "%s: chunked read", prov);
    tu_fx_close(&f);
}

START_TEST(test_small_max_msg_write)
{
    small_msg(tu_providers[_i], true);
}
END_TEST

START_TEST(test_small_max_msg_read)
{
    small_msg(tu_providers[_i], false);
}
END_TEST

/*
 * tx_depth = 2 with 256 iovs (and max_msg 4096 with iovs up to 9001 bytes):
 * while the target is stalled the request cannot get past two operations
 * however often it is progressed; then it takes hundreds of turns.
 */
static void small_depth(const char *prov, bool write)
{
    enum { N = 256 };
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct ferry_iov *iov = calloc(N, sizeof(*iov));
    struct tu_fx f;
    ferry_req_t *req;
    uint64_t posted_before;
    size_t total = 0;
    int ret;

    ck_assert_ptr_nonnull(iov);
    tu_config(&cfg, prov);
    cfg.tx_depth = 2;
    cfg.max_msg_size = 4096;
    tu_fx_open_stalled(&f, prov, &cfg, 4 * MiB, 4 * MiB, fx_drive);
    ck_assert_int_eq(ferry_context_info(f.p.init, &info), 0);
    ck_assert_uint_eq(info.tx_depth, 2);
    ck_assert_uint_eq(ferry__fabric_of(f.p.init)->tx_depth, 2);
    /* The slot pool holds exactly tx_depth operations for the data, and
     * FERRY__CONTROL_OPS for ferry's own. */
    ck_assert_uint_eq(free_slots(f.p.init), 2 + FERRY__CONTROL_OPS);
    for (size_t i = 0; i < N; i++) {
        size_t len = 1 + (i * 4099) % 9001; /* 1 .. 9001: up to 3 chunks */
        iov[i] = (struct ferry_iov){f.lbuf + i * 16 * KiB + i % 7, f.lmem,
                                    f.rmem, (N - 1 - i) * 16 * KiB + i % 5,
                                    len};
        total += len;
        tu_fill(write ? iov[i].local : f.tbuf + iov[i].roffset, len,
                0x8000 + i);
    }
    posted_before = tu_bytes_posted(f.p.init);
    ret = write ? ferry_write(f.p.peer, iov, N, NULL, &req)
                : ferry_read(f.p.peer, iov, N, NULL, &req);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    post_all_stalled(&f, req, 100);
    /* Two slots on each rail (shm has two: a request this large is
     * striped over both, and libfabric 2.x's shm takes both rails' writes
     * where 1.17's pushes back): most of the request is still waiting to
     * be posted. */
    ck_assert_uint_le(req->ops_in_flight,
                      2 * ferry__fabric_of(f.p.init)->nrails);
    ck_assert_uint_le(ops_out(f.p.init), 2);
    ck_assert_uint_lt(req->cur_iov, N);
    fx_drive(&f, req, prov);
    ck_assert_uint_eq(tu_bytes_posted(f.p.init) - posted_before,
                      total);
    ck_assert_uint_eq(free_slots(f.p.init), 2 + FERRY__CONTROL_OPS);
    for (size_t i = 0; i < N; i++)
        tu_assert_pattern(write ? f.tbuf + iov[i].roffset
                                : (uint8_t *)iov[i].local,
                          iov[i].len, 0x8000 + i, "%s: iov[%zu]", prov, i);
    tu_fx_close(&f);
    free(iov);
}

START_TEST(test_small_tx_depth_write)
{
    small_depth(tu_providers[_i], true);
}
END_TEST

START_TEST(test_small_tx_depth_read)
{
    small_depth(tu_providers[_i], false);
}
END_TEST

/* Writes posted without waiting for their delivery, on every rail. */
static uint64_t writes_covered(ferry_context_t *ctx)
{
    uint64_t n = 0;

    for (unsigned r = 0; r < ferry__fabric_of(ctx)->nrails; r++)
        n += ferry__xfer_of(ctx)->req.tx[r].writes_covered;
    return n;
}

/* Writes iov (n blocks, each of f's local buffer, into f's region or
 * the other one) filled with seed; expects `covered` of them covered and
 * every block where its item says. */
static void two_regions(struct tu_fx *f, const char *prov,
                        const struct ferry_iov *iov, size_t n, uint8_t seed,
                        uint64_t covered, const uint8_t *other)
{
    uint64_t before = writes_covered(f->p.init);
    ferry_req_t *req;

    tu_fill(f->lbuf, n * iov[0].len, seed);
    ck_assert_msg(ferry_write(f->p.peer, iov, n, NULL, &req) == 0, "%s: %s",
                  prov, ferry_last_error());
    ck_assert_msg(ferry_req_wait(req, 20000) == 0, "%s: %s", prov,
                  ferry_last_error());
    ferry_req_close(req);
    ck_assert_msg(writes_covered(f->p.init) - before == covered,
                  "%s: %llu of %zu writes covered (seed 0x%x), expected %llu",
                  prov,
                  (unsigned long long)(writes_covered(f->p.init) - before),
                  n, (unsigned)seed, (unsigned long long)covered);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *at = (iov[i].rmem == f->rmem ? f->tbuf : other) +
                            iov[i].roffset;

        ck_assert_msg(memcmp(at, iov[i].local, iov[i].len) == 0,
                      "%s: block %zu (seed 0x%x) did not land", prov, i,
                      (unsigned)seed);
    }
}

/*
 * 64 blocks of 4 KiB in descending order (none continues the one before,
 * so each is an operation) into one region, with a notification: on shm
 * before libfabric 2.5 all but the last go without waiting for their
 * delivery, each rail's last such write is posted again waiting (and not
 * counted again in rma_ops_posted), and the
 * notification reaches the target after every byte (it looks at them
 * the moment the counter moves); elsewhere none is covered, nor where
 * shm registers device memory (FI_HMEM) or virtual addresses are forced.
 * Over two regions (a K and a V cache), the last block of each run into
 * one region waits: blocks in two runs leave two uncovered, blocks that
 * alternate between the regions none covered.  Every byte lands.
 */
START_TEST(test_covered_writes)
{
    enum { N = 64, B = 4096 };
    const char *prov = tu_providers[_i];
    struct ferry_xfer_opts opts = {.size = sizeof(opts),
                                   .flags = FERRY_XFER_NOTIFY,
                                   .notify_id = 77,
                                   .notify_value = 1};
    struct ferry_iov iov[N];
    uint8_t *other = tu_alloc_buf(N * B);
    ferry_mem_t *omem;
    ferry_rmem_t *ormem;
    struct tu_fx f;
    ferry_req_t *req;
    uint64_t covered, ops;
    size_t small;
    bool covers;

    tu_fx_open(&f, prov, NULL, 1, 1, N * B, N * B);
    covers = strcmp(prov, "shm") == 0 &&
             !FI_VERSION_GE(fi_version(), FI_VERSION(2, 5)) &&
             !(ferry__fabric_of(f.p.init)->rails[0].info->caps & FI_HMEM);
    small = ferry__fabric_of(f.p.init)->transports[0].covered_writes;
    ck_assert_msg(covers ? small >= B : small == 0,
                  "%s: writes of up to %zu bytes covered", prov, small);
    for (size_t i = 0; i < N; i++)
        iov[i] = (struct ferry_iov){f.lbuf + (N - 1 - i) * B, f.lmem, f.rmem,
                                    (N - 1 - i) * B, B};
    tu_fill(f.lbuf, N * B, 0xc0);
    covered = writes_covered(f.p.init);
    ops = tu_ops_posted(f.p.init);
    ck_assert_msg(ferry_write(f.p.peer, iov, N, &opts, &req) == 0, "%s: %s",
                  prov, ferry_last_error());
    ck_assert_msg(ferry_counter_wait(f.p.target, 77, 1, 20000) == 0,
                  "%s: %s", prov, ferry_last_error());
    tu_assert_pattern(f.tbuf, N * B, 0xc0, "%s: at the notification", prov);
    ck_assert_msg(ferry_req_wait(req, 20000) == 0, "%s: %s", prov,
                  ferry_last_error());
    ferry_req_close(req);
    covered = writes_covered(f.p.init) - covered;
    ops = tu_ops_posted(f.p.init) - ops;
    ck_assert_uint_eq(covered, covers ? N - 1 : 0);
    /* Every block once: a cover repeats a write and counts once. */
    ck_assert_uint_eq(ops, N);

    omem = tu_register(f.p.target, other, N * B, FERRY_ACCESS_REMOTE_WRITE);
    ormem = tu_share(omem, f.p.peer);
    /* The last block into another region: the one before it waits too. */
    iov[N - 1] = (struct ferry_iov){f.lbuf, f.lmem, ormem, 0, B};
    two_regions(&f, prov, iov, N, 0xc1, covers ? N - 2 : 0, other);
    /* Two runs, the second into the other region. */
    for (size_t i = N / 2; i < N; i++)
        iov[i].rmem = ormem;
    two_regions(&f, prov, iov, N, 0xc2, covers ? N - 2 : 0, other);
    /* Alternating: every block followed by one into the other region. */
    for (size_t i = 0; i < N; i++)
        iov[i].rmem = i % 2 ? ormem : f.rmem;
    two_regions(&f, prov, iov, N, 0xc3, 0, other);
    ck_assert_int_eq(ferry_rmem_close(ormem), 0);
    ck_assert_int_eq(ferry_mem_close(omem), 0);
    tu_fx_close(&f);
    tu_free_buf(other, N * B);

    /* Forced virtual addresses keep shm's unordered endpoints: no cover. */
    {
        struct ferry_config cfg;
        ferry_context_t *ctx = NULL;

        tu_config(&cfg, prov);
        cfg.mr_mode_force = strcmp(prov, "shm") == 0 ? FERRY_MR_VIRT_ADDR : 0;
        ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
        ck_assert_uint_eq(ferry__fabric_of(ctx)->transports[0].covered_writes,
                          0);
        ferry_context_close(ctx);
    }
}
END_TEST

/* Many requests at once against two slots: they take turns. */
START_TEST(test_small_tx_depth_many_requests)
{
    enum { NREQ = 32, LEN = 3 * 4096 + 5 };
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    ferry_req_t *req[NREQ];
    uint64_t until;

    tu_config(&cfg, prov);
    cfg.tx_depth = 2;
    cfg.max_msg_size = 4096;
    tu_fx_open(&f, prov, &cfg, 0, 1, NREQ * 16 * KiB, NREQ * 16 * KiB);
    for (size_t i = 0; i < NREQ; i++) {
        struct ferry_iov iov = {f.lbuf + i * 16 * KiB, f.lmem, f.rmem,
                                i * 16 * KiB, LEN};
        int ret;

        tu_fill(iov.local, LEN, 0x9000 + i);
        ret = ferry_write(f.p.peer, &iov, 1, NULL, &req[i]);
        ck_assert_msg(ret == 0, "%s: request %zu: %s", prov, i,
                      ferry_last_error());
        ck_assert_uint_le(ferry__xfer_of(f.p.init)->req.tx[0].ops_in_flight, 2);
    }
    until = tu_now_ns() + 60ull * 1000000000u;
    for (size_t i = 0; i < NREQ; i++) {
        int ret;

        do {
            ret = ferry_req_test(req[i]);
            ck_assert_uint_le(ferry__xfer_of(f.p.init)->req.tx[0].ops_in_flight, 2);
            ck_assert(tu_now_ns() < until);
        } while (ret == FERRY_EINPROGRESS);
        ck_assert_msg(ret == 0, "%s: request %zu: %s", prov, i,
                      ferry_last_error());
        ferry_req_close(req[i]);
    }
    for (size_t i = 0; i < NREQ; i++)
        tu_assert_pattern(f.tbuf + i * 16 * KiB, LEN, 0x9000 + i,
                          "%s: request %zu", prov, i);
    ck_assert_uint_eq(free_slots(f.p.init), 2 + FERRY__CONTROL_OPS);
    tu_fx_close(&f);
}
END_TEST

/* ---- freed requests serve the next ones ------------------------------------ */

/* Requests on the context's spare stack, counted by walking it. */
static unsigned spares_on_stack(ferry_context_t *ctx)
{
    unsigned n = 0;

    for (struct ferry_req *r = ferry__xfer_of(ctx)->req.spare; r != NULL;
         r = r->stack_next)
        n++;
    return n;
}

/*
 * A freed request is kept for the next one (xfer.c), which must start as
 * a fresh one: nothing of the last one's notification, iovs or progress.
 * The first request here notifies and has three iovs (more than a request
 * keeps inside itself); the next is a plain one-iov write that must land
 * with no notification.  Then 100 requests freed at once leave at most
 * FERRY__SPARE_REQS kept, as many as the count says.
 */
START_TEST(test_freed_requests_start_clean)
{
    enum { NREQ = 100, LEN = 4096 };
    const char *prov = tu_providers[_i];
    struct ferry_xfer_opts notify = FERRY_XFER_OPTS_INIT;
    struct ferry_notification got[4];
    struct tu_fx f;
    struct ferry_iov three[3], iov;
    ferry_req_t *req[NREQ];
    int ret;

    notify.flags = FERRY_XFER_NOTIFY;
    notify.notify_id = 77;
    notify.notify_value = 5;
    tu_fx_open(&f, prov, NULL, 0, 1, NREQ * LEN, NREQ * LEN);
    for (size_t i = 0; i < 3; i++)
        three[i] = (struct ferry_iov){f.lbuf + i * LEN, f.lmem, f.rmem,
                                      i * LEN, LEN};
    ret = ferry_write(f.p.peer, three, 3, &notify, &req[0]);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    ck_assert_ptr_ne(req[0]->iov, req[0]->iov_inline);
    ret = ferry_req_wait(req[0], 30000);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    ferry_req_close(req[0]);
    ck_assert_int_eq(ferry_notify_wait(f.p.target, got, 4, 30000), 1);
    ck_assert_uint_eq(got[0].id, 77);
    ck_assert_int_ge(ferry_progress(f.p.init), 0); /* frees what was given back */

    tu_fill(f.lbuf + LEN, LEN, 0x5e1);
    iov = (struct ferry_iov){f.lbuf + LEN, f.lmem, f.rmem, 5 * LEN, LEN};
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req[0]), 0);
    ck_assert_int_eq(req[0]->notify, FERRY__NOTIFY_NONE);
    ck_assert_ptr_eq(req[0]->iov, req[0]->iov_inline);
    ck_assert_uint_eq(req[0]->niov, 1);
    ck_assert_uint_eq(req[0]->bytes, LEN);
    ck_assert_ptr_null(req[0]->found);
    ck_assert_str_eq(req[0]->errmsg, "");
    ret = ferry_req_wait(req[0], 30000);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    ferry_req_close(req[0]);
    tu_assert_pattern(f.tbuf + 5 * LEN, LEN, 0x5e1, "%s: the write after", prov);
    ck_assert_int_eq(ferry_notify_wait(f.p.target, got, 4, 200),
                     FERRY_EAGAIN);

    for (size_t i = 0; i < NREQ; i++) {
        iov = (struct ferry_iov){f.lbuf + i * LEN, f.lmem, f.rmem, i * LEN, LEN};
        ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req[i]), 0);
    }
    for (size_t i = 0; i < NREQ; i++)
        ck_assert_int_eq(ferry_req_wait(req[i], 30000), 0);
    for (size_t i = 0; i < NREQ; i++)
        ferry_req_close(req[i]);
    ck_assert_int_ge(ferry_progress(f.p.init), 0);
    ck_assert_uint_le(ferry__xfer_of(f.p.init)->req.spares, FERRY__SPARE_REQS);
    ck_assert_uint_eq(spares_on_stack(f.p.init),
                      ferry__xfer_of(f.p.init)->req.spares);
    tu_fx_close(&f);
}
END_TEST

/* ---- iovs without lmem ----------------------------------------------------- */

static uint64_t oneshots(ferry_context_t *ctx)
{
    uint64_t n;

    ferry__lock_acquire(&ferry__fabric_of(ctx)->lock);
    n = ferry__xfer_of(ctx)->req.oneshot_registrations;
    ferry__lock_release(&ferry__fabric_of(ctx)->lock);
    return n;
}

/*
 * Four iovs, three without lmem (one of them in a buffer ferry has never
 * seen), written then read back: six registrations ferry has to find or
 * make.  Returns the change in the initiator's counters.
 */
static struct ferry_stats no_lmem(const char *prov,
                                  const struct ferry_config *cfg)
{
    struct tu_fx f;
    struct ferry_iov iov[4];
    uint8_t *plain = tu_alloc_buf(64 * KiB);
    struct ferry_stats before, after, d = FERRY_STATS_INIT;

    tu_fx_open(&f, prov, cfg, 0, 1, MiB, MiB);
    before = tu_stats(f.p.init);
    tu_fill(f.lbuf, 100000, 0xa0);
    tu_fill(f.lbuf + 200000, 5000, 0xa1);
    tu_fill(plain, 64 * KiB, 0xa2);
    tu_fill(f.lbuf + 300000, 7, 0xa3);
    iov[0] = (struct ferry_iov){f.lbuf, NULL, f.rmem, 0, 100000};
    iov[1] = (struct ferry_iov){f.lbuf + 200000, f.lmem, f.rmem, 100000, 5000};
    iov[2] = (struct ferry_iov){plain, NULL, f.rmem, 300001, 64 * KiB};
    iov[3] = (struct ferry_iov){f.lbuf + 300000, NULL, f.rmem, 900000, 7};
    tu_xfer_ok(f.p.peer, true, iov, 4, prov);
    tu_assert_pattern(f.tbuf, 100000, 0xa0, "%s: iov[0] without lmem", prov);
    tu_assert_pattern(f.tbuf + 100000, 5000, 0xa1, "%s: iov[1]", prov);
    tu_assert_pattern(f.tbuf + 300001, 64 * KiB, 0xa2,
                      "%s: iov[2] from an unregistered buffer", prov);
    tu_assert_pattern(f.tbuf + 900000, 7, 0xa3, "%s: iov[3]", prov);

    /* And back again into cleared buffers. */
    memset(f.lbuf, 0, f.llen);
    memset(plain, 0, 64 * KiB);
    tu_xfer_ok(f.p.peer, false, iov, 4, prov);
    tu_assert_pattern(f.lbuf, 100000, 0xa0, "%s: read into iov[0]", prov);
    tu_assert_pattern(f.lbuf + 200000, 5000, 0xa1, "%s: read into iov[1]",
                      prov);
    tu_assert_pattern(plain, 64 * KiB, 0xa2, "%s: read into iov[2]", prov);
    tu_assert_pattern(f.lbuf + 300000, 7, 0xa3, "%s: read into iov[3]", prov);

    after = tu_stats(f.p.init);
    ck_assert_uint_eq(after.oneshot_registrations, oneshots(f.p.init));
    d.rcache_hits = after.rcache_hits - before.rcache_hits;
    d.rcache_misses = after.rcache_misses - before.rcache_misses;
    d.oneshot_registrations =
        after.oneshot_registrations - before.oneshot_registrations;
    d.rcache_entries = after.rcache_entries;
    /* One-shot registrations went with their requests; explicit ones are
     * the only ones on the context's list. */
    ck_assert_ptr_eq(ferry__reg_of(f.p.init)->mem.list, f.lmem);
    ck_assert_ptr_null(f.lmem->next);
    tu_fx_close(&f);
    tu_free_buf(plain, 64 * KiB);
    return d;
}

/* With the cache: every iov without lmem was looked up (hit or miss); a
 * miss was cached or made a one-shot; what was cached is hit next time. */
static void assert_cached(const struct ferry_stats *d, const char *prov)
{
    ck_assert_msg(d->rcache_hits + d->rcache_misses == 6,
                  "%s: %llu hits + %llu misses for 6 iovs without lmem", prov,
                  (unsigned long long)d->rcache_hits,
                  (unsigned long long)d->rcache_misses);
    ck_assert_uint_le(d->oneshot_registrations, d->rcache_misses);
    if (d->oneshot_registrations == 0)
        ck_assert_msg(d->rcache_hits >= 3 && d->rcache_entries >= 3,
                      "%s: the read found %llu of its 3 buffers cached", prov,
                      (unsigned long long)d->rcache_hits);
}

START_TEST(test_no_lmem_default)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_stats d;

    tu_config(&cfg, prov);
    d = no_lmem(prov, &cfg);
    assert_cached(&d, prov);
}
END_TEST

START_TEST(test_no_lmem_mr_local)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;
    struct ferry_stats d;

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_LOCAL;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_msg(info.mr_mode & FERRY_MR_LOCAL, "LOCAL not in effect on %s",
                  prov);
    ck_assert(ferry__fabric_of(ctx)->register_local);
    ferry_context_close(ctx);
    d = no_lmem(prov, &cfg);
    assert_cached(&d, prov);
}
END_TEST

/* Without the cache, each of the six is a registration for its request. */
START_TEST(test_no_lmem_mr_local_no_cache)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_stats d;

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_LOCAL;
    cfg.registration_cache = 0;
    d = no_lmem(prov, &cfg);
    ck_assert_msg(d.oneshot_registrations == 6,
                  "%s: %llu one-shot registrations, expected 6", prov,
                  (unsigned long long)d.oneshot_registrations);
    ck_assert_uint_eq(d.rcache_hits + d.rcache_misses, 0);
}
END_TEST

/*
 * A registration ferry cannot make (unmapped memory, with FI_MR_ALLOCATED
 * forced) refuses the request with the iov's index and the reason.
 */
START_TEST(test_no_lmem_unregistrable)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    struct ferry_iov iov[2];
    ferry_req_t *req = (ferry_req_t *)0x1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *three, *hole;
    int ret;

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_ALLOCATED;
    cfg.registration_cache = 0;
    tu_fx_open(&f, prov, &cfg, 0, 1, 64 * KiB, 64 * KiB);
    /* A one-page hole between two mapped pages, made last so that no
     * allocation of the test lands in it. */
    three = tu_alloc_buf(3 * page);
    hole = three + page;
    ck_assert_int_eq(munmap(hole, page), 0);
    iov[0] = (struct ferry_iov){f.lbuf, NULL, f.rmem, 0, 100};
    iov[1] = (struct ferry_iov){hole + 100, NULL, f.rmem, 100, 100};
    ret = ferry_write(f.p.peer, iov, 2, NULL, &req);
    ck_assert_msg(ret == FERRY_EINVAL, "%s: %s: %s", prov, ferry_strerror(ret),
                  ferry_last_error());
    ck_assert_ptr_eq(req, (ferry_req_t *)0x1);
    /* The outer sentence and the inner reason, both intact. */
    ck_assert_msg(strncmp(ferry_last_error(),
                          "iov[1]: registering the local buffer failed: ",
                          45) == 0,
                  "sentence: '%s'", ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "is not entirely mapped memory") !=
                      NULL,
                  "sentence: '%s'", ferry_last_error());
    ck_assert_ptr_null(strstr(ferry_last_error() + 10, "iov[1]"));
    /* iov[0]'s registration was given back; nothing was posted. */
    ck_assert_uint_eq(tu_bytes_posted(f.p.init), 0);
    ck_assert_ptr_null(ferry__xfer_of(f.p.init)->req.active.head);
    tu_fx_close(&f);
    tu_free_buf(three, page);
    tu_free_buf(hole + page, page);
}
END_TEST

/* ---- offsets versus virtual addresses ------------------------------------- */

struct addr_mode {
    const char *prov;
    unsigned offer;
    bool virt;
};
/* Virtual addresses on shm where ferry does not ask it for ordered writes
 * (libfabric 2.5 and later): before, its ordered endpoints key a region
 * by offsets (fabric/provider.c, select_ordered_shm). */
static const struct addr_mode addr_modes[] = {
    {"shm", FERRY_MR_ALL & ~FERRY_MR_VIRT_ADDR, false},
    {"shm", FERRY_MR_ALL, true},
    {"tcp;ofi_rxm", FERRY_MR_ALL, false}, /* empty mr_mode on 1.17 */
};

START_TEST(test_remote_addressing)
{
    const struct addr_mode *m = &addr_modes[_i];
    bool virt = m->virt && FI_VERSION_GE(fi_version(), FI_VERSION(2, 5));
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct tu_pair p;
    const size_t skip = 100, rlen = 64 * KiB, whole = 128 * KiB;
    uint8_t *tbuf = tu_alloc_buf(whole), *lbuf = tu_alloc_buf(whole);
    uint8_t *want = tu_alloc_buf(whole);
    ferry_mem_t *tmem;
    ferry_rmem_t *rmem;
    struct ferry_iov iov;
    int ret;

    tu_config(&cfg, m->prov);
    cfg.mr_mode_offer = m->offer;
    tu_pair_open(&p, m->prov, &cfg);
    ck_assert_int_eq(ferry_context_info(p.init, &info), 0);
    ck_assert_msg(!!(info.mr_mode & FERRY_MR_VIRT_ADDR) == virt,
                  "%s with offer 0x%x: mr_mode 0x%x", m->prov, m->offer,
                  info.mr_mode);
    /* The region starts 100 bytes into the buffer, off any page boundary:
     * offset 0 is tbuf + 100 whichever way addresses are formed. */
    tu_fill(tbuf, whole, 0xd0d0);
    memcpy(want, tbuf, whole);
    ret = ferry_mem_register(p.target, tbuf + skip, rlen, FERRY_MEM_HOST, 0,
                             RW, &tmem);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    rmem = tu_share(tmem, p.peer);
    ck_assert(rmem->virt_addr == virt);
    if (virt)
        ck_assert_uint_eq(rmem->base, (uintptr_t)(tbuf + skip));
    ck_assert_uint_eq(ferry__rma_addr(rmem, 4000),
                      virt ? (uintptr_t)(tbuf + skip) + 4000 : 4000);

    tu_fill(lbuf, 5000, 0xd1);
    iov = (struct ferry_iov){lbuf, NULL, rmem, 4000, 5000};
    tu_xfer_ok(p.peer, true, &iov, 1, m->prov);
    tu_assert_pattern(tbuf + skip + 4000, 5000, 0xd1,
                      "%s: write at offset 4000", m->prov);
    tu_fill(want + skip + 4000, 5000, 0xd1);
    /* The last byte of the region, and nothing past it. */
    lbuf[8000] = 0x5a;
    iov = (struct ferry_iov){lbuf + 8000, NULL, rmem, rlen - 1, 1};
    tu_xfer_ok(p.peer, true, &iov, 1, m->prov);
    want[skip + rlen - 1] = 0x5a;
    tu_assert_same(tbuf, want, whole, "target after writes at offsets");

    /* Reads from a nonzero offset come from the same place. */
    tu_fill(tbuf + skip + 30000, 777, 0xd2);
    iov = (struct ferry_iov){lbuf + 10000, NULL, rmem, 30000, 777};
    tu_xfer_ok(p.peer, false, &iov, 1, m->prov);
    tu_assert_pattern(lbuf + 10000, 777, 0xd2, "%s: read at offset 30000",
                      m->prov);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(tmem), 0);
    tu_pair_close(&p);
    tu_free_buf(tbuf, whole);
    tu_free_buf(lbuf, whole);
    tu_free_buf(want, whole);
}
END_TEST

/* ---- bad input --------------------------------------------------------------- */

typedef int (*xfer_fn)(ferry_peer_t *, const struct ferry_iov *, size_t,
                       const struct ferry_xfer_opts *, ferry_req_t **);
static const xfer_fn xfers[2] = {ferry_write, ferry_read};
static const char *const xfer_names[2] = {"ferry_write", "ferry_read"};

/* Nothing was posted, nothing is held, and *req was left alone. */
static void assert_nothing_posted(struct tu_fx *f, ferry_req_t *req)
{
    ferry_context_t *ctx = f->p.init;

    ck_assert_ptr_eq(req, (ferry_req_t *)0x1);
    ck_assert_uint_eq(tu_bytes_posted(ctx), 0);
    ferry__lock_acquire(&ferry__fabric_of(ctx)->lock);
    ck_assert_uint_eq(ferry__xfer_of(ctx)->req.tx[0].ops_in_flight, 0);
    ck_assert_ptr_null(ferry__xfer_of(ctx)->req.active.head);
    ck_assert_ptr_null(ferry__xfer_of(ctx)->req.done.head);
    ck_assert_uint_eq(f->lmem->requests, 0);
    ck_assert_uint_eq(f->rmem->requests, 0);
    ferry__lock_release(&ferry__fabric_of(ctx)->lock);
    ck_assert_uint_eq(atomic_load(&f->lmem->users), 0);
    ck_assert_uint_eq(atomic_load(&f->rmem->users), 0);
}

/* Expects call to fail with err and a sentence containing every needle. */
#define EXPECT_FAIL(f, call, err, ...)                                        \
    do {                                                                      \
        ferry_req_t *req_ = (ferry_req_t *)0x1;                               \
        const char *needles_[] = {__VA_ARGS__};                               \
        int ret_ = call;                                                      \
        ck_assert_msg(ret_ == (err), "%s returned %d (%s), expected %s: %s",  \
                      #call, ret_, ferry_strerror(ret_), ferry_strerror(err), \
                      ferry_last_error());                                    \
        for (size_t k_ = 0; k_ < TU_ARRAY_LEN(needles_); k_++)                \
            ck_assert_msg(strstr(ferry_last_error(), needles_[k_]) != NULL,   \
                          "%s: sentence '%s' lacks '%s'", #call,              \
                          ferry_last_error(), needles_[k_]);                  \
        assert_nothing_posted((f), req_);                                     \
    } while (0)

START_TEST(test_bad_arguments)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_xfer_opts bad_opts = {.size = 0, .timeout_ms = 10};
    struct ferry_iov iov[2];

    tu_fx_open(&f, prov, NULL, 0, 1, 64 * KiB, 64 * KiB);
    iov[0] = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, 100};
    iov[1] = (struct ferry_iov){f.lbuf + 100, f.lmem, f.rmem, 100, 100};
    for (int w = 0; w < 2; w++) {
        xfer_fn x = xfers[w];

        EXPECT_FAIL(&f, x(NULL, iov, 2, &opts, &req_), FERRY_EINVAL,
                    xfer_names[w], "peer is NULL");
        EXPECT_FAIL(&f, x(f.p.peer, iov, 2, &opts, NULL), FERRY_EINVAL,
                    "req is NULL");
        EXPECT_FAIL(&f, x(f.p.peer, NULL, 2, &opts, &req_), FERRY_EINVAL,
                    "iov is NULL");
        EXPECT_FAIL(&f, x(f.p.peer, iov, 0, &opts, &req_), FERRY_EINVAL,
                    "n is 0");
        EXPECT_FAIL(&f, x(f.p.peer, iov, SIZE_MAX, &opts, &req_),
                    FERRY_EINVAL, "too many");
        EXPECT_FAIL(&f, x(f.p.peer, iov, 2, &bad_opts, &req_), FERRY_EINVAL,
                    "opts->size is 0", "FERRY_XFER_OPTS_INIT");
    }
    tu_fx_close(&f);
}
END_TEST

START_TEST(test_bad_iovs)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_iov iov[5];
    ferry_mem_t *small;
    int ret;

    /* Local room beyond the 64 KiB region, so remote bounds are what fail. */
    tu_fx_open(&f, prov, NULL, 0, 1, 64 * KiB, 128 * KiB);
    ck_assert_uint_eq(ferry_rmem_length(f.rmem), 65536);
    ret = ferry_mem_register(f.p.init, f.lbuf + 8192, 4096, FERRY_MEM_HOST, 0,
                             0, &small);
    ck_assert_int_eq(ret, 0);
    for (int w = 0; w < 2; w++) {
        xfer_fn x = xfers[w];

        for (size_t i = 0; i < 5; i++)
            iov[i] = (struct ferry_iov){f.lbuf + i * 1000, f.lmem, f.rmem,
                                        i * 1000, 1000};
        /* A zero-length iov. */
        iov[2].len = 0;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_EINVAL,
                    "iov[2]", "length is 0");
        iov[2].len = 1000;
        /* No local address. */
        iov[1].local = NULL;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_EINVAL,
                    "iov[1]", "local address is NULL");
        iov[1].local = f.lbuf + 1000;
        /* Local range sticking out of its registration, either end. */
        iov[1] = (struct ferry_iov){f.lbuf + 8192 + 4000, small, f.rmem, 0,
                                    200};
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_ERANGE,
                    "iov[1]", "not inside its registration");
        iov[1].local = f.lbuf + 8191;
        iov[1].len = 2;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_ERANGE,
                    "iov[1]", "not inside its registration");
        iov[1] = (struct ferry_iov){f.lbuf + 1000, f.lmem, f.rmem, 1000, 1000};
        /* Remote range past the end of the region. */
        iov[3].roffset = 4096;
        iov[3].len = 65537;
        iov[3].local = f.lbuf;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_ERANGE,
                    "iov[3]: remote offset 4096 + length 65537 exceeds the "
                    "65536-byte region");
        iov[3].roffset = 65536;
        iov[3].len = 1;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_ERANGE,
                    "iov[3]", "65536", "exceeds the 65536-byte region");
        /* Offset + length wrapping past 2^64. */
        iov[3].roffset = UINT64_MAX - 10;
        iov[3].len = 100;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_ERANGE,
                    "iov[3]", "18446744073709551605", "overflows 64 bits");
        iov[3] = (struct ferry_iov){f.lbuf + 3000, f.lmem, f.rmem, 3000, 1000};
        /* No remote region. */
        iov[4].rmem = NULL;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 5, NULL, &req_), FERRY_EINVAL,
                    "iov[4]", "rmem is NULL");
        iov[4].rmem = f.rmem;
    }
    ck_assert_int_eq(ferry_mem_close(small), 0);
    tu_fx_close(&f);
}
END_TEST

START_TEST(test_foreign_handles)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    ferry_context_t *other;
    ferry_peer_t *peer2;
    ferry_mem_t *omem, *tlocal;
    ferry_rmem_t *rmem2;
    uint8_t addr[512];
    size_t alen = sizeof(addr);
    struct ferry_iov iov[3];
    int ret;

    tu_fx_open(&f, prov, NULL, 0, 1, 64 * KiB, 64 * KiB);
    /* A third context with a region of its own, reached by a second peer. */
    tu_config(&cfg, prov);
    ck_assert_int_eq(ferry_context_create(&cfg, &other), 0);
    ck_assert_int_eq(ferry_context_address(other, addr, &alen), 0);
    ck_assert_int_eq(ferry_peer_add(f.p.init, addr, alen, &peer2), 0);
    ret = ferry_mem_register(other, f.tbuf, 4096, FERRY_MEM_HOST, 0, RW,
                             &omem);
    ck_assert_int_eq(ret, 0);
    rmem2 = tu_share(omem, peer2);
    /* The local buffer registered with the target's context, not init's. */
    ret = ferry_mem_register(f.p.target, f.lbuf, 4096, FERRY_MEM_HOST, 0, 0,
                             &tlocal);
    ck_assert_int_eq(ret, 0);

    for (int w = 0; w < 2; w++) {
        xfer_fn x = xfers[w];

        for (size_t i = 0; i < 3; i++)
            iov[i] = (struct ferry_iov){f.lbuf + i * 100, f.lmem, f.rmem,
                                        i * 100, 100};
        iov[1].rmem = rmem2;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 3, NULL, &req_), FERRY_EHANDLE,
                    "iov[1]", "another peer");
        iov[1].rmem = f.rmem;
        iov[2].lmem = tlocal;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 3, NULL, &req_), FERRY_EHANDLE,
                    "iov[2]", "another context");
        iov[2].lmem = f.lmem;

        /* Handles of the wrong kind are refused by type, never used. */
        EXPECT_FAIL(&f, x((ferry_peer_t *)f.lmem, iov, 3, NULL, &req_),
                    FERRY_EHANDLE, "not a live ferry peer");
        EXPECT_FAIL(&f, x((ferry_peer_t *)f.p.init, iov, 3, NULL, &req_),
                    FERRY_EHANDLE, "not a live ferry peer");
        EXPECT_FAIL(&f, x((ferry_peer_t *)f.rmem, iov, 3, NULL, &req_),
                    FERRY_EHANDLE, "not a live ferry peer");
        iov[0].rmem = (ferry_rmem_t *)f.lmem;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 3, NULL, &req_), FERRY_EHANDLE,
                    "iov[0]", "not a live remote region");
        iov[0].rmem = (ferry_rmem_t *)f.p.peer;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 3, NULL, &req_), FERRY_EHANDLE,
                    "iov[0]", "not a live remote region");
        iov[0].rmem = f.rmem;
        iov[1].lmem = (ferry_mem_t *)f.rmem;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 3, NULL, &req_), FERRY_EHANDLE,
                    "iov[1]", "not a live ferry registration");
        iov[1].lmem = (ferry_mem_t *)f.p.init;
        EXPECT_FAIL(&f, x(f.p.peer, iov, 3, NULL, &req_), FERRY_EHANDLE,
                    "iov[1]", "not a live ferry registration");
        iov[1].lmem = f.lmem;
    }
    /* The good handles still work after all that. */
    tu_fill(f.lbuf, 300, 0xe0);
    tu_xfer_ok(f.p.peer, true, iov, 3, prov);
    tu_assert_pattern(f.tbuf, 300, 0xe0, "%s: write after refusals", prov);

    ck_assert_int_eq(ferry_mem_close(tlocal), 0);
    ck_assert_int_eq(ferry_rmem_close(rmem2), 0);
    ck_assert_int_eq(ferry_peer_close(peer2), 0);
    ferry_context_close(other); /* omem goes with it */
    tu_fx_close(&f);
}
END_TEST

/* A bad iov after good ones: the good ones must not have gone out. */
START_TEST(test_bad_iov_in_middle_posts_nothing)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_iov iov[5];
    uint8_t *want = tu_alloc_buf(MiB);

    tu_fx_open(&f, prov, NULL, 0, 1, MiB, MiB);
    tu_fill(f.tbuf, MiB, 0x1111);
    memcpy(want, f.tbuf, MiB);
    tu_fill(f.lbuf, MiB, 0x2222);
    for (size_t i = 0; i < 5; i++)
        iov[i] = (struct ferry_iov){f.lbuf + i * 100000, f.lmem, f.rmem,
                                    i * 100000, 100000};
    iov[2].roffset = MiB - 1000; /* 99000 bytes too far */
    for (int w = 0; w < 2; w++)
        EXPECT_FAIL(&f, xfers[w](f.p.peer, iov, 5, NULL, &req_), FERRY_ERANGE,
                    "iov[2]", "exceeds the 1048576-byte region");
    /* The last one bad instead: four good ones ahead of it. */
    iov[2].roffset = 200000;
    iov[4].lmem = (ferry_mem_t *)f.rmem;
    for (int w = 0; w < 2; w++)
        EXPECT_FAIL(&f, xfers[w](f.p.peer, iov, 5, NULL, &req_),
                    FERRY_EHANDLE, "iov[4]");
    /* A good request afterwards completes; by then anything the refused
     * ones had posted would have landed too. */
    iov[4].lmem = f.lmem;
    tu_xfer_ok(f.p.peer, true, &iov[4], 1, prov);
    memcpy(want + 400000, f.lbuf + 400000, 100000);
    tu_assert_same(f.tbuf, want, MiB, "target after refused requests");
    ck_assert_uint_eq(tu_bytes_posted(f.p.init), 100000);
    tu_fx_close(&f);
    tu_free_buf(want, MiB);
}
END_TEST

/* ---- releasing regions that requests use ----------------------------------- */

/* Progresses both sides until init has no operation out (60 s at most). */
static void drain_both(ferry_context_t *init, ferry_context_t *target)
{
    uint64_t until = tu_now_ns() + 60ull * 1000000000u;
    size_t out;

    for (;;) {
        ck_assert_int_ge(ferry_progress(target), 0);
        ck_assert_int_ge(ferry_progress(init), 0);
        ferry__lock_acquire(&ferry__fabric_of(init)->lock);
        out = ferry__xfer_of(init)->req.tx[0].ops_in_flight;
        ferry__lock_release(&ferry__fabric_of(init)->lock);
        if (out == 0)
            break;
        ck_assert_msg(tu_now_ns() < until,
                      "%zu operations still out after 60 s", out);
    }
}

/*
 * Posts a write or read of the whole region on a stalled pair; returns once
 * its operation is out with the provider.  It cannot complete, whatever its
 * size, until the target progresses: delivery-complete operations need the
 * target's side of the provider.
 */
static ferry_req_t *post_stuck(struct tu_fx *f, bool write, uint64_t seed)
{
    struct ferry_iov iov = {f->lbuf, f->lmem, f->rmem, 0, f->tlen};
    ferry_req_t *req;
    int ret;

    tu_fill(write ? f->lbuf : f->tbuf, f->tlen, seed);
    ret = write ? ferry_write(f->p.peer, &iov, 1, NULL, &req)
                : ferry_read(f->p.peer, &iov, 1, NULL, &req);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    post_all_stalled(f, req, 1000);
    ck_assert_int_eq(ferry_req_test(req), FERRY_EINPROGRESS);
    ck_assert_uint_eq(req->ops_in_flight, 1);
    return req;
}

#define STUCK (16 * MiB)

static void busy_while_in_flight(const char *prov, bool write)
{
    struct tu_fx f;
    ferry_req_t *req;
    int ret;

    tu_fx_open_stalled(&f, prov, NULL, STUCK, STUCK, fx_drive);
    req = post_stuck(&f, write, 0x4242);

    ret = ferry_mem_close(f.lmem);
    ck_assert_msg(ret == FERRY_EBUSY, "deregister in flight gave %s: %s",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "in flight"));
    ret = ferry_rmem_close(f.rmem);
    ck_assert_msg(ret == FERRY_EBUSY, "rmem_free in flight gave %s: %s",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "in flight"));
    /* The peer holds the region, so it cannot go either. */
    ck_assert_int_eq(ferry_peer_close(f.p.peer), FERRY_EBUSY);
    /* EBUSY changed nothing: the handles are still live and linked. */
    ck_assert_uint_eq(f.lmem->magic, FERRY__MAGIC_MEM);
    ck_assert_uint_eq(f.rmem->magic, FERRY__MAGIC_RMEM);
    ck_assert_ptr_eq(ferry__reg_of(f.p.init)->mem.list, f.lmem);
    ck_assert_ptr_eq(ferry__reg_of(f.p.init)->mem.rlist, f.rmem);

    /* Freeing the request does not release the regions while the provider
     * still holds its operation. */
    ferry_req_close(req);
    ck_assert_int_eq(ferry_mem_close(f.lmem), FERRY_EBUSY);
    ck_assert_int_eq(ferry_rmem_close(f.rmem), FERRY_EBUSY);

    /* Let the target progress: the operation comes back, the freed request
     * goes, and then the regions can go (fx_close asserts it). */
    drain_both(f.p.init, f.p.target);
    ck_assert_ptr_null(ferry__xfer_of(f.p.init)->req.active.head);
    ck_assert_ptr_null(ferry__xfer_of(f.p.init)->req.done.head);
    /* The operation ran to its end on the provider's side. */
    if (write)
        tu_assert_pattern(f.tbuf, STUCK, 0x4242, "%s: drained write", prov);
    else
        tu_assert_pattern(f.lbuf, STUCK, 0x4242, "%s: drained read", prov);
    tu_fx_close(&f);
}

START_TEST(test_busy_while_write_in_flight)
{
    busy_while_in_flight(tu_providers[_i], true);
}
END_TEST

START_TEST(test_busy_while_read_in_flight)
{
    busy_while_in_flight(tu_providers[_i], false);
}
END_TEST

/*
 * Destroying the contexts with a request still out (and so its regions
 * still held) is the last resort, and must work.
 */
START_TEST(test_destroy_with_request_in_flight)
{
    struct tu_fx f;
    ferry_req_t *req;

    tu_fx_open_stalled(&f, tu_providers[_i], NULL, STUCK, STUCK, fx_drive);
    req = post_stuck(&f, true, 0x4343);
    (void)req; /* goes with the context */
    ck_assert_int_eq(ferry_rmem_close(f.rmem), FERRY_EBUSY);
    tu_pair_close(&f.p);
    tu_free_buf(f.tbuf, f.tlen);
    tu_free_buf(f.lbuf, f.llen);
}
END_TEST

/* ---- a request's end time --------------------------------------------------- */

/*
 * The requests a batch of completions ends take the clock read once for
 * the batch (progress.c); a request that ends any other way reads it
 * afresh.  The stalled pair's set-up writes came back in batches; then a
 * write into the stalled target ends by its deadline, and its end must
 * come that long after its start, not from the last batch's reading.
 */
START_TEST(test_end_time_outside_a_batch)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_req_result r = FERRY_REQ_RESULT_INIT;
    struct ferry_iov iov;
    struct tu_fx f;
    ferry_req_t *req;

    tu_fx_open_stalled(&f, tu_providers[_i], NULL, STUCK, STUCK, fx_drive);
    ck_assert(!ferry__xfer_of(f.p.init)->req.in_batch);
    ck_assert_uint_eq(ferry__xfer_of(f.p.init)->req.batch_ns, 0);
    iov = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, f.tlen};
    opts.timeout_ms = 50;
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, &opts, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 30000), FERRY_ETIMEDOUT);
    ck_assert_int_eq(ferry_req_result(req, &r), 0);
    ck_assert_uint_ge(r.ended_ns + TU_REQ_CLOCK_SLACK_NS,
                      r.posted_ns + 50u * 1000000u);
    ck_assert_uint_le(r.ended_ns, tu_now_ns() + TU_REQ_CLOCK_SLACK_NS);
    ferry_req_close(req);
    drain_both(f.p.init, f.p.target);
    tu_fx_close(&f);
}
END_TEST

/* ---- errors name what the operation carried --------------------------------- */

/*
 * An operation that fails ends its request with a sentence naming the
 * items it carried, one or a merged run: iovs, or a prepared post's pairs
 * with their blocks.  (The loopback providers report a bad remote key as
 * a lost connection, so the names are checked here on requests built by
 * hand.)
 */
START_TEST(test_items_named)
{
    uint32_t lidx[] = {9, 17, 18, 19}, ridx[] = {1, 4, 5, 6};
    struct ferry_req req = {.niov = 4};
    char buf[96];

    ferry__req_items_name(&req, 2, 2, buf, sizeof(buf));
    ck_assert_str_eq(buf, "iov[2]");
    ferry__req_items_name(&req, 1, 3, buf, sizeof(buf));
    ck_assert_str_eq(buf, "iov[1..3], merged");
    req.prep = (struct ferry_prep *)&req; /* only tested for NULL */
    req.lidx = lidx;
    req.ridx = ridx;
    ferry__req_items_name(&req, 0, 0, buf, sizeof(buf));
    ck_assert_str_eq(buf, "pair 0: local block 9, remote block 1");
    ferry__req_items_name(&req, 1, 3, buf, sizeof(buf));
    ck_assert_str_eq(buf, "pairs 1..3, merged: local blocks 17..19, remote "
                          "blocks 4..6");
    /* A short buffer gets a terminated prefix. */
    ferry__req_items_name(&req, 1, 3, buf, 8);
    ck_assert_str_eq(buf, "pairs 1");
}
END_TEST

/* ---- suite ------------------------------------------------------------------ */

static Suite *xfer_suite(void)
{
    Suite *s = suite_create("xfer");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "chunking", 60);
    tcase_add_loop_test(tc, test_small_max_msg_write, 0, np);
    tcase_add_loop_test(tc, test_small_max_msg_read, 0, np);
    tcase_add_loop_test(tc, test_small_tx_depth_write, 0, np);
    tcase_add_loop_test(tc, test_covered_writes, 0, np);
    tcase_add_loop_test(tc, test_small_tx_depth_read, 0, np);
    tcase_add_loop_test(tc, test_small_tx_depth_many_requests, 0, np);
    tcase_add_loop_test(tc, test_freed_requests_start_clean, 0, np);

    tc = tu_tcase(s, "lmem", 60);
    tcase_add_loop_test(tc, test_no_lmem_default, 0, np);
    tcase_add_loop_test(tc, test_no_lmem_mr_local, 0, np);
    tcase_add_loop_test(tc, test_no_lmem_mr_local_no_cache, 0, np);
    tcase_add_loop_test(tc, test_no_lmem_unregistrable, 0, np);

    tc = tu_tcase(s, "addressing", 60);
    tcase_add_loop_test(tc, test_remote_addressing, 0,
                        (int)TU_ARRAY_LEN(addr_modes));

    tc = tu_tcase(s, "invalid", 60);
    tcase_add_loop_test(tc, test_bad_arguments, 0, np);
    tcase_add_loop_test(tc, test_bad_iovs, 0, np);
    tcase_add_loop_test(tc, test_foreign_handles, 0, np);
    tcase_add_loop_test(tc, test_bad_iov_in_middle_posts_nothing, 0, np);
    tcase_add_test(tc, test_items_named);

    tc = tu_tcase(s, "busy", 60);
    tcase_add_loop_test(tc, test_busy_while_write_in_flight, 0, np);
    tcase_add_loop_test(tc, test_busy_while_read_in_flight, 0, np);
    tcase_add_loop_test(tc, test_destroy_with_request_in_flight, 0, np);

    tc = tu_tcase(s, "end time", 60);
    tcase_add_loop_test(tc, test_end_time_outside_a_batch, 0, np);
    return s;
}

int main(void)
{
    return tu_run(xfer_suite());
}
