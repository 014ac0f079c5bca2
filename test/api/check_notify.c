/*
 * notify module through the API: a notification rides on its write or
 * goes as a message, and either way is seen only once the data has
 * landed; notifications queue in arrival order and ferry_notify_poll
 * hands out at most `max` of them, within the queue's bound;
 * ferry_notify_wait sleeps until they come or its time is up; counters
 * sum the values per id whatever the order; thousands of notifications from
 * several threads (and from another process) arrive exactly once each;
 * bad input is refused; a notification to a dead peer ends its request
 * within the request's deadline.  (The request's notification state and
 * the message buffers' registrations: test/unit/check_notify.c.)
 */
#include "notifyutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

/* Keeps polling for a while; asserts nothing more arrives. */
static void assert_quiet(ferry_context_t *ctx, int ms, const char *what)
{
    uint64_t t0 = tu_now_ns();
    struct ferry_notification n = {.id = 0};

    while (tu_ms_since(t0) < (uint64_t)ms) {
        int got = ferry_notify_poll(ctx, &n, 1);
        ck_assert_msg(got == 0,
                      "%s: unexpected extra notification {%llu, %llu} "
                      "(poll returned %d: %s)",
                      what, (unsigned long long)n.id,
                      (unsigned long long)n.value, got, ferry_last_error());
    }
}

/* A data notification says so and names no peer, however it came (the
 * message path once left both as stack garbage). */
static void assert_data(const struct ferry_notification *n, const char *prov)
{
    ck_assert_msg(n->kind == FERRY_NOTIFICATION_DATA,
                  "%s: notification {%llu, %llu} has kind %d, not DATA", prov,
                  (unsigned long long)n->id, (unsigned long long)n->value,
                  (int)n->kind);
    ck_assert_msg(n->peer == NULL, "%s: a data notification names peer %p",
                  prov, (void *)n->peer);
}

/* ---- riding on the write ------------------------------------------------ */

/* Notifications the initiator sent inside writes' remote CQ data. */
static uint64_t in_writes(ferry_context_t *ctx)
{
    return tu_stats(ctx).notifications_in_writes;
}

/*
 * A notification rides on its request's write as remote CQ data when
 * {id, value} fit the provider's CQ data (32 bits each with the 8 bytes of
 * tcp and shm) and goes as a message when they do not, or when there is
 * no write to ride on; either way the target gets exactly {id, value},
 * after the data.
 */
START_TEST(test_notification_rides_on_write)
{
    const char *prov = tu_providers[_i];
    static const struct {
        uint64_t id, value;
        bool rides;
    } cases[] = {
        {7, 1, true},
        {UINT32_MAX, UINT32_MAX, true}, /* the largest that fit */
        {UINT64_C(1) << 32, 1, false},
        {3, UINT64_C(1) << 32, false},
        /* the largest id an application may use */
        {FERRY_NOTIFY_ID_RESERVED - 1, UINT64_MAX, false},
    };
    struct ferry_notification n[2];
    struct tu_fx x;

    tu_fx_open(&x, prov, NULL, 1, 1, 64 * KiB, 64 * KiB);
    for (size_t c = 0; c < TU_ARRAY_LEN(cases); c++) {
        uint64_t before = in_writes(x.p.init);
        size_t len = 100 + c, bad;

        tu_fill(x.lbuf, len, 0x900 + c);
        req_ok(notified_write(&x, 0, 512 * c, len, cases[c].id,
                              cases[c].value),
               "a notified 100-byte write");
        ck_assert_int_eq(poll_some(x.p.target, n, 2, prov), 1);
        bad = tu_check(x.tbuf + 512 * c, len, 0x900 + c);
        ck_assert_msg(bad == SIZE_MAX, "%s: case %zu: byte %zu had not "
                      "landed when the notification was seen", prov, c, bad);
        ck_assert_uint_eq(n[0].id, cases[c].id);
        ck_assert_uint_eq(n[0].value, cases[c].value);
        assert_data(&n[0], prov);
        ck_assert_msg(in_writes(x.p.init) - before == cases[c].rides,
                      "%s: {%#llx, %#llx} should %s", prov,
                      (unsigned long long)cases[c].id,
                      (unsigned long long)cases[c].value,
                      cases[c].rides ? "ride on the write"
                                     : "go as a message");
    }
    /* Nothing to ride on: a notification alone is a message. */
    req_ok(notify_only(x.p.peer, 5, 6), "ferry_notify_send");
    ck_assert_int_eq(poll_some(x.p.target, n, 2, prov), 1);
    ck_assert_uint_eq(n[0].id, 5);
    ck_assert_uint_eq(n[0].value, 6);
    assert_data(&n[0], prov);
    ck_assert_uint_eq(in_writes(x.p.target), 0);
    tu_fx_close(&x);
}
END_TEST

/* ---- arrival order and poll's max --------------------------------------- */

#define ORDER_N 120

START_TEST(test_arrival_order)
{
    const char *prov = tu_providers[_i];
    struct tu_fx x;
    struct ferry_notification out[16];
    uint64_t expect_sum = 0;
    size_t next = 0;
    int ret;

    tu_fx_open(&x, prov, NULL, 0, 1, ORDER_N * 64, ORDER_N * 64);
    /* One thread, each request waited before the next: the target must
     * queue them in exactly this order.  Writes and data-less sends mix. */
    for (size_t i = 0; i < ORDER_N; i++) {
        ferry_req_t *req;

        if (i % 4 == 3) {
            req = notify_only(x.p.peer, 77, i + 1);
        } else {
            tu_fill(x.lbuf + i * 64, 64, 0x900 + i);
            req = notified_write(&x, i * 64, i * 64, 64, 77, i + 1);
        }
        req_ok(req, prov);
        expect_sum += i + 1;
    }
    /* All of them are queued once the counter shows them all. */
    ret = ferry_counter_wait(x.p.target, 77, expect_sum, PATIENCE_MS);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());

    /* max smaller than the queue: exactly max now, the rest kept. */
    for (size_t max = 1; next < ORDER_N; max = max % 7 + 1) {
        size_t left = ORDER_N - next;
        size_t want = max < left ? max : left;
        int got;

        for (size_t j = 0; j < TU_ARRAY_LEN(out); j++)
            out[j] = (struct ferry_notification){.id = 0xdead, .value = 0xbeef};
        got = ferry_notify_poll(x.p.target, out, max);
        ck_assert_msg(got == (int)want,
                      "%s: poll(max %zu) with %zu queued returned %d: %s",
                      prov, max, left, got, ferry_last_error());
        for (int j = 0; j < got; j++) {
            ck_assert_msg(out[j].id == 77 && out[j].value == next + 1,
                          "%s: notification %zu arrived as {%llu, %llu}, "
                          "expected {77, %zu}: order lost",
                          prov, next, (unsigned long long)out[j].id,
                          (unsigned long long)out[j].value, next + 1);
            next++;
        }
        /* Nothing written past what was returned. */
        for (size_t j = (size_t)got; j < TU_ARRAY_LEN(out); j++)
            ck_assert_uint_eq(out[j].id, 0xdead);
    }
    ck_assert_int_eq(ferry_notify_poll(x.p.target, out, 16), 0);
    /* The written data is all there too. */
    for (size_t i = 0; i < ORDER_N; i++)
        if (i % 4 != 3)
            ck_assert_msg(tu_check(x.tbuf + i * 64, 64, 0x900 + i) ==
                              SIZE_MAX,
                          "%s: write %zu did not land", prov, i);
        else
            for (size_t b = 0; b < 64; b++)
                ck_assert_uint_eq(x.tbuf[i * 64 + b], 0);
    tu_fx_close(&x);
}
END_TEST

/*
 * A bounded queue (config.notify_queue_max): past the bound notifications
 * are counted but not queued, the oldest stay, and once polled there is
 * room again.
 */
START_TEST(test_queue_bound)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_notification out[8];
    struct tu_fx x;
    uint64_t v = 0;
    int got;

    tu_config(&cfg, prov);
    cfg.notify_queue_max = 5;
    tu_fx_open(&x, prov, &cfg, 0, 1, 4096, 4096);
    for (uint64_t i = 1; i <= 8; i++)
        req_ok(notify_only(x.p.peer, 3, i), prov);
    ck_assert_msg(ferry_counter_wait(x.p.target, 3, 36, PATIENCE_MS) == 0,
                  "%s: %s", prov, ferry_last_error());
    got = ferry_notify_poll(x.p.target, out, 8);
    ck_assert_msg(got == 5, "%s: %d queued with a bound of 5", prov, got);
    for (int i = 0; i < got; i++)
        ck_assert_uint_eq(out[i].value, (uint64_t)i + 1);
    v = tu_stats(x.p.target).notifications_unqueued;
    ck_assert_uint_eq(v, 3);
    /* Room again. */
    req_ok(notify_only(x.p.peer, 3, 100), prov);
    ck_assert_int_eq(ferry_counter_wait(x.p.target, 3, 136, PATIENCE_MS), 0);
    ck_assert_int_eq(ferry_counter_get(x.p.target, 3, &v), 0);
    ck_assert_uint_eq(v, 136);
    got = ferry_notify_poll(x.p.target, out, 8);
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(out[0].value, 100);
    tu_fx_close(&x);
}
END_TEST

/* ---- waiting for notifications ----------------------------------------- */

/* After a pause, sends {WAIT_ID, 1..WAIT_SENT}, each seen to its end, or
 * declares the peer dead (a PEER_DOWN event in its own context). */
#define WAIT_ID 21
#define WAIT_SENT 3
#define WAIT_PAUSE_MS 150

struct late_sender {
    ferry_peer_t *peer;
    bool declare_dead;
    int ret;
    char why[256];
};

static void *send_late(void *arg)
{
    struct late_sender *ls = arg;

    usleep(WAIT_PAUSE_MS * 1000);
    if (ls->declare_dead) {
        ls->ret = ferry_peer_declare_dead(ls->peer, "check_notify");
        return NULL;
    }
    for (uint64_t v = 1; v <= WAIT_SENT && ls->ret == 0; v++) {
        ferry_req_t *req = NULL;

        ls->ret = ferry_notify_send(ls->peer, WAIT_ID, v, NULL, &req);
        if (ls->ret == 0) {
            ls->ret = ferry_req_wait(req, PATIENCE_MS);
            ferry_req_close(req);
        }
        if (ls->ret != 0)
            snprintf(ls->why, sizeof(ls->why), "%s", ferry_last_error());
    }
    return NULL;
}

/* CPU time of the calling thread, in ms. */
static double thread_cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Runs ls in a thread and waits, with no limit, until max notifications
 * of ctx are in out; asserts they came soon after the pause. */
static void wait_for_late(ferry_context_t *ctx, struct late_sender *ls,
                          struct ferry_notification *out, size_t max,
                          const char *prov)
{
    uint64_t t0 = tu_now_ns();
    pthread_t tid;
    int got = 0;

    ck_assert_int_eq(pthread_create(&tid, NULL, send_late, ls), 0);
    for (size_t have = 0; have < max; have += (size_t)got) {
        got = ferry_notify_wait(ctx, out + have, max - have, -1);
        ck_assert_msg(got >= 1, "%s: the wait returned %d: %s", prov, got,
                      ferry_last_error());
    }
    pthread_join(tid, NULL);
    ck_assert_msg(ls->ret == 0, "%s: %s", prov, ls->why);
    ck_assert_msg(tu_ms_since(t0) >= WAIT_PAUSE_MS - 10,
                  "%s: notifications seen %llu ms into a %d ms pause", prov,
                  (unsigned long long)tu_ms_since(t0), WAIT_PAUSE_MS);
    /* Woken when they are queued, not at the end of a 1 s sleep. */
    ck_assert_msg(tu_ms_since(t0) < WAIT_PAUSE_MS + 750,
                  "%s: notifications queued after %d ms were seen after %llu "
                  "ms",
                  prov, WAIT_PAUSE_MS, (unsigned long long)tu_ms_since(t0));
}

/*
 * ferry_notify_wait ends with FERRY_EAGAIN, no sooner than its timeout,
 * when nothing comes; returns what a sender sends after it began waiting,
 * in order, with no timeout at all, and an event ferry queues itself (a
 * peer declared dead); with a progress thread the waiter sleeps instead
 * of polling, and is woken as soon as either is queued.  Loop index:
 * provider, then without (even) or with (odd) progress threads.
 */
START_TEST(test_notify_wait)
{
    const char *prov = tu_providers[_i / 2];
    bool thread = _i % 2 == 1;
    struct ferry_notification out[WAIT_SENT];
    struct late_sender ls = {.ret = 0};
    struct tu_fx x;
    uint64_t t0;
    double cpu0;
    int got;

    tu_fx_open(&x, prov, NULL, thread, thread, 4096, 4096);

    t0 = tu_now_ns();
    cpu0 = thread_cpu_ms();
    got = ferry_notify_wait(x.p.target, out, WAIT_SENT, 300);
    ck_assert_msg(got == FERRY_EAGAIN, "%s: an empty wait returned %d: %s",
                  prov, got, ferry_last_error());
    ck_assert_msg(tu_ms_since(t0) >= 300, "%s: a 300 ms wait ended after "
                  "%llu ms", prov, (unsigned long long)tu_ms_since(t0));
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "within 300 ms"));
    /* It sleeps between looks (the thread wakes it when something came);
     * polling would take about the whole 300 ms of CPU. */
    if (thread)
        ck_assert_msg(thread_cpu_ms() - cpu0 < 150,
                      "%s: waiting 300 ms with a progress thread took "
                      "%.0f ms of CPU", prov, thread_cpu_ms() - cpu0);

    ls.peer = x.p.peer;
    wait_for_late(x.p.target, &ls, out, WAIT_SENT, prov);
    for (uint64_t i = 0; i < WAIT_SENT; i++) {
        ck_assert_uint_eq(out[i].id, WAIT_ID);
        ck_assert_uint_eq(out[i].value, i + 1);
    }
    assert_quiet(x.p.target, 50, prov);

    ls.declare_dead = true;
    wait_for_late(x.p.init, &ls, out, 1, prov);
    ck_assert_int_eq(out[0].kind, FERRY_NOTIFICATION_PEER_DOWN);
    ck_assert_ptr_eq(out[0].peer, x.p.peer);
    tu_fx_close(&x);
}
END_TEST

/* ---- counters ----------------------------------------------------------- */

START_TEST(test_counters)
{
    const char *prov = tu_providers[_i];
    /* Values per id, posted interleaved and all in flight at once, so
     * they may arrive in any order. */
    static const struct {
        uint64_t id, value;
    } msgs[] = {
        {1, 5},  {2, 1}, {3, 1ull << 40}, {1, 10}, {2, 1}, {1, 20},
        {2, 1},  {3, 7}, {2, 1},          {4, 0},  {1, 1}, {5, UINT32_MAX},
        {5, 1},  {2, 3},
    };
    const uint64_t sums[] = {0, 36, 7, (1ull << 40) + 7, 0,
                             (uint64_t)UINT32_MAX + 1};
    ferry_req_t *reqs[TU_ARRAY_LEN(msgs)];
    struct tu_fx x;
    char num[64];
    uint64_t v, t0, took;
    int ret;

    tu_fx_open(&x, prov, NULL, 0, 1, 64 * KiB, 64 * KiB);
    for (size_t i = 0; i < TU_ARRAY_LEN(msgs); i++) {
        if (i % 2 == 0) {
            tu_fill(x.lbuf + i * 1024, 1024, 0x4400 + i);
            reqs[i] = notified_write(&x, i * 1024, i * 1024, 1024, msgs[i].id,
                                     msgs[i].value);
        } else {
            reqs[i] = notify_only(x.p.peer, msgs[i].id, msgs[i].value);
        }
    }
    for (size_t i = TU_ARRAY_LEN(msgs); i-- > 0;)
        req_ok(reqs[i], prov);
    for (uint64_t id = 1; id < TU_ARRAY_LEN(sums); id++) {
        ret = ferry_counter_wait(x.p.target, id, sums[id], PATIENCE_MS);
        ck_assert_msg(ret == 0, "%s: counter %llu: %s", prov,
                      (unsigned long long)id, ferry_last_error());
    }
    /* All arrived: now the sums must be exact, not just "at least". */
    for (uint64_t id = 1; id < TU_ARRAY_LEN(sums); id++) {
        v = 0xffff;
        ck_assert_int_eq(ferry_counter_get(x.p.target, id, &v), 0);
        ck_assert_msg(v == sums[id], "%s: counter %llu is %llu, expected %llu",
                      prov, (unsigned long long)id, (unsigned long long)v,
                      (unsigned long long)sums[id]);
    }
    /* An id nobody sent to reads 0; the initiator received nothing. */
    v = 0xffff;
    ck_assert_int_eq(ferry_counter_get(x.p.target, 999, &v), 0);
    ck_assert_uint_eq(v, 0);
    v = 0xffff;
    ck_assert_int_eq(ferry_counter_get(x.p.init, 1, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(ferry_counter_wait(x.p.target, 1, 36, 0), 0);
    ck_assert_int_eq(ferry_counter_wait(x.p.target, 999, 0, 0), 0);

    /* Not reached: a timeout that says how far it got. */
    t0 = tu_now_ns();
    ret = ferry_counter_wait(x.p.target, 2, 8, 200);
    took = tu_ms_since(t0);
    ck_assert_msg(ret == FERRY_EAGAIN, "%s: wait for 8 on a counter at 7 "
                  "returned %s: %s", prov, ferry_strerror(ret),
                  ferry_last_error());
    ck_assert_msg(took >= 190 && took < 5000,
                  "%s: 200 ms counter wait took %llu ms", prov,
                  (unsigned long long)took);
    ck_assert_msg(strstr(ferry_last_error(), "reached 7 of 8") != NULL,
                  "sentence lacks the numbers: %s", ferry_last_error());
    snprintf(num, sizeof(num), "%llu", (unsigned long long)sums[3] + 1);
    ret = ferry_counter_wait(x.p.target, 3, sums[3] + 1, 0);
    ck_assert_int_eq(ret, FERRY_EAGAIN);
    ck_assert_msg(strstr(ferry_last_error(), num) != NULL,
                  "sentence lacks the expected %s: %s", num,
                  ferry_last_error());
    snprintf(num, sizeof(num), "reached %llu", (unsigned long long)sums[3]);
    ck_assert_msg(strstr(ferry_last_error(), num) != NULL,
                  "sentence lacks '%s': %s", num, ferry_last_error());
    /* An id never seen: reached 0. */
    ret = ferry_counter_wait(x.p.target, 4242, 1, 10);
    ck_assert_int_eq(ret, FERRY_EAGAIN);
    ck_assert_msg(strstr(ferry_last_error(), "reached 0 of 1") != NULL,
                  "%s", ferry_last_error());

    /* Reset: that id starts over, the others keep their sums. */
    ck_assert_int_eq(ferry_counter_reset(x.p.target, 1), 0);
    ck_assert_int_eq(ferry_counter_get(x.p.target, 1, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(ferry_counter_get(x.p.target, 2, &v), 0);
    ck_assert_uint_eq(v, 7);
    ck_assert_int_eq(ferry_counter_reset(x.p.target, 31337), 0);
    ck_assert_int_eq(ferry_counter_get(x.p.target, 31337, &v), 0);
    ck_assert_uint_eq(v, 0);
    req_ok(notify_only(x.p.peer, 1, 4), prov);
    req_ok(notify_only(x.p.peer, 1, 5), prov);
    ret = ferry_counter_wait(x.p.target, 1, 9, PATIENCE_MS);
    ck_assert_msg(ret == 0, "%s: after reset: %s", prov, ferry_last_error());
    ck_assert_int_eq(ferry_counter_get(x.p.target, 1, &v), 0);
    ck_assert_uint_eq(v, 9);

    /* Data of the notified writes landed. */
    for (size_t i = 0; i < TU_ARRAY_LEN(msgs); i += 2)
        ck_assert_msg(tu_check(x.tbuf + i * 1024, 1024, 0x4400 + i) ==
                          SIZE_MAX,
                      "%s: write %zu", prov, i);
    /* Counter ids spread over many slots (table growth) stay exact. */
    for (uint64_t id = 0; id < 300; id++)
        req_ok(notify_only(x.p.peer, 100000 + id * 977, id + 1), prov);
    ret = ferry_counter_wait(x.p.target, 100000 + 299 * 977, 300,
                             PATIENCE_MS);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    for (uint64_t id = 0; id < 300; id++) {
        ret = ferry_counter_wait(x.p.target, 100000 + id * 977, id + 1,
                                 PATIENCE_MS);
        ck_assert_msg(ret == 0, "%s: id %llu: %s", prov,
                      (unsigned long long)id, ferry_last_error());
        ck_assert_int_eq(ferry_counter_get(x.p.target, 100000 + id * 977, &v),
                         0);
        ck_assert_uint_eq(v, id + 1);
    }
    ck_assert_int_eq(ferry_counter_get(x.p.target, 2, &v), 0);
    ck_assert_uint_eq(v, 7);
    tu_fx_close(&x);
}
END_TEST

/* ---- thousands, from several threads ------------------------------------ */

#define TH_THREADS 4
#define TH_PER_THREAD 1000
#define TH_WINDOW 8
#define TH_SLOT 64  /* bytes of target memory per (thread, seq) */
#define TH_LEN 40   /* bytes a write moves */

/* (thread, seq) -> what is sent; shared by both variants. */
static bool th_is_write(unsigned t, unsigned s)
{
    return (s + t) % 3 != 0;
}
static uint64_t th_id(unsigned t)
{
    return 500 + t;
}
static uint64_t th_value(unsigned t, unsigned s)
{
    return (uint64_t)t << 32 | s;
}
static uint64_t th_seed(unsigned t, unsigned s)
{
    return 0xabc00000ull + (uint64_t)t * 100000 + s;
}
static size_t th_slot(unsigned t, unsigned s, unsigned per)
{
    return ((size_t)t * per + s) * TH_SLOT;
}
static uint64_t th_sum(unsigned t, unsigned per)
{
    return (uint64_t)per * ((uint64_t)t << 32) + (uint64_t)per * (per - 1) / 2;
}

struct th_sender {
    pthread_t tid;
    unsigned t, per;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    uint8_t *lbuf;
    char err[384]; /* first failure, "" if none */
};

static void *th_send_main(void *arg)
{
    struct th_sender *sd = arg;
    ferry_req_t *win[TH_WINDOW] = {NULL};
    unsigned s;
    int ret;

    for (s = 0; s < sd->per + TH_WINDOW && sd->err[0] == 0; s++) {
        ferry_req_t **slot = &win[s % TH_WINDOW];

        if (*slot != NULL) {
            ret = ferry_req_wait(*slot, PATIENCE_MS);
            if (ret != 0)
                snprintf(sd->err, sizeof(sd->err),
                         "thread %u: request %u ended with %s: %s", sd->t,
                         s - TH_WINDOW, ferry_strerror(ret),
                         ferry_last_error());
            ferry_req_close(*slot);
            *slot = NULL;
        }
        if (s >= sd->per || sd->err[0] != 0)
            continue;
        if (th_is_write(sd->t, s)) {
            size_t off = th_slot(sd->t, s, sd->per);
            struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
            struct ferry_iov iov = {sd->lbuf + off, sd->lmem, sd->rmem, off,
                                    TH_LEN};

            tu_fill(sd->lbuf + off, TH_LEN, th_seed(sd->t, s));
            opts.flags = FERRY_XFER_NOTIFY;
            opts.notify_id = th_id(sd->t);
            opts.notify_value = th_value(sd->t, s);
            ret = ferry_write(sd->peer, &iov, 1, &opts, slot);
        } else {
            ret = ferry_notify_send(sd->peer, th_id(sd->t), th_value(sd->t, s),
                                    NULL, slot);
        }
        if (ret != 0)
            snprintf(sd->err, sizeof(sd->err),
                     "thread %u: posting request %u failed with %s: %s", sd->t,
                     s, ferry_strerror(ret), ferry_last_error());
    }
    for (unsigned i = 0; i < TH_WINDOW; i++)
        if (win[i] != NULL)
            ferry_req_close(win[i]);
    return NULL;
}

/*
 * What the receiving side saw.  seen[] counts each (thread, seq); a
 * notification whose write had not landed when it was seen counts in
 * early, anything that decodes to no (thread, seq) in unexpected.
 */
struct th_tally {
    unsigned threads, per;
    uint8_t *seen; /* threads * per */
    uint32_t total, dup, unexpected, early;
    int poll_err;
    char poll_msg[256];
};

static void th_account(struct th_tally *ty, const uint8_t *tbuf,
                       const struct ferry_notification *n)
{
    unsigned t = (unsigned)(n->value >> 32), s = (unsigned)n->value;

    if (n->id < 500 || n->id - 500 >= ty->threads || n->id - 500 != t ||
        s >= ty->per) {
        ty->unexpected++;
        return;
    }
    if (ty->seen[t * ty->per + s]++ != 0)
        ty->dup++;
    else
        ty->total++;
    if (th_is_write(t, s) &&
        tu_check(tbuf + th_slot(t, s, ty->per), TH_LEN, th_seed(t, s)) !=
            SIZE_MAX)
        ty->early++;
}

/* Polls ctx until every expected notification came or the deadline;
 * then listens a little longer for duplicates. */
static void th_collect(struct th_tally *ty, ferry_context_t *ctx,
                       const uint8_t *tbuf, int deadline_ms)
{
    struct ferry_notification n[64];
    uint32_t want = ty->threads * ty->per;
    uint64_t t0 = tu_now_ns(), quiet_from = 0;

    for (;;) {
        int got = ferry_notify_poll(ctx, n, TU_ARRAY_LEN(n));

        if (got < 0) {
            ty->poll_err = got;
            snprintf(ty->poll_msg, sizeof(ty->poll_msg), "%s",
                     ferry_last_error());
            return;
        }
        for (int i = 0; i < got; i++)
            th_account(ty, tbuf, &n[i]);
        if (ty->total == want && quiet_from == 0)
            quiet_from = tu_now_ns();
        if (quiet_from != 0 && tu_ms_since(quiet_from) >= 100)
            return;
        if (tu_ms_since(t0) >= (uint64_t)deadline_ms)
            return;
    }
}

static void th_assert_tally(const struct th_tally *ty, const char *what)
{
    uint32_t want = ty->threads * ty->per;

    ck_assert_msg(ty->poll_err == 0, "%s: ferry_notify_poll failed with %s: %s",
                  what, ferry_strerror(ty->poll_err), ty->poll_msg);
    for (unsigned t = 0; t < ty->threads; t++)
        for (unsigned s = 0; s < ty->per; s++)
            ck_assert_msg(ty->seen[t * ty->per + s] == 1,
                          "%s: notification (thread %u, seq %u) seen %u "
                          "times; %u of %u seen in all",
                          what, t, s, ty->seen[t * ty->per + s], ty->total,
                          want);
    ck_assert_uint_eq(ty->total, want);
    ck_assert_msg(ty->dup == 0, "%s: %u duplicates", what, ty->dup);
    ck_assert_msg(ty->unexpected == 0, "%s: %u notifications nobody sent",
                  what, ty->unexpected);
    ck_assert_msg(ty->early == 0,
                  "%s: %u notifications were seen before their data", what,
                  ty->early);
}

/* Every write slot holds its pattern; every send-only slot is untouched. */
static void th_assert_data(const uint8_t *tbuf, unsigned threads,
                           unsigned per, const char *what)
{
    for (unsigned t = 0; t < threads; t++) {
        for (unsigned s = 0; s < per; s++) {
            const uint8_t *slot = tbuf + th_slot(t, s, per);
            size_t bad;

            if (th_is_write(t, s)) {
                bad = tu_check(slot, TH_LEN, th_seed(t, s));
                ck_assert_msg(bad == SIZE_MAX,
                              "%s: write (thread %u, seq %u) byte %zu wrong",
                              what, t, s, bad);
            }
            for (size_t b = th_is_write(t, s) ? TH_LEN : 0; b < TH_SLOT; b++)
                ck_assert_msg(slot[b] == 0,
                              "%s: byte %zu of slot (%u, %u) was written", what,
                              b, t, s);
        }
    }
}

START_TEST(test_thousands_threads)
{
    const char *prov = tu_providers[_i];
    size_t region = (size_t)TH_THREADS * TH_PER_THREAD * TH_SLOT;
    struct th_sender sd[TH_THREADS];
    struct th_tally ty = {.threads = TH_THREADS, .per = TH_PER_THREAD};
    struct tu_fx x;
    uint64_t v;

    tu_fx_open(&x, prov, NULL, 0, 1, region, region);
    ty.seen = calloc(TH_THREADS * TH_PER_THREAD, 1);
    ck_assert_ptr_nonnull(ty.seen);
    for (unsigned t = 0; t < TH_THREADS; t++) {
        sd[t] = (struct th_sender){.t = t,
                                   .per = TH_PER_THREAD,
                                   .peer = x.p.peer,
                                   .rmem = x.rmem,
                                   .lmem = x.lmem,
                                   .lbuf = x.lbuf};
        ck_assert_int_eq(pthread_create(&sd[t].tid, NULL, th_send_main,
                                        &sd[t]),
                         0);
    }
    th_collect(&ty, x.p.target, x.tbuf, 60000);
    for (unsigned t = 0; t < TH_THREADS; t++)
        pthread_join(sd[t].tid, NULL);
    for (unsigned t = 0; t < TH_THREADS; t++)
        ck_assert_msg(sd[t].err[0] == 0, "%s: %s", prov, sd[t].err);
    th_assert_tally(&ty, prov);
    /* Every request ended: nothing more may come. */
    assert_quiet(x.p.target, 50, prov);
    for (unsigned t = 0; t < TH_THREADS; t++) {
        ck_assert_int_eq(ferry_counter_get(x.p.target, th_id(t), &v), 0);
        ck_assert_msg(v == th_sum(t, TH_PER_THREAD),
                      "%s: counter of thread %u is %llu, expected %llu", prov,
                      t, (unsigned long long)v,
                      (unsigned long long)th_sum(t, TH_PER_THREAD));
    }
    th_assert_data(x.tbuf, TH_THREADS, TH_PER_THREAD, prov);
    v = tu_stats(x.p.target).notifications_received;
    ck_assert_uint_eq(v, TH_THREADS * TH_PER_THREAD);
    free(ty.seen);
    tu_fx_close(&x);
}
END_TEST

/* ---- thousands, target in another process ------------------------------- */

#define TP_THREADS 2
#define TP_PER_THREAD 300

struct tp_report {
    uint32_t total, dup, unexpected, early, data_ok;
    int poll_err;
    uint64_t counters[TP_THREADS];
    char poll_msg[256];
};

/* The child: counts what arrives, reports, waits for 'q'.  Never returns. */
static void tp_child(int in, int out, const char *prov)
{
    size_t region = (size_t)TP_THREADS * TP_PER_THREAD * TH_SLOT;
    struct th_tally ty = {.threads = TP_THREADS, .per = TP_PER_THREAD};
    struct tp_report rep;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    uint8_t *buf = mmap(NULL, region, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t addr[512], rkey[512];
    size_t alen = sizeof(addr), rlen = sizeof(rkey);
    char cmd;

    ty.seen = calloc(TP_THREADS * TP_PER_THREAD, 1);
    if (buf == MAP_FAILED || ty.seen == NULL)
        _exit(10);
    tu_config(&cfg, prov);
    cfg.progress_thread = 1;
    if (ferry_context_create(&cfg, &ctx) != 0 ||
        ferry_context_address(ctx, addr, &alen) != 0 ||
        ferry_mem_register(ctx, buf, region, FERRY_MEM_HOST, 0, RW, &mem) !=
            0 ||
        ferry_mem_export(mem, rkey, &rlen) != 0)
        _exit(11);
    tu_send_blobs(out, addr, alen, rkey, rlen);
    th_collect(&ty, ctx, buf, 45000);
    memset(&rep, 0, sizeof(rep));
    rep.total = ty.total;
    rep.dup = ty.dup;
    rep.unexpected = ty.unexpected;
    rep.early = ty.early;
    rep.poll_err = ty.poll_err;
    memcpy(rep.poll_msg, ty.poll_msg, sizeof(rep.poll_msg));
    for (unsigned t = 0; t < TP_THREADS; t++)
        if (ferry_counter_get(ctx, th_id(t), &rep.counters[t]) != 0)
            _exit(13);
    /* Each (thread, seq) exactly once, and the data all there. */
    rep.data_ok = 1;
    for (unsigned i = 0; i < TP_THREADS * TP_PER_THREAD; i++)
        if (ty.seen[i] != 1)
            rep.data_ok = 0;
    for (unsigned t = 0; t < TP_THREADS; t++)
        for (unsigned s = 0; s < TP_PER_THREAD; s++)
            if (th_is_write(t, s) &&
                tu_check(buf + th_slot(t, s, TP_PER_THREAD), TH_LEN,
                         th_seed(t, s)) != SIZE_MAX)
                rep.data_ok = 0;
    if (write(out, &rep, sizeof(rep)) != sizeof(rep))
        _exit(14);
    while (read(in, &cmd, 1) == 1 && cmd != 'q')
        ;
    ferry_context_close(ctx);
    _exit(0);
}

START_TEST(test_thousands_two_processes)
{
    const char *prov = tu_providers[_i];
    size_t region = (size_t)TP_THREADS * TP_PER_THREAD * TH_SLOT;
    struct th_sender sd[TP_THREADS];
    struct tp_report rep;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    uint8_t *lbuf, addr[512], rkey[512];
    size_t alen, rlen;
    int down[2], up[2], status = 0;
    pid_t pid;

    /* Fork before this process opens anything of libfabric's. */
    ck_assert_int_eq(pipe(down), 0);
    ck_assert_int_eq(pipe(up), 0);
    pid = fork();
    ck_assert_msg(pid >= 0, "fork failed");
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        tp_child(down[0], up[1], prov);
    }
    close(down[0]);
    close(up[1]);
    tu_read_all(up[0], &alen, sizeof(alen));
    ck_assert_uint_le(alen, sizeof(addr));
    tu_read_all(up[0], addr, alen);
    tu_read_all(up[0], &rlen, sizeof(rlen));
    ck_assert_uint_le(rlen, sizeof(rkey));
    tu_read_all(up[0], rkey, rlen);

    tu_config(&cfg, prov);
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_msg(ferry_peer_add(ctx, addr, alen, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert_msg(ferry_rmem_import(peer, rkey, rlen, &rmem) == 0, "%s",
                  ferry_last_error());
    lbuf = tu_alloc_buf(region);
    ck_assert_int_eq(ferry_mem_register(ctx, lbuf, region, FERRY_MEM_HOST, 0,
                                        0, &lmem),
                     0);
    for (unsigned t = 0; t < TP_THREADS; t++) {
        sd[t] = (struct th_sender){.t = t,
                                   .per = TP_PER_THREAD,
                                   .peer = peer,
                                   .rmem = rmem,
                                   .lmem = lmem,
                                   .lbuf = lbuf};
        ck_assert_int_eq(pthread_create(&sd[t].tid, NULL, th_send_main,
                                        &sd[t]),
                         0);
    }
    for (unsigned t = 0; t < TP_THREADS; t++)
        pthread_join(sd[t].tid, NULL);
    for (unsigned t = 0; t < TP_THREADS; t++)
        ck_assert_msg(sd[t].err[0] == 0, "%s: %s", prov, sd[t].err);

    tu_read_all(up[0], &rep, sizeof(rep));
    tu_write_all(down[1], "q", 1);
    ck_assert(waitpid(pid, &status, 0) == pid);
    close(down[1]);
    close(up[0]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "target child ended with status 0x%x", status);

    ck_assert_msg(rep.poll_err == 0, "%s: child's poll failed with %s: %s",
                  prov, ferry_strerror(rep.poll_err), rep.poll_msg);
    ck_assert_msg(rep.total == TP_THREADS * TP_PER_THREAD,
                  "%s: child saw %u of %u notifications", prov, rep.total,
                  TP_THREADS * TP_PER_THREAD);
    ck_assert_msg(rep.dup == 0 && rep.unexpected == 0,
                  "%s: %u duplicates, %u unexpected", prov, rep.dup,
                  rep.unexpected);
    ck_assert_msg(rep.early == 0, "%s: %u notifications before their data",
                  prov, rep.early);
    ck_assert_msg(rep.data_ok, "%s: child found missing data or "
                  "notifications", prov);
    for (unsigned t = 0; t < TP_THREADS; t++)
        ck_assert_msg(rep.counters[t] == th_sum(t, TP_PER_THREAD),
                      "%s: child's counter of thread %u is %llu, expected "
                      "%llu",
                      prov, t, (unsigned long long)rep.counters[t],
                      (unsigned long long)th_sum(t, TP_PER_THREAD));

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(lbuf, region);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

START_TEST(test_bad_input)
{
    struct tu_fx x;
    struct ferry_notification out[2] = {{.id = 0}};
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov;
    ferry_req_t *req = NULL;
    uint64_t v = 0;
    int ret;

    tu_fx_open(&x, tu_tcp(), NULL, 0, 1, 4096, 4096);

    ret = ferry_notify_poll(NULL, out, 2);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "ferry_notify_poll"));
    ret = ferry_notify_poll(x.p.target, NULL, 1);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "out is NULL"));
    /* Another kind of handle is not a context. */
    ret = ferry_notify_poll((ferry_context_t *)x.tmem, out, 2);
    ck_assert_int_eq(ret, FERRY_EHANDLE);
    ret = ferry_notify_wait(NULL, out, 2, 0);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "ferry_notify_wait"));
    ret = ferry_notify_wait(x.p.target, NULL, 1, 0);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "out is NULL"));
    /* max 0 could never end a wait without a limit. */
    ret = ferry_notify_wait(x.p.target, out, 0, -1);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "max is 0"));
    ck_assert_int_eq(ferry_notify_poll(x.p.target, NULL, 0), 0);

    /* max 0 takes nothing off a non-empty queue. */
    req_ok(notify_only(x.p.peer, 9, 99), "one notification");
    ck_assert_int_eq(ferry_counter_wait(x.p.target, 9, 99, PATIENCE_MS), 0);
    ck_assert_int_eq(ferry_notify_poll(x.p.target, out, 0), 0);
    ck_assert_int_eq(ferry_notify_poll(x.p.target, NULL, 0), 0);
    ck_assert_int_eq(ferry_notify_poll(x.p.target, out, 2), 1);
    ck_assert_uint_eq(out[0].id, 9);
    ck_assert_uint_eq(out[0].value, 99);

    /* Unknown flags, unset size: refused before anything is sent. */
    opts.flags = FERRY_XFER_NOTIFY | 0x80u;
    opts.notify_id = 9;
    opts.notify_value = 1;
    iov = (struct ferry_iov){x.lbuf, x.lmem, x.rmem, 0, 16};
    ret = ferry_write(x.p.peer, &iov, 1, &opts, &req);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_msg(strstr(ferry_last_error(), "flags") != NULL, "%s",
                  ferry_last_error());
    ck_assert_ptr_null(req);
    ret = ferry_notify_send(x.p.peer, 9, 1, &opts, &req);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_msg(strstr(ferry_last_error(), "flags") != NULL, "%s",
                  ferry_last_error());
    ck_assert_ptr_null(req);
    opts.flags = FERRY_XFER_NOTIFY;
    opts.size = 0;
    ck_assert_int_eq(ferry_write(x.p.peer, &iov, 1, &opts, &req),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_notify_send(x.p.peer, 9, 1, &opts, &req),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "FERRY_XFER_OPTS_INIT"));
    ck_assert_ptr_null(req);

    /* ferry_notify_send without a peer or a req pointer. */
    ret = ferry_notify_send(NULL, 9, 1, NULL, &req);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_msg(strstr(ferry_last_error(), "peer is NULL") != NULL, "%s",
                  ferry_last_error());
    ret = ferry_notify_send(x.p.peer, 9, 1, NULL, NULL);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_msg(strstr(ferry_last_error(), "req is NULL") != NULL, "%s",
                  ferry_last_error());
    ret = ferry_notify_send((ferry_peer_t *)x.lmem, 9, 1, NULL, &req);
    ck_assert_int_eq(ret, FERRY_EHANDLE);
    ck_assert_ptr_null(req);

    /* Counters. */
    ck_assert_int_eq(ferry_counter_get(NULL, 9, &v), FERRY_EINVAL);
    ck_assert_int_eq(ferry_counter_get(x.p.target, 9, NULL), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "value is NULL"));
    ck_assert_int_eq(ferry_counter_wait(NULL, 9, 1, 10), FERRY_EINVAL);
    ck_assert_int_eq(ferry_counter_reset(NULL, 9), FERRY_EINVAL);
    ck_assert_int_eq(ferry_counter_reset((ferry_context_t *)x.tmem, 9),
                     FERRY_EHANDLE);

    /* None of the refused calls sent anything. */
    assert_quiet(x.p.target, 100, "after refused calls");
    ck_assert_int_eq(ferry_counter_get(x.p.target, 9, &v), 0);
    ck_assert_uint_eq(v, 99);
    for (size_t b = 0; b < x.tlen; b++)
        ck_assert_uint_eq(x.tbuf[b], 0);
    tu_fx_close(&x);
}
END_TEST

/* ---- dead peer ---------------------------------------------------------- */

#define DEAD_DEADLINE_MS 1500

/*
 * Waits for a request to a dead peer; returns "" when it ended with an
 * error within its deadline (plus slack), else what went wrong.
 */
/*
 * The request ends before its deadline plus slack, with an error and its
 * sentence; a lone notification may also end with success: its request
 * completes once the message is handed to the provider (a send to a
 * dead tcp peer completes into the socket; docs/semantics.md), but it
 * must not hang.
 */
static const char *ends_in_time(ferry_req_t *req, uint64_t t0,
                                const char *what, bool may_succeed,
                                char *buf, size_t cap)
{
    int ret = ferry_req_wait(req, DEAD_DEADLINE_MS + 10000);
    uint64_t took = tu_ms_since(t0);

    buf[0] = 0;
    if (ret == FERRY_EAGAIN)
        snprintf(buf, cap, "%s to a dead peer was still running %llu ms "
                 "later (deadline %d ms)", what, (unsigned long long)took,
                 DEAD_DEADLINE_MS);
    else if (ret == 0 && !may_succeed)
        snprintf(buf, cap, "%s to a dead peer reported success after %llu ms: "
                 "the notification was lost, yet the request says it was "
                 "delivered", what, (unsigned long long)took);
    else if (ret == 0)
        ; /* a lone notification handed to the provider: allowed */
    else if (took >= DEAD_DEADLINE_MS + 3000)
        snprintf(buf, cap, "%s ended only after %llu ms (deadline %d ms): %s",
                 what, (unsigned long long)took, DEAD_DEADLINE_MS,
                 ferry_last_error());
    else if (ferry_last_error()[0] == 0)
        snprintf(buf, cap, "%s ended with %s but no sentence", what,
                 ferry_strerror(ret));
    ferry_req_close(req);
    return buf;
}

/* A post to the dead peer: refused at once when the peer is declared
 * already (a process of this host, whose death ferry saw), with
 * FERRY_EPEERDEAD and the peer's sentence; otherwise its request must end
 * in time (ends_in_time).  "" or what went wrong, in buf. */
static void dead_post_ends(int ret, ferry_req_t *req, uint64_t t0,
                           const char *what, bool may_succeed, char *buf,
                           size_t cap)
{
    buf[0] = 0;
    if (ret == 0)
        ends_in_time(req, t0, what, may_succeed, buf, cap);
    else if (ret != FERRY_EPEERDEAD || !strstr(ferry_last_error(), "dead"))
        snprintf(buf, cap, "%s to a dead peer refused with %s: %s", what,
                 ferry_strerror(ret), ferry_last_error());
}

START_TEST(test_dead_peer)
{
    const char *prov = tu_providers[_i];
    struct tu_child c;
    struct ferry_config cfg;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    uint8_t *lbuf = tu_alloc_buf(MiB);
    struct ferry_iov iov;
    ferry_req_t *req;
    char why_send[512], why_write[512];
    int ret;
    uint64_t t0;

    tu_child_start(&c, prov, MiB, 0x1111);
    tu_config(&cfg, prov);
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_msg(ferry_peer_add(ctx, c.addr, c.addr_len, &peer) == 0, "%s",
                  ferry_last_error());
    ck_assert_msg(ferry_rmem_import(peer, c.rkey, c.rkey_len, &rmem) == 0,
                  "%s", ferry_last_error());
    ck_assert_int_eq(ferry_mem_register(ctx, lbuf, MiB, FERRY_MEM_HOST, 0, 0,
                                        &lmem),
                     0);

    /* Alive: a notified write works and lands. */
    tu_fill(lbuf, MiB, 0x2222);
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 3;
    opts.notify_value = 4;
    opts.timeout_ms = DEAD_DEADLINE_MS;
    iov = (struct ferry_iov){lbuf, lmem, rmem, 0, MiB};
    ck_assert_int_eq(ferry_write(peer, &iov, 1, &opts, &req), 0);
    req_ok(req, prov);
    ck_assert(tu_child_verify(&c, 0x2222));

    /* Dead. */
    tu_child_kill(&c);

    /* A notification alone first: nothing before it has met the dead
     * connection yet.  Then a notified write. */
    t0 = tu_now_ns();
    ret = ferry_notify_send(peer, 5, 6, &opts, &req);
    dead_post_ends(ret, req, t0, "a notification", true, why_send,
                   sizeof(why_send));

    t0 = tu_now_ns();
    ret = ferry_write(peer, &iov, 1, &opts, &req);
    dead_post_ends(ret, req, t0, "a notified write", false, why_write,
                   sizeof(why_write));

    ck_assert_msg(why_send[0] == 0 && why_write[0] == 0, "%s: %s%s%s", prov,
                  why_send, why_send[0] && why_write[0] ? "; " : "",
                  why_write);

    /* Whatever is left goes with the context. */
    ferry_context_close(ctx);
    tu_free_buf(lbuf, MiB);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *notify_suite(void)
{
    Suite *s = suite_create("notify");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "after_data", 60);
    tcase_add_loop_test(tc, test_notification_rides_on_write, 0, np);

    tc = tu_tcase(s, "order", 60);
    tcase_add_loop_test(tc, test_arrival_order, 0, np);
    tcase_add_loop_test(tc, test_queue_bound, 0, np);
    tcase_add_loop_test(tc, test_notify_wait, 0, 2 * np);

    tc = tu_tcase(s, "counters", 60);
    tcase_add_loop_test(tc, test_counters, 0, np);

    tc = tu_tcase(s, "thousands", 90);
    tcase_add_loop_test(tc, test_thousands_threads, 0, np);
    tcase_add_loop_test(tc, test_thousands_two_processes, 0, np);

    tc = tu_tcase(s, "invalid", 30);
    tcase_add_test(tc, test_bad_input);

    tc = tu_tcase(s, "dead_peer", 60);
    tcase_add_loop_test(tc, test_dead_peer, 0, np);
    return s;
}

int main(void)
{
    return tu_run(notify_suite());
}
