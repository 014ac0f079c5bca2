/*
 * Per-request results and waiting on many requests: ferry_req_result
 * (status, bytes moved, when it was taken and ended, the first iov that
 * failed, the caller's user data) and ferry_req_wait_any (the first of
 * many to end, NULL entries skipped, one context), with their refusals.
 */
#include "testutil.h"

#include <stdint.h>
#include <string.h>

#define LEN (64 * KiB)

static struct ferry_req_result result_of(ferry_req_t *req)
{
    struct ferry_req_result r = FERRY_REQ_RESULT_INIT;

    ck_assert_msg(ferry_req_result(req, &r) == 0, "result: %s",
                  ferry_last_error());
    return r;
}

/* A write into a target that does not progress: it stays running until
 * tu_finish_on_stalled drives the target. */
static ferry_req_t *stalled_write(struct tu_fx *f, const char *prov)
{
    ferry_req_t *req;

    tu_fx_open_stalled(f, prov, NULL, LEN, LEN, NULL);
    struct ferry_iov iov = {f->lbuf, f->lmem, f->rmem, 0, LEN};
    ck_assert_int_eq(ferry_write(f->p.peer, &iov, 1, NULL, &req), 0);
    return req;
}

/* Two iovs, user data: everything the result says of a success. */
START_TEST(test_result_of_a_success)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov[2];
    struct ferry_req_result r;
    ferry_req_t *req;
    int mine = 42;

    tu_config(&cfg, prov);
    tu_fx_open(&f, prov, &cfg, 1, 1, 2 * LEN, 2 * LEN);
    iov[0] = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, LEN};
    iov[1] = (struct ferry_iov){f.lbuf + LEN, f.lmem, f.rmem, LEN, LEN / 2};
    opts.user_data = &mine;
    tu_fill(f.lbuf, 2 * LEN, 0x2e5);
    uint64_t before = tu_now_ns();
    ck_assert_int_eq(ferry_write(f.p.peer, iov, 2, &opts, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    r = result_of(req);
    ck_assert_int_eq(r.status, 0);
    ck_assert_uint_eq(r.bytes, LEN + LEN / 2);
    ck_assert_uint_eq(r.bytes_done, r.bytes);
    ck_assert_uint_ge(r.posted_ns + TU_REQ_CLOCK_SLACK_NS, before);
    ck_assert_uint_ge(r.ended_ns, r.posted_ns);
    ck_assert_uint_le(r.ended_ns, tu_now_ns() + TU_REQ_CLOCK_SLACK_NS);
    ck_assert_uint_eq(r.failed_iov, FERRY_NO_IOV);
    ck_assert_str_eq(r.error, "");
    ck_assert_ptr_eq(r.user_data, &mine);
    ferry_req_close(req);
    tu_fx_close(&f);
}
END_TEST

/* A caller built with an older header: its opts end before user_data,
 * its result before the fields it does not know; nothing past them is
 * read or written. */
START_TEST(test_older_callers)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_req_result r;
    ferry_req_t *req;
    int mine;

    tu_config(&cfg, prov);
    tu_fx_open(&f, prov, &cfg, 1, 1, LEN, LEN);
    struct ferry_iov iov = {f.lbuf, f.lmem, f.rmem, 0, LEN};
    opts.size = offsetof(struct ferry_xfer_opts, user_data);
    opts.user_data = &mine; /* past its size: must not be taken */
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, &opts, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    memset(&r, 0x5a, sizeof(r));
    r.size = offsetof(struct ferry_req_result, bytes_done);
    ck_assert_int_eq(ferry_req_result(req, &r), 0);
    ck_assert_int_eq(r.status, 0);
    ck_assert_uint_eq(r.bytes, LEN);
    ck_assert_uint_eq(r.bytes_done, 0x5a5a5a5a5a5a5a5aull);
    ck_assert_uint_eq(r.size, offsetof(struct ferry_req_result, bytes_done));
    r = result_of(req);
    ck_assert_ptr_null(r.user_data);
    ferry_req_close(req);
    tu_fx_close(&f);
}
END_TEST

/* While it runs: no end time, no failure; then it ends. */
START_TEST(test_result_while_running)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_req_result r;
    ferry_req_t *req;

    req = stalled_write(&f, prov);
    r = result_of(req);
    ck_assert_int_eq(r.status, FERRY_EINPROGRESS);
    ck_assert_uint_eq(r.ended_ns, 0);
    ck_assert_uint_ne(r.posted_ns, 0);
    ck_assert_uint_eq(r.failed_iov, FERRY_NO_IOV);
    tu_finish_on_stalled(f.p.target, req, "the stalled write");
    tu_fx_close(&f);
}
END_TEST

/* One request over a live region and a deregistered one: it fails for
 * its second iov, and says which; wait_any hands back that status. */
START_TEST(test_result_names_the_failing_iov)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    uint8_t *a = tu_alloc_buf(LEN), *b = tu_alloc_buf(LEN);
    uint8_t *l = tu_alloc_buf(2 * LEN);
    ferry_mem_t *ma, *mb, *ml;
    ferry_rmem_t *ra, *rb;
    ferry_req_t *req;
    struct ferry_req_result r;
    size_t index;
    int ret;

    tu_pair_open(&p, prov, NULL);
    ma = tu_register(p.target, a, LEN, RW);
    mb = tu_register(p.target, b, LEN, RW);
    ml = tu_register(p.init, l, 2 * LEN, 0);
    ra = tu_share(ma, p.peer);
    rb = tu_share(mb, p.peer);
    ck_assert_int_eq(ferry_mem_close(mb), 0);
    struct ferry_iov iov[2] = {{l, ml, ra, 0, LEN}, {l + LEN, ml, rb, 0, LEN}};
    ck_assert_int_eq(ferry_write(p.peer, iov, 2, NULL, &req), 0);
    ret = ferry_req_wait_any(&req, 1, 30000, &index);
    ck_assert_msg(ret == FERRY_ESTALE, "ended with %d: %s", ret,
                  ferry_last_error());
    ck_assert_uint_eq(index, 0);
    r = result_of(req);
    ck_assert_int_eq(r.status, FERRY_ESTALE);
    ck_assert_uint_eq(r.failed_iov, 1);
    ck_assert_ptr_nonnull(strstr(r.error, "iov[1]"));
    ck_assert_uint_le(r.bytes_done, LEN);
    ck_assert_uint_ne(r.ended_ns, 0);
    ferry_req_close(req);
    /* The request ended before its first iov's write came back; the
     * region it writes stays held until it has. */
    uint64_t t0 = tu_now_ns();
    int freed;
    while ((freed = ferry_rmem_close(ra)) == FERRY_EBUSY && tu_ms_since(t0) < 30000)
        ferry_progress(p.init);
    ck_assert_int_eq(freed, 0);
    ck_assert_int_eq(ferry_rmem_close(rb), 0);
    ck_assert_int_eq(ferry_mem_close(ma), 0);
    ck_assert_int_eq(ferry_mem_close(ml), 0);
    tu_pair_close(&p);
    tu_free_buf(a, LEN);
    tu_free_buf(b, LEN);
    tu_free_buf(l, 2 * LEN);
}
END_TEST

#define NREQ 4

/* Every request comes back once, whichever order they end in; the
 * caller clears the ones it is done with. */
START_TEST(test_wait_any_each_once)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    ferry_req_t *reqs[NREQ], *kept[NREQ];
    unsigned seen[NREQ] = {0};
    size_t index;

    tu_config(&cfg, prov);
    tu_fx_open(&f, prov, &cfg, 1, 1, NREQ * LEN, NREQ * LEN);
    for (size_t i = 0; i < NREQ; i++) {
        struct ferry_iov iov = {f.lbuf + i * LEN, f.lmem, f.rmem, i * LEN,
                                LEN};
        ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &reqs[i]), 0);
        kept[i] = reqs[i];
    }
    for (size_t done = 0; done < NREQ; done++) {
        int ret = ferry_req_wait_any(reqs, NREQ, 30000, &index);

        ck_assert_msg(ret == 0, "wait_any: %s", ferry_last_error());
        ck_assert_uint_lt(index, NREQ);
        seen[index]++;
        reqs[index] = NULL;
    }
    for (size_t i = 0; i < NREQ; i++) {
        ck_assert_uint_eq(seen[i], 1);
        ferry_req_close(kept[i]);
    }
    /* Nothing left to wait for: said, not waited. */
    TU_EXPECT_ERROR(ferry_req_wait_any(reqs, NREQ, 10, &index), FERRY_EINVAL,
                    "no request among the 4 entries");
    ck_assert_uint_eq(index, NREQ);
    tu_fx_close(&f);
}
END_TEST

/* A wait that times out says so with FERRY_EAGAIN and index n. */
START_TEST(test_wait_any_times_out)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *req;
    size_t index = 0;

    req = stalled_write(&f, prov);
    ferry_req_t *reqs[2] = {NULL, req};
    TU_EXPECT_ERROR(ferry_req_wait_any(reqs, 2, 50, &index),
                    FERRY_EAGAIN, "none of the requests has ended");
    ck_assert_uint_eq(index, 2);
    tu_finish_on_stalled(f.p.target, req, "the stalled write");
    tu_fx_close(&f);
}
END_TEST

START_TEST(test_refusals)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f, g;
    struct ferry_req_result r = FERRY_REQ_RESULT_INIT;
    ferry_req_t *a, *b;
    size_t index;

    tu_config(&cfg, prov);
    tu_fx_open(&f, prov, &cfg, 1, 1, LEN, LEN);
    tu_fx_open(&g, prov, &cfg, 1, 1, LEN, LEN);
    struct ferry_iov fi = {f.lbuf, f.lmem, f.rmem, 0, LEN};
    struct ferry_iov gi = {g.lbuf, g.lmem, g.rmem, 0, LEN};
    ck_assert_int_eq(ferry_write(f.p.peer, &fi, 1, NULL, &a), 0);
    ck_assert_int_eq(ferry_write(g.p.peer, &gi, 1, NULL, &b), 0);
    ferry_req_t *two[2] = {a, b};
    TU_EXPECT_ERROR(ferry_req_wait_any(two, 2, 1000, &index), FERRY_EINVAL,
                    "reqs[1] belongs to another context than reqs[0]");
    TU_EXPECT_ERROR(ferry_req_wait_any(two, 2, 1000, NULL), FERRY_EINVAL,
                    "index is NULL");
    TU_EXPECT_ERROR(ferry_req_wait_any(NULL, 2, 1000, &index), FERRY_EINVAL,
                    "no request among");
    TU_EXPECT_ERROR(ferry_req_result(a, NULL), FERRY_EINVAL, "out is NULL");
    r.size = 0;
    TU_EXPECT_ERROR(ferry_req_result(a, &r), FERRY_EINVAL,
                    "initialise it with FERRY_REQ_RESULT_INIT");
    TU_EXPECT_ERROR(ferry_req_result(NULL, &r), FERRY_EINVAL, "");
    ck_assert_int_eq(ferry_req_wait(a, 30000), 0);
    ck_assert_int_eq(ferry_req_wait(b, 30000), 0);
    ferry_req_close(a);
    ferry_req_close(b);
    tu_fx_close(&g);
    tu_fx_close(&f);
}
END_TEST

static Suite *result_suite(void)
{
    Suite *s = suite_create("result");
    int np = (int)tu_nproviders;
    TCase *tc = tu_tcase(s, "result", 120);

    tcase_add_loop_test(tc, test_result_of_a_success, 0, np);
    tcase_add_loop_test(tc, test_older_callers, 0, np);
    tcase_add_loop_test(tc, test_result_while_running, 0, np);
    tcase_add_loop_test(tc, test_result_names_the_failing_iov, 0, np);
    tcase_add_loop_test(tc, test_wait_any_each_once, 0, np);
    tcase_add_loop_test(tc, test_wait_any_times_out, 0, np);
    tcase_add_loop_test(tc, test_refusals, 0, np);
    return s;
}

int main(void)
{
    return tu_run(result_suite());
}
