/*
 * ferry_context_fd and ferry_context_arm: a descriptor event loops wait
 * on.  It becomes readable when, armed, a request ends or a notification
 * arrives; arming refuses (FERRY_EAGAIN) when something came since the
 * last arm; it stays quiet when nothing happens; after a caller's tests
 * stood in for the thread, an arm hands back to it.
 */
#include "testutil.h"

#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>

/* Whether fd becomes readable within ms. */
static bool readable_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Arms until armed (events from before are looked at by the caller). */
static void arm(ferry_context_t *ctx)
{
    int ret;

    while ((ret = ferry_context_arm(ctx)) == FERRY_EAGAIN)
        continue;
    ck_assert_msg(ret == 0, "arm: %s", ferry_last_error());
}

START_TEST(test_refusals)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov); /* no progress thread */
    int fd = -1;

    TU_EXPECT_ERROR(ferry_context_fd(ctx, &fd), FERRY_EINVAL,
                    "no progress thread");
    ck_assert_int_eq(fd, -1);
    TU_EXPECT_ERROR(ferry_context_arm(ctx), FERRY_EINVAL,
                    "call ferry_context_fd first");
    TU_EXPECT_ERROR(ferry_context_fd(NULL, &fd), FERRY_EINVAL, "");
    ferry_context_close(ctx);
}
END_TEST

/* The initiator's requests: the descriptor says when one ended. */
START_TEST(test_request_ends)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    ferry_req_t *req;
    int fd;

    tu_config(&cfg, prov);
    tu_fx_open(&f, prov, &cfg, 1, 1, 1 * MiB, 1 * MiB);
    ck_assert_int_eq(ferry_context_fd(f.p.init, &fd), 0);
    ck_assert_int_ge(fd, 0);
    arm(f.p.init);
    ck_assert_msg(!readable_within(fd, 50), "readable with nothing done");
    for (unsigned round = 0; round < 3; round++) {
        struct ferry_iov iov = {f.lbuf, f.lmem, f.rmem, 0, 1 * MiB};

        tu_fill(f.lbuf, 1 * MiB, 0xf00 + round);
        ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req), 0);
        ck_assert_msg(readable_within(fd, 30000),
                      "round %u: the request's end did not make the "
                      "descriptor readable",
                      round);
        /* The progress thread ended it: a test, not a wait, sees it. */
        ck_assert_int_eq(ferry_req_test(req), 0);
        ferry_req_close(req);
        /* It came after the last arm: arming says look again, once. */
        ck_assert_int_eq(ferry_context_arm(f.p.init), FERRY_EAGAIN);
        ck_assert_int_eq(ferry_context_arm(f.p.init), 0);
        ck_assert_msg(!readable_within(fd, 50),
                      "round %u: readable again with nothing new", round);
        tu_assert_pattern(f.tbuf, 1 * MiB, 0xf00 + round, "round %u", round);
    }
    tu_fx_close(&f);
}
END_TEST

/*
 * A caller that tests in a loop long enough for the progress thread to
 * stand aside (its tests then progress in the thread's place), then an
 * event loop on the descriptor: the thread takes over again at the arm,
 * and every byte lands either way.
 */
START_TEST(test_tester_then_event_loop)
{
    enum { BLOCK = 4 * KiB, SLOTS = 64, DEPTH = 8, WRITES = 4000 };
    const char *prov = tu_providers[_i];
    ferry_req_t *req[DEPTH] = {0};
    uint64_t posted = 0, done = 0;
    struct tu_fx f;
    int fd, ret;

    tu_fx_open(&f, prov, NULL, 1, 1, SLOTS * BLOCK, SLOTS * BLOCK);
    ck_assert_int_eq(ferry_context_fd(f.p.init, &fd), 0);
    tu_fill(f.lbuf, SLOTS * BLOCK, 0x7e57);
    /* Lane k writes slot (k + n * DEPTH) % SLOTS: every slot, again and
     * again, from the same source bytes. */
    while (done < WRITES) {
        for (unsigned k = 0; k < DEPTH; k++) {
            if (req[k] != NULL) {
                if ((ret = ferry_req_test(req[k])) == FERRY_EINPROGRESS)
                    continue;
                ck_assert_msg(ret == 0, "%s: write %" PRIu64 ": %s", prov,
                              done, ferry_last_error());
                ferry_req_close(req[k]);
                req[k] = NULL;
                done++;
            }
            if (posted < WRITES) {
                size_t off = (size_t)(posted % SLOTS) * BLOCK;
                struct ferry_iov iov = {f.lbuf + off, f.lmem, f.rmem, off,
                                        BLOCK};

                ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL,
                                             &req[k]),
                                 0);
                posted++;
            }
        }
    }
    tu_assert_pattern(f.tbuf, SLOTS * BLOCK, 0x7e57, "%s: tested", prov);
    for (unsigned round = 0; round < 3; round++) {
        struct ferry_iov iov = {f.lbuf, f.lmem, f.rmem, 0, SLOTS * BLOCK};
        ferry_req_t *r;

        tu_fill(f.lbuf, SLOTS * BLOCK, 0x7e60 + round);
        arm(f.p.init);
        ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &r), 0);
        ck_assert_msg(readable_within(fd, 30000),
                      "%s: round %u: after the tests, the thread did not "
                      "take over and end the request",
                      prov, round);
        ck_assert_int_eq(ferry_req_test(r), 0);
        ferry_req_close(r);
        tu_assert_pattern(f.tbuf, SLOTS * BLOCK, 0x7e60 + round,
                          "%s: round %u", prov, round);
    }
    tu_fx_close(&f);
}
END_TEST

/* The target's notifications: the descriptor says when one arrived. */
START_TEST(test_notification_arrives)
{
    const char *prov = tu_providers[_i];
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_notification n[4];
    struct tu_fx f;
    ferry_req_t *req;
    int fd;

    tu_fx_open(&f, prov, NULL, 0, 1, 64 * KiB, 64 * KiB);
    ck_assert_int_eq(ferry_context_fd(f.p.target, &fd), 0);
    arm(f.p.target);
    {
        struct ferry_iov iov = {f.lbuf, f.lmem, f.rmem, 0, 64 * KiB};

        opts.flags = FERRY_XFER_NOTIFY;
        opts.notify_id = 7;
        opts.notify_value = 3;
        ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, &opts, &req), 0);
        ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
        ferry_req_close(req);
    }
    ck_assert_msg(readable_within(fd, 30000),
                  "the notification did not make the descriptor readable");
    ck_assert_int_eq(ferry_notify_poll(f.p.target, n, 4), 1);
    ck_assert(n[0].id == 7 && n[0].value == 3);
    arm(f.p.target);
    ck_assert(!readable_within(fd, 50));
    tu_fx_close(&f);
}
END_TEST

static Suite *eventfd_suite(void)
{
    Suite *s = suite_create("eventfd");
    int np = (int)tu_nproviders;
    TCase *tc = tu_tcase(s, "eventfd", 120);

    tcase_add_loop_test(tc, test_refusals, 0, np);
    tcase_add_loop_test(tc, test_request_ends, 0, np);
    tcase_add_loop_test(tc, test_notification_arrives, 0, np);
    tcase_add_loop_test(tc, test_tester_then_event_loop, 0, np);
    return s;
}

int main(void)
{
    return tu_run(eventfd_suite());
}
