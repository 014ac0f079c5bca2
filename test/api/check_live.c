/*
 * Liveness through the API, in one process (docs/semantics.md): a peer
 * nobody listens for is declared unreachable within the liveness period,
 * not the request deadline; it never holds up a live peer's transfer on
 * the same context; a watched peer that goes away is delivered as a
 * peer-down event and ends a counter wait on it; a notified request that
 * is cancelled or passes its deadline tells the target (an abort); with
 * liveness off nothing is declared.  Death of another process (kill -9,
 * SIGSTOP, restarts): test/api/check_death.c.
 */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TCP tu_tcp()
#define SHORT_LIVENESS_MS 500
#define ABORTED_ID ((UINT64_C(1) << 40) + 41)

static void config(struct ferry_config *cfg, const char *prov,
                   unsigned liveness_ms)
{
    tu_config(cfg, prov);
    cfg->timeout_ms = 60000; /* far beyond any bound asserted here */
    cfg->liveness_ms = liveness_ms;
}

/*
 * A peer of ctx whose context no longer exists (nothing listens at its
 * address), and a remote region imported from it before it went.
 */
struct gone_peer {
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
};

static void gone_peer_add(ferry_context_t *ctx, const char *prov,
                          struct gone_peer *g)
{
    struct ferry_config cfg;
    ferry_context_t *other;
    uint8_t addr[512];
    size_t len = sizeof(addr);
    void *buf = tu_alloc_buf(MiB);
    ferry_mem_t *mem;

    config(&cfg, prov, 0);
    other = tu_context_cfg(&cfg);
    ck_assert_int_eq(ferry_context_address(other, addr, &len), 0);
    ck_assert_msg(ferry_peer_add(ctx, addr, len, &g->peer) == 0, "%s",
                  ferry_last_error());
    mem = tu_register(other, buf, MiB, FERRY_ACCESS_REMOTE_WRITE);
    g->rmem = tu_share(mem, g->peer);
    ck_assert_int_eq(ferry_mem_close(mem), 0);
    ferry_context_close(other);
    tu_free_buf(buf, MiB);
}

static ferry_req_t *write_to(ferry_peer_t *peer, ferry_rmem_t *rmem,
                             void *local, size_t len,
                             const struct ferry_xfer_opts *opts)
{
    struct ferry_iov iov = {.local = local, .rmem = rmem, .len = len};
    ferry_req_t *req = NULL;
    int ret = ferry_write(peer, &iov, 1, opts, &req);

    ck_assert_msg(ret == 0, "ferry_write: %s", ferry_last_error());
    return req;
}

static enum ferry_peer_state state_of(ferry_peer_t *peer, char *why,
                                      size_t len)
{
    enum ferry_peer_state st;

    ck_assert_int_eq(ferry_peer_state(peer, &st, why, len), 0);
    return st;
}

/* ---- a peer nobody listens for ------------------------------------------- */

START_TEST(test_unreachable_within_liveness)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    struct gone_peer g;
    void *buf = tu_alloc_buf(MiB);
    char why[256];
    uint64_t t0;
    ferry_req_t *req;
    int ret;

    config(&cfg, TCP, SHORT_LIVENESS_MS);
    ctx = tu_context_cfg(&cfg);
    gone_peer_add(ctx, TCP, &g);
    ck_assert_int_eq(state_of(g.peer, why, sizeof(why)), FERRY_PEER_CONNECTING);
    t0 = tu_now_ns();
    req = write_to(g.peer, g.rmem, buf, 4096, NULL);
    ret = ferry_req_wait(req, -1);
    /* The 60 s deadline is not what ends it: liveness (0.5 s) is, or the
     * refused connection the provider reports. */
    ck_assert_msg(ret == FERRY_EPEERDEAD, "ended with %s: %s",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_msg(tu_ms_since(t0) < 4 * SHORT_LIVENESS_MS,
                  "declared after %llu ms; liveness is %d ms",
                  (unsigned long long)tu_ms_since(t0), SHORT_LIVENESS_MS);
    tu_assert_sentence("unreachable", NULL);
    ck_assert_int_eq(state_of(g.peer, why, sizeof(why)),
                     FERRY_PEER_UNREACHABLE);
    ck_assert_msg(why[0] != '\0', "no sentence for the state");
    ferry_req_close(req);
    /* Refused at once from now on, with the same sentence. */
    {
        struct ferry_iov iov = {.local = buf, .rmem = g.rmem, .len = 64};
        ferry_req_t *again = NULL;

        ck_assert_int_eq(ferry_write(g.peer, &iov, 1, NULL, &again),
                         FERRY_EPEERDEAD);
        ck_assert_ptr_null(again);
        tu_assert_sentence("ferry_write", "unreachable", NULL);
    }
    ck_assert_int_eq(ferry_rmem_close(g.rmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, MiB);
}
END_TEST

/* A dead peer's stuck request never delays a live peer's 1 MiB write on
 * the same context: the bound is well below the liveness period. */
START_TEST(test_dead_beside_live)
{
    struct ferry_config cfg;
    struct tu_fx x;
    struct gone_peer g;
    ferry_req_t *stuck, *live;
    uint64_t t0, alone_ms, beside_ms;
    int ret;

    config(&cfg, TCP, 2000);
    tu_fx_open(&x, TCP, &cfg, 0, 1, MiB, MiB);
    gone_peer_add(x.p.init, TCP, &g);
    tu_fill(x.lbuf, MiB, 5);

    t0 = tu_now_ns();
    tu_xfer_ok(x.p.peer, true,
               &(struct ferry_iov){.local = x.lbuf, .rmem = x.rmem, .len = MiB},
               1, "alone");
    alone_ms = tu_ms_since(t0);

    stuck = write_to(g.peer, g.rmem, x.lbuf, MiB, NULL);
    t0 = tu_now_ns();
    live = write_to(x.p.peer, x.rmem, x.lbuf, MiB, NULL);
    ret = ferry_req_wait(live, -1);
    beside_ms = tu_ms_since(t0);
    ck_assert_msg(ret == 0, "live peer's write: %s", ferry_last_error());
    printf("live peer's 1 MiB write: %llu ms alone, %llu ms beside a dead "
           "peer's request\n",
           (unsigned long long)alone_ms, (unsigned long long)beside_ms);
    ck_assert_msg(beside_ms < 500,
                  "the live peer's write took %llu ms beside a dead peer "
                  "(alone: %llu ms)",
                  (unsigned long long)beside_ms, (unsigned long long)alone_ms);
    tu_assert_pattern(x.tbuf, MiB, 5, "live peer's data");
    ret = ferry_req_wait(stuck, -1);
    ck_assert_msg(ret == FERRY_EPEERDEAD, "dead peer's write: %s",
                  ferry_last_error());
    ferry_req_close(live);
    ferry_req_close(stuck);
    ck_assert_int_eq(ferry_rmem_close(g.rmem), 0);
    tu_fx_close(&x);
}
END_TEST

/* Liveness off: nothing is declared; the request ends by itself (the
 * provider's error or its deadline) and the peer stays connecting. */
START_TEST(test_liveness_off)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    struct gone_peer g;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    void *buf = tu_alloc_buf(4096);
    ferry_req_t *req;
    int ret;

    config(&cfg, TCP, 0);
    ctx = tu_context_cfg(&cfg);
    gone_peer_add(ctx, TCP, &g);
    opts.timeout_ms = 1000;
    req = write_to(g.peer, g.rmem, buf, 4096, &opts);
    ret = ferry_req_wait(req, -1);
    ck_assert_msg(ret == FERRY_ETIMEDOUT || ret == FERRY_ECONNRESET,
                  "ended with %s: %s", ferry_strerror(ret),
                  ferry_last_error());
    ck_assert_int_eq(state_of(g.peer, NULL, 0), FERRY_PEER_CONNECTING);
    ferry_req_close(req);
    ck_assert_int_eq(ferry_rmem_close(g.rmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/* ---- the target is told -------------------------------------------------- */

/* Waits (progressing ctx) until a peer-down event arrives; returns it. */
static struct ferry_notification wait_peer_down(ferry_context_t *ctx,
                                                unsigned ms)
{
    uint64_t t0 = tu_now_ns();
    struct ferry_notification n = {.id = 0};

    while (tu_ms_since(t0) < ms) {
        int got = ferry_notify_poll(ctx, &n, 1);

        ck_assert_int_ge(got, 0);
        if (got == 1 && n.kind == FERRY_NOTIFICATION_PEER_DOWN)
            return n;
    }
    ck_abort_msg("no peer-down event within %u ms", ms);
    return n;
}

/*
 * tcp only: with shm, the initiator's context is in this process, and a
 * context of this process that closes declares itself to the others at
 * once, before heartbeats could notice (shm reaches it through memory
 * the closing unmaps: check_stale.c).  check_death.c kills real
 * processes.
 */
START_TEST(test_watched_peer_down)
{
    const char *prov = TCP;
    struct ferry_config cfg;
    struct tu_pair p;
    uint8_t addr[512];
    size_t len = sizeof(addr);
    ferry_peer_t *back;
    struct ferry_notification n;
    uint64_t t0;
    int ret;

    config(&cfg, prov, SHORT_LIVENESS_MS);
    tu_pair_open_threads(&p, prov, &cfg, 0, 0);
    ck_assert_int_eq(ferry_context_address(p.init, addr, &len), 0);
    ret = ferry_peer_add(p.target, addr, len, &back);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    ck_assert_int_eq(ferry_peer_watch(back, 1), 0);
    /* Heartbeats make it UP while both sides progress. */
    t0 = tu_now_ns();
    while (state_of(back, NULL, 0) != FERRY_PEER_UP) {
        ck_assert_int_ge(ferry_progress(p.init), 0);
        ck_assert_int_ge(ferry_progress(p.target), 0);
        ck_assert_msg(tu_ms_since(t0) < 5000, "%s: never up", prov);
    }
    /* The initiator goes away without a word. */
    ck_assert_int_eq(ferry_peer_close(p.peer), 0);
    ferry_context_close(p.init);
    p.init = NULL;
    t0 = tu_now_ns();
    n = wait_peer_down(p.target, 4 * SHORT_LIVENESS_MS);
    printf("%s: watched peer declared down after %llu ms\n", prov,
           (unsigned long long)tu_ms_since(t0));
    ck_assert_ptr_eq(n.peer, back);
    ck_assert_int_eq(state_of(back, NULL, 0), FERRY_PEER_DEAD);
    /* A counter wait on it ends at once, not after its 60 s. */
    t0 = tu_now_ns();
    ck_assert_int_eq(ferry_counter_wait_peer(back, 7, 1, 60000),
                     FERRY_EPEERDEAD);
    ck_assert_uint_lt(tu_ms_since(t0), 1000);
    tu_assert_sentence("ferry_counter_wait_peer", "dead", NULL);
    ck_assert_int_eq(ferry_peer_close(back), 0);
    ferry_context_close(p.target);
}
END_TEST

/* A counter wait on a live peer is not ended by liveness: it waits for the
 * value (here it comes), heartbeats keeping the peer up meanwhile. */
START_TEST(test_counter_wait_peer_alive)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint8_t addr[512];
    size_t len = sizeof(addr);
    ferry_peer_t *back;
    ferry_req_t *req = NULL;
    struct ferry_stats st = FERRY_STATS_INIT;

    config(&cfg, TCP, SHORT_LIVENESS_MS);
    tu_pair_open_threads(&p, TCP, &cfg, 1, 0);
    ck_assert_int_eq(ferry_context_address(p.init, addr, &len), 0);
    ck_assert_int_eq(ferry_peer_add(p.target, addr, len, &back), 0);
    /* Nothing arrives for three liveness periods: the peer answers the
     * heartbeats, so the wait runs out by its own timeout. */
    ck_assert_int_eq(ferry_counter_wait_peer(back, 9, 1, 3 * SHORT_LIVENESS_MS),
                     FERRY_EAGAIN);
    ck_assert_int_eq(state_of(back, NULL, 0), FERRY_PEER_UP);
    ck_assert_int_eq(ferry_context_stats(p.target, &st), 0);
    ck_assert_msg(st.heartbeats >= 2, "%llu heartbeats in 1.5 s",
                  (unsigned long long)st.heartbeats);
    ck_assert_uint_eq(st.peers_declared, 0);
    ck_assert_int_eq(ferry_notify_send(p.peer, 9, 1, NULL, &req), 0);
    ck_assert_int_eq(ferry_counter_wait_peer(back, 9, 1, 10000), 0);
    ck_assert_int_eq(ferry_req_wait(req, -1), 0);
    ferry_req_close(req);
    ck_assert_int_eq(ferry_peer_close(back), 0);
    tu_pair_close(&p);
}
END_TEST

/* A busy connection costs no heartbeat: completions are the signs of life
 * (1 MiB writes back to back for four liveness periods).  A heartbeat is
 * due after a quarter period without one, so a write that itself took that
 * long (a stalled machine: it happened once under ThreadSanitizer) earns
 * one per quarter it lasted; writes that end in time earn none. */
START_TEST(test_busy_sends_no_heartbeat)
{
    const uint64_t quarter_ns = SHORT_LIVENESS_MS * 1000000ull / 4;
    struct ferry_config cfg;
    struct ferry_stats st = FERRY_STATS_INIT;
    struct tu_fx f;
    uint64_t t0, writes = 0, earned = 0, longest_ns = 0;

    config(&cfg, TCP, SHORT_LIVENESS_MS);
    tu_fx_open(&f, TCP, &cfg, 0, 1, MiB, MiB);
    t0 = tu_now_ns();
    while (tu_ms_since(t0) < 4 * SHORT_LIVENESS_MS) {
        struct ferry_iov iov = {f.lbuf, f.lmem, f.rmem, 0, MiB};
        uint64_t begun = tu_now_ns(), took_ns;

        tu_xfer_ok(f.p.peer, true, &iov, 1, "busy write");
        took_ns = tu_now_ns() - begun;
        earned += took_ns / quarter_ns;
        if (took_ns > longest_ns)
            longest_ns = took_ns;
        writes++;
    }
    ck_assert_int_eq(ferry_context_stats(f.p.init, &st), 0);
    ck_assert_msg(st.heartbeats <= earned,
                  "%llu heartbeats beside %llu writes in %u ms, expected at most %llu "
                  "(the longest write took %llu ms; one heartbeat is due per "
                  "%llu ms a write lasts)",
                  (unsigned long long)st.heartbeats,
                  (unsigned long long)writes, 4 * SHORT_LIVENESS_MS,
                  (unsigned long long)earned,
                  (unsigned long long)(longest_ns / 1000000u),
                  (unsigned long long)(quarter_ns / 1000000u));
    ck_assert_uint_gt(writes, 4);
    tu_fx_close(&f);
}
END_TEST

/* ---- aborts cross the wire ----------------------------------------------- */

/*
 * Waits on the target's counter while progressing the initiator too (it
 * has no progress thread, and its abort goes out from its progress).
 */
static int counter_wait_both(struct tu_fx *x, uint64_t id, uint64_t want,
                             unsigned ms)
{
    uint64_t t0 = tu_now_ns();
    int ret;

    do {
        ck_assert_int_ge(ferry_progress(x->p.init), 0);
        ret = ferry_counter_wait(x->p.target, id, want, 10);
    } while (ret == FERRY_EAGAIN && tu_ms_since(t0) < ms);
    return ret;
}

/* The ended request's operations come back once both sides progress;
 * then the remote region is free (tu_fx_close frees NULL as nothing). */
static void drain(struct tu_fx *x)
{
    uint64_t t0 = tu_now_ns();
    int ret;

    while ((ret = ferry_rmem_close(x->rmem)) == FERRY_EBUSY) {
        ck_assert_int_ge(ferry_progress(x->p.init), 0);
        ck_assert_int_ge(ferry_progress(x->p.target), 0);
        ck_assert_msg(tu_ms_since(t0) < 10000, "operations never came back");
    }
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    x->rmem = NULL;
}

/*
 * A notified 8 MiB write to a target that does not progress cannot end,
 * nor send its notification, before the test ends it: by cancel (_i 0)
 * or by its deadline (_i 1).
 * The target's counter wait then ends with FERRY_EABORTED, and poll gives
 * the abort.  tcp only: rxm moves 8 MiB by rendezvous, which needs both
 * sides' progress, whereas shm copies the data (and the notification
 * riding on the write) without the target, so the request could not be
 * held unfinished there.
 */
START_TEST(test_abort_reaches_target)
{
    const char *prov = TCP;
    bool by_cancel = _i == 0;
    struct tu_fx x;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_notification n[4];
    struct ferry_config cfg;
    ferry_req_t *req;
    int ret, got;

    /* 1 MiB operations, two in flight at a time: the rest of the 8 MiB
     * and the notification wait for the stalled target. */
    config(&cfg, prov, 2000);
    cfg.max_msg_size = MiB;
    cfg.tx_depth = 2;
    tu_fx_open_stalled(&x, prov, &cfg, 8 * MiB, 8 * MiB, NULL);
    opts.flags = FERRY_XFER_NOTIFY;
    /* An id too wide for the write's CQ data: the notification is a
     * message that waits for the data, never riding on the write. */
    opts.notify_id = ABORTED_ID;
    opts.notify_value = 8;
    if (!by_cancel)
        opts.timeout_ms = 200;
    req = write_to(x.p.peer, x.rmem, x.lbuf, 8 * MiB, &opts);
    if (by_cancel)
        ck_assert_int_eq(ferry_req_cancel(req), 0);
    ret = ferry_req_wait(req, -1);
    ck_assert_int_eq(ret, by_cancel ? FERRY_ECANCELED : FERRY_ETIMEDOUT);
    /* The target learns it as soon as both progress. */
    ret = counter_wait_both(&x, ABORTED_ID, 8, 10000);
    ck_assert_msg(ret == FERRY_EABORTED, "%s: counter wait ended with %s: %s",
                  prov, ferry_strerror(ret), ferry_last_error());
    tu_assert_sentence("counter 1099511627817", "abandoned",
                       by_cancel ? "cancelled" : "deadline", NULL);
    got = ferry_notify_poll(x.p.target, n, 4);
    ck_assert_int_eq(got, 1);
    ck_assert_int_eq(n[0].kind, FERRY_NOTIFICATION_ABORT);
    ck_assert_uint_eq(n[0].id, ABORTED_ID);
    ck_assert_uint_eq(n[0].value, 8);
    ck_assert_ptr_null(n[0].peer);
    /* A reset forgets the abort: the id can be used again. */
    ck_assert_int_eq(ferry_counter_reset(x.p.target, ABORTED_ID), 0);
    ck_assert_int_eq(ferry_counter_wait(x.p.target, ABORTED_ID, 8, 50),
                     FERRY_EAGAIN);
    ferry_req_close(req);
    drain(&x);
    tu_fx_close(&x);
}
END_TEST

/* ---- the warning ----------------------------------------------------------- */

/* What ferry_peer_declare_dead(peer, why) prints on stderr, into out. */
static void declare_dead_printing(ferry_peer_t *peer, const char *why,
                                  char *out, size_t cap)
{
    char path[] = "/tmp/ferry-live-stderr.XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    ssize_t n;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(saved, 0);
    unlink(path);
    ck_assert_int_eq(dup2(fd, 2), 2);
    n = ferry_peer_declare_dead(peer, why);
    ck_assert_int_eq(dup2(saved, 2), 2);
    close(saved);
    ck_assert_msg(n == 0, "%s", ferry_last_error());
    n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
}

/* The warning names the peer by its host and its address, as the
 * provider writes it (tcp: its IP address and port; shm: its endpoint's
 * name, with the process id), not by the handle's address in memory. */
START_TEST(test_warning_names_the_peer)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_pair p;
    char said[1024], want[64], host[80];

    config(&cfg, prov, SHORT_LIVENESS_MS);
    tu_pair_open_threads(&p, prov, &cfg, 0, 0);
    declare_dead_printing(p.peer, "the test says so", said, sizeof(said));
    printf("%s: %s", prov, said);
    if (strcmp(prov, TCP) == 0)
        snprintf(want, sizeof(want), "127.0.0.1:");
    else
        snprintf(want, sizeof(want), "ferry_%d_", (int)getpid());
    ck_assert_msg(strstr(said, "warn: peer ") != NULL &&
                      strstr(said, want) != NULL &&
                      strstr(said, " is unreachable: the test says so") !=
                          NULL,
                  "the warning \"%s\" does not name the peer by its "
                  "address (%s...)",
                  said, want);
    ck_assert_msg(strstr(said, "peer 0x") == NULL, "\"%s\"", said);
    ck_assert_int_eq(gethostname(host, sizeof(host) - 4), 0);
    strcat(host, " at ");
    ck_assert_msg(strstr(said, host) != NULL,
                  "the warning \"%s\" does not name the peer's host (%s)",
                  said, host);
    tu_pair_close(&p);
}
END_TEST

/* ---- configuration ------------------------------------------------------- */

START_TEST(test_liveness_env)
{
    struct ferry_config cfg;

    setenv("FERRY_LIVENESS_MS", "750", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.liveness_ms, 750);
    setenv("FERRY_LIVENESS_MS", "2s", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), FERRY_EINVAL);
    tu_assert_sentence("FERRY_LIVENESS_MS=2s", "whole number", NULL);
    unsetenv("FERRY_LIVENESS_MS");
    ck_assert_int_eq(ferry_config_init(&cfg), 0);
    ck_assert_uint_eq(cfg.liveness_ms, 2000);
}
END_TEST

/* Bad arguments are refused with a sentence, never a crash. */
START_TEST(test_bad_arguments)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;
    struct gone_peer g;
    enum ferry_peer_state st;
    void *buf = tu_alloc_buf(4096);
    ferry_req_t *req;

    config(&cfg, TCP, INT_MAX + 1u);
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), FERRY_EINVAL);
    tu_assert_sentence("config.liveness_ms", "0 (off)", NULL);
    ck_assert_ptr_null(ctx);

    ck_assert_int_eq(ferry_peer_state(NULL, &st, NULL, 0), FERRY_EINVAL);
    tu_assert_sentence("ferry_peer_state", NULL);
    ck_assert_int_eq(ferry_peer_watch(NULL, 1), FERRY_EINVAL);
    tu_assert_sentence("ferry_peer_watch", NULL);
    ck_assert_int_eq(ferry_counter_wait_peer(NULL, 1, 1, 0), FERRY_EINVAL);
    tu_assert_sentence("ferry_counter_wait_peer", NULL);

    config(&cfg, TCP, SHORT_LIVENESS_MS);
    ctx = tu_context_cfg(&cfg);
    gone_peer_add(ctx, TCP, &g);
    ck_assert_int_eq(ferry_peer_state(g.peer, NULL, NULL, 0), FERRY_EINVAL);
    tu_assert_sentence("ferry_peer_state", "state is NULL", NULL);
    /* A peer with a request running is not removed. */
    req = write_to(g.peer, g.rmem, buf, 4096, NULL);
    ck_assert_int_eq(ferry_peer_close(g.peer), FERRY_EBUSY);
    tu_assert_sentence("still running", "first", NULL);
    ck_assert_int_eq(ferry_req_wait(req, -1), FERRY_EPEERDEAD);
    ferry_req_close(req);
    ck_assert_int_eq(ferry_rmem_close(g.rmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

static Suite *live_suite(void)
{
    Suite *s = suite_create("live");
    TCase *tc = tu_tcase(s, "declared", 60);

    tcase_add_test(tc, test_unreachable_within_liveness);
    tcase_add_test(tc, test_dead_beside_live);
    tcase_add_test(tc, test_liveness_off);
    tc = tu_tcase(s, "told", 60);
    tcase_add_test(tc, test_watched_peer_down);
    tcase_add_test(tc, test_counter_wait_peer_alive);
    tcase_add_test(tc, test_busy_sends_no_heartbeat);
    tc = tu_tcase(s, "abort", 60);
    tcase_add_loop_test(tc, test_abort_reaches_target, 0, 2);
    tc = tu_tcase(s, "warning", 30);
    tcase_add_loop_test(tc, test_warning_names_the_peer, 0,
                        (int)tu_nproviders);
    tc = tu_tcase(s, "config", 10);
    tcase_add_test(tc, test_liveness_env);
    tcase_add_test(tc, test_bad_arguments);
    return s;
}

int main(void)
{
    return tu_run(live_suite());
}
