/*
 * progress module through the API: what ferry_req_test and ferry_req_wait
 * return for an ended request and for handles of another kind; a
 * deadline against a target stopped in another process; and a peer
 * killed after a post.  (Requests held out with the provider by a target
 * that does not progress, cancel, a peer killed mid-transfer, and the
 * threads: test/unit/check_progress.c.)
 */
#include "progressutil.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

/* ---- test and wait ------------------------------------------------------ */

START_TEST(test_done_request_answers_zero)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_iov iov;
    ferry_req_t *req;
    int ret;

    tu_fx_open(&f, prov, NULL, 0, 1, 256 * KiB, 256 * KiB);
    tu_fill(f.lbuf, 256 * KiB, 0x11);
    iov = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, 256 * KiB};
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req), 0);
    ret = ferry_req_wait(req, 30000);
    ck_assert_msg(ret == 0, "%s: wait gave %s: %s", prov, ferry_strerror(ret),
                  ferry_last_error());
    ck_assert_str_eq(ferry_last_error(), "");
    tu_assert_pattern(f.tbuf, 256 * KiB, 0x11, "%s", prov);
    /* Asking again, in any way, gives the same answer. */
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ferry_req_test(req), 0);
        ck_assert_int_eq(ferry_req_wait(req, 0), 0);
        ck_assert_int_eq(ferry_req_wait(req, -1), 0);
    }
    /* Cancelling an ended request changes nothing. */
    ck_assert_int_eq(ferry_req_cancel(req), 0);
    ck_assert_int_eq(ferry_req_test(req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 10), 0);
    ferry_req_close(req);
    ferry_req_close(NULL);

    /* A read, polled with ferry_req_test alone. */
    memset(f.lbuf, 0, 256 * KiB);
    ck_assert_int_eq(ferry_read(f.p.peer, &iov, 1, NULL, &req), 0);
    {
        uint64_t until = tu_now_ns() + 30000 * MS;

        while ((ret = ferry_req_test(req)) == FERRY_EINPROGRESS)
            ck_assert(tu_now_ns() < until);
    }
    ck_assert_msg(ret == 0, "%s: read gave %s: %s", prov, ferry_strerror(ret),
                  ferry_last_error());
    tu_assert_pattern(f.lbuf, 256 * KiB, 0x11, "%s", prov);
    ferry_req_close(req);
    tu_fx_close(&f);
}
END_TEST

START_TEST(test_bad_handles)
{
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct tu_fx f;

    tu_fx_open(&f, tu_tcp(), NULL, 0, 1, 4096, 4096);
    ck_assert_int_eq(ferry_req_test(NULL), FERRY_EINVAL);
    tu_assert_sentence("ferry_req_test: request is NULL", NULL);
    ck_assert_int_eq(ferry_req_wait(NULL, 0), FERRY_EINVAL);
    tu_assert_sentence("ferry_req_wait: request is NULL", NULL);
    ck_assert_int_eq(ferry_req_cancel(NULL), FERRY_EINVAL);
    ck_assert_int_eq(ferry_progress(NULL), FERRY_EINVAL);
    /* Handles of other kinds are recognised as such and left alone. */
    ck_assert_int_eq(ferry_req_test((ferry_req_t *)f.lmem), FERRY_EHANDLE);
    tu_assert_sentence("not a live ferry request", NULL);
    ck_assert_int_eq(ferry_req_wait((ferry_req_t *)f.rmem, 100),
                     FERRY_EHANDLE);
    ck_assert_int_eq(ferry_req_cancel((ferry_req_t *)f.p.peer),
                     FERRY_EHANDLE);
    ck_assert_int_eq(ferry_progress((ferry_context_t *)f.lmem),
                     FERRY_EHANDLE);
    tu_assert_sentence("not a live ferry context", NULL);
    ferry_req_close((ferry_req_t *)f.lmem); /* ignored */
    ferry_req_close((ferry_req_t *)f.p.init);
    /* Both still pass their calls' handle checks. */
    ck_assert_ptr_nonnull(ferry_mem_path(f.lmem));
    ck_assert_int_eq(ferry_context_info(f.p.init, &info), 0);
    tu_fx_close(&f); /* the registrations are intact */
}
END_TEST

/* ---- deadlines ---------------------------------------------------------- */

/* A target in another process, stopped with SIGSTOP. */
START_TEST(test_deadline_stopped_child)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct tu_child c;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_req_t *req;
    uint8_t *buf = tu_alloc_buf(STUCK);
    struct ferry_iov iov;
    int st;

    tu_child_start(&c, prov, STUCK, 0x6060);
    ck_assert_int_eq(kill(c.pid, SIGSTOP), 0);
    ck_assert_int_eq(waitpid(c.pid, &st, WUNTRACED), c.pid);
    ck_assert(WIFSTOPPED(st));
    tu_config(&cfg, prov);
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_int_eq(ferry_peer_add(ctx, c.addr, c.addr_len, &peer), 0);
    ck_assert_int_eq(ferry_rmem_import(peer, c.rkey, c.rkey_len, &rmem), 0);
    tu_fill(buf, STUCK, 0x6161);
    iov = (struct ferry_iov){buf, NULL, rmem, 0, STUCK};
    opts.timeout_ms = 200;
    ck_assert_int_eq(ferry_write(peer, &iov, 1, &opts, &req), 0);
    expect_deadline(req, 200, prov);
    ferry_req_close(req);
    /* The peer never comes back; the context goes with the write out. */
    ferry_context_close(ctx);
    reap_killed(&c);
    tu_free_buf(buf, STUCK);
}
END_TEST

/* ---- peer killed -------------------------------------------------------- */

/* Stopped before anything was posted, killed after the first progress:
 * none of the data can have reached it. */
START_TEST(test_peer_killed_after_post)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct victim v;
    struct ferry_iov iov;
    ferry_req_t *req;
    uint64_t t0;
    int st;

    tu_config(&cfg, prov);
    victim_open(&v, prov, &cfg);
    ck_assert_int_eq(kill(v.c.pid, SIGSTOP), 0);
    ck_assert_int_eq(waitpid(v.c.pid, &st, WUNTRACED), v.c.pid);
    iov = (struct ferry_iov){v.buf, NULL, v.rmem, 0, BIG};
    opts.timeout_ms = KILL_DEADLINE_MS;
    t0 = tu_now_ns();
    ck_assert_int_eq(ferry_write(v.peer, &iov, 1, &opts, &req), 0);
    ck_assert_int_eq(ferry_req_test(req), FERRY_EINPROGRESS);
    reap_killed(&v.c);
    victim_finish(&v, req, t0, prov);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *progress_suite(void)
{
    Suite *s = suite_create("progress");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "req", 60);
    tcase_add_loop_test(tc, test_done_request_answers_zero, 0, np);
    tcase_add_test(tc, test_bad_handles);

    tc = tu_tcase(s, "deadline", 60);
    tcase_add_loop_test(tc, test_deadline_stopped_child, 0, np);

    tc = tu_tcase(s, "killed", 60);
    tcase_add_loop_test(tc, test_peer_killed_after_post, 0, np);
    return s;
}

int main(void)
{
    return tu_run(progress_suite());
}
