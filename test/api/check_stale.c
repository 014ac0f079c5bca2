/*
 * Stale remote keys, one request's error (docs/semantics.md): a write or
 * read to a region the target deregistered ends at once with FERRY_ESTALE
 * and a sentence that says what happened and what to do, and it costs
 * that request only: the peer stays UP, and transfers to its live regions
 * go on succeeding.  On tcp (tu_tcp) and shm, between two contexts of
 * this process and with the target in a child process (tu_child_start),
 * whose region is replaced under a held key.  And a target context
 * destroyed in this process while an initiator holds it as a peer and
 * keeps progressing: the peer is declared dead with a sentence saying
 * so, and nothing crashes (shm reaches such a peer through the target's
 * own mapping, which its destruction unmaps).
 */
#include "peerutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN (64 * KiB)
/* Live writes after the stale one: each must succeed. */
#define LIVE_WRITES 8
/* A stale request must end within this, far below its 30 s deadline and
 * the 2 s liveness. */
#define PROMPT_MS 1000

/* Posts a write (or read) of [buf, +len) at offset 0 of rmem and waits
 * for its end; returns the code it ended with (the post's, when refused
 * there) and the milliseconds it took into *ms. */
/* The request's end, its sentence into why (closing it clears the
 * thread's last error: every call does). */
static int xfer_end(ferry_peer_t *peer, bool write, void *buf,
                    ferry_mem_t *lmem, ferry_rmem_t *rmem, size_t len,
                    uint64_t *ms, char *why, size_t why_len)
{
    struct ferry_iov iov = {buf, lmem, rmem, 0, len};
    ferry_req_t *req = NULL;
    uint64_t t0 = tu_now_ns();
    int ret = write ? ferry_write(peer, &iov, 1, NULL, &req)
                    : ferry_read(peer, &iov, 1, NULL, &req);

    if (ret == 0)
        ret = ferry_req_wait(req, -1);
    snprintf(why, why_len, "%s", ret == 0 ? "" : ferry_last_error());
    ferry_req_close(req);
    *ms = tu_ms_since(t0);
    return ret;
}

/* How a transfer through a stale key ended. */
struct stale_end {
    const char *what;
    int ret;
    uint64_t ms;
    char why[512];
};

/* A transfer through rmem, whose region the target deregistered. */
static void stale_xfer(ferry_peer_t *peer, bool write, void *buf,
                       ferry_mem_t *lmem, ferry_rmem_t *rmem, const char *what,
                       struct stale_end *end)
{
    end->what = what;
    end->ret = xfer_end(peer, write, buf, lmem, rmem, 4096, &end->ms,
                        end->why, sizeof(end->why));
    printf("stale: %s: %s after %llu ms: %s\n", what,
           end->ret == 0 ? "success" : ferry_strerror(end->ret),
           (unsigned long long)end->ms, end->why);
}

/* It must have ended promptly with FERRY_ESTALE, saying so.  (Asserted
 * after the live transfers that follow it, so that a stale key that cost
 * the peer shows as such.) */
static void expect_stale(const struct stale_end *end)
{
    static const char *const phrases[] = {"no longer has a region",
                                          "registered", "import its new"};

    ck_assert_msg(end->ret == FERRY_ESTALE,
                  "%s ended with %s after %llu ms, expected FERRY_ESTALE: %s",
                  end->what, end->ret == 0 ? "success"
                                           : ferry_strerror(end->ret),
                  (unsigned long long)end->ms, end->why);
    ck_assert_msg(end->ms < PROMPT_MS,
                  "%s took %llu ms to fail, expected under %d", end->what,
                  (unsigned long long)end->ms, PROMPT_MS);
    for (size_t i = 0; i < TU_ARRAY_LEN(phrases); i++)
        ck_assert_msg(strstr(end->why, phrases[i]) != NULL,
                      "%s: the sentence lacks \"%s\": \"%s\"", end->what,
                      phrases[i], end->why);
}

/* A stale write carrying a notification: the target's wait for it ends
 * with the abort ferry sends in its place (the notification never came). */
static void expect_aborted(struct tu_pair *p, void *buf, ferry_mem_t *lmem,
                           ferry_rmem_t *rmem)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov = {buf, lmem, rmem, 0, 4096};
    ferry_req_t *req = NULL;
    int ret;

    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 51;
    opts.notify_value = 1;
    ck_assert_int_eq(ferry_write(p->peer, &iov, 1, &opts, &req), 0);
    ret = ferry_req_wait(req, -1);
    ck_assert_msg(ret == FERRY_ESTALE, "a notified stale write gave %s: %s",
                  ret == 0 ? "success" : ferry_strerror(ret),
                  ferry_last_error());
    ferry_req_close(req);
    ret = ferry_counter_wait(p->target, 51, 1, 5000);
    ck_assert_msg(ret == FERRY_EABORTED,
                  "the target's wait for the stale write's notification gave "
                  "%s: %s",
                  ret == 0 ? "success" : ferry_strerror(ret),
                  ferry_last_error());
}

/* LIVE_WRITES writes of distinct patterns into rmem, each succeeding;
 * returns the seed of the last, whose bytes the target then holds. */
static uint64_t live_writes(ferry_peer_t *peer, uint8_t *buf,
                            ferry_mem_t *lmem, ferry_rmem_t *rmem,
                            uint64_t seed)
{
    for (unsigned i = 0; i < LIVE_WRITES; i++, seed++) {
        uint64_t ms;
        char why[512];
        int ret;

        tu_fill(buf, LEN, seed);
        ret = xfer_end(peer, true, buf, lmem, rmem, LEN, &ms, why,
                       sizeof(why));
        ck_assert_msg(ret == 0,
                      "live write %u after the stale one ended with %s after "
                      "%llu ms: %s",
                      i, ferry_strerror(ret), (unsigned long long)ms, why);
        ck_assert_msg(ms < PROMPT_MS, "live write %u took %llu ms", i,
                      (unsigned long long)ms);
    }
    return seed - 1;
}

static void expect_up(ferry_peer_t *peer)
{
    char why[256];
    enum ferry_peer_state st = peer_state(peer, why, sizeof(why));

    ck_assert_msg(st == FERRY_PEER_UP, "the peer is %s after a stale key: %s",
                  state_name(st), why);
}

/* ---- 1: two contexts of this process ------------------------------------- */

START_TEST(test_stale_same_process)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    uint8_t *a = tu_alloc_buf(LEN), *b = tu_alloc_buf(LEN);
    uint8_t *l = tu_alloc_buf(LEN);
    ferry_mem_t *ma, *mb, *ml;
    ferry_rmem_t *ra, *rb;
    struct stale_end w, r;
    uint64_t last;

    printf("stale: same process on %s\n", prov);
    tu_pair_open(&p, prov, NULL);
    ma = tu_register(p.target, a, LEN, RW);
    mb = tu_register(p.target, b, LEN, RW);
    ml = tu_register(p.init, l, LEN, 0);
    ra = tu_share(ma, p.peer);
    rb = tu_share(mb, p.peer);
    tu_fill(l, LEN, 0x5100);
    write_ok(p.peer, l, ml, ra, LEN, "write into A while it lives");
    write_ok(p.peer, l, ml, rb, LEN, "write into B while it lives");

    ck_assert_int_eq(ferry_mem_close(ma), 0);
    stale_xfer(p.peer, true, l, ml, ra, "write into deregistered A", &w);
    stale_xfer(p.peer, false, l, ml, ra, "read from deregistered A", &r);
    expect_aborted(&p, l, ml, ra);
    last = live_writes(p.peer, l, ml, rb, 0x5101);
    ferry_progress(p.target); /* orders the landing before the check */
    tu_assert_pattern(b, LEN, last, "B after the live writes");
    expect_up(p.peer);
    expect_stale(&w);
    expect_stale(&r);
    /* Caught before posting: no connection dropped under anything. */
    ck_assert_uint_eq(tu_stats(p.init).ops_interrupted, 0);

    ck_assert_int_eq(ferry_rmem_close(ra), 0);
    ck_assert_int_eq(ferry_rmem_close(rb), 0);
    ck_assert_int_eq(ferry_mem_close(mb), 0);
    ck_assert_int_eq(ferry_mem_close(ml), 0);
    tu_pair_close(&p);
    tu_free_buf(a, LEN);
    tu_free_buf(b, LEN);
    tu_free_buf(l, LEN);
}
END_TEST

/* ---- 2: the target in another process ------------------------------------ */

START_TEST(test_stale_two_processes)
{
    const char *prov = tu_providers[_i];
    struct replaced r;
    struct stale_end w, rd;
    uint64_t last;

    printf("stale: two processes on %s\n", prov);
    tu_child_start(&r.c, prov, LEN, 0x5200);
    replaced_open(&r, prov, LEN, 0x5201);
    stale_xfer(r.peer, true, r.l, r.ml, r.old, "write through the old key",
               &w);
    stale_xfer(r.peer, false, r.l, r.ml, r.old, "read through the old key",
               &rd);
    last = live_writes(r.peer, r.l, r.ml, r.fresh, 0x5202);
    ck_assert_msg(tu_child_verify(&r.c, last),
                  "the child's new region lacks the last live write");
    expect_up(r.peer);
    expect_stale(&w);
    expect_stale(&rd);
    replaced_close(&r);
}
END_TEST

/* ---- 3: a target context destroyed in this process ----------------------- */

/*
 * The initiator watches the target (heartbeats go while it is silent)
 * and has just written to it; the target context is destroyed, and the
 * initiator goes on progressing for three times the liveness.  The peer is
 * declared gone, and a write to it is refused.
 */
START_TEST(test_target_destroyed_same_process)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_pair p;
    uint8_t *t = tu_alloc_buf(LEN), *l = tu_alloc_buf(LEN);
    ferry_mem_t *mt, *ml;
    ferry_rmem_t *rt;
    struct ferry_iov iov;
    ferry_req_t *req = NULL;
    enum ferry_peer_state st;
    char why[256];
    uint64_t t0;
    int ret;

    printf("stale: target destroyed in this process on %s\n", prov);
    tu_config(&cfg, prov);
    cfg.liveness_ms = 400; /* a heartbeat every 100 ms while silent */
    tu_pair_open(&p, prov, &cfg);
    mt = tu_register(p.target, t, LEN, RW);
    ml = tu_register(p.init, l, LEN, 0);
    rt = tu_share(mt, p.peer);
    write_ok(p.peer, l, ml, rt, LEN, "write before the destruction");
    ck_assert_int_eq(ferry_peer_watch(p.peer, 1), 0);

    ck_assert_int_eq(ferry_mem_close(mt), 0);
    ferry_context_close(p.target);
    p.target = NULL;
    t0 = tu_now_ns();
    while (tu_ms_since(t0) < 3 * cfg.liveness_ms)
        ck_assert_int_ge(ferry_progress(p.init), 0);
    st = peer_state(p.peer, why, sizeof(why));
    printf("stale: after the target's destruction the peer is %s: %s\n",
           state_name(st), why);
    ck_assert_msg(st == FERRY_PEER_DEAD,
                  "the destroyed target's peer is %s: %s", state_name(st),
                  why);
    iov = (struct ferry_iov){l, ml, rt, 0, 4096};
    ret = ferry_write(p.peer, &iov, 1, NULL, &req);
    ck_assert_msg(ret == FERRY_EPEERDEAD,
                  "a write to the destroyed target gave %s: %s",
                  ret == 0 ? "success" : ferry_strerror(ret),
                  ferry_last_error());
    ck_assert_ptr_null(req);

    ck_assert_int_eq(ferry_rmem_close(rt), 0);
    retry_busy(p.init, peer_remove_fn, p.peer, 5000,
               "ferry_peer_close of the destroyed target");
    ck_assert_int_eq(ferry_mem_close(ml), 0);
    ferry_context_close(p.init);
    tu_free_buf(t, LEN);
    tu_free_buf(l, LEN);
}
END_TEST

static Suite *stale_suite(void)
{
    Suite *s = suite_create("stale");
    TCase *tc = tu_tcase(s, "same process", 60);

    tcase_add_loop_test(tc, test_stale_same_process, 0, (int)tu_nproviders);
    tc = tu_tcase(s, "two processes", 60);
    tcase_add_loop_test(tc, test_stale_two_processes, 0, (int)tu_nproviders);
    tc = tu_tcase(s, "target destroyed", 60);
    tcase_add_loop_test(tc, test_target_destroyed_same_process, 0,
                        (int)tu_nproviders);
    return s;
}

int main(void)
{
    return tu_run(stale_suite());
}
