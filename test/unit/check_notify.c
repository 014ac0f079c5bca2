/*
 * notify module from inside: a notification is seen by the target only
 * once every byte of its request is in the target's memory, and the
 * initiator's request ends (its notification state DONE) only once the
 * notification went out, also when the target does not progress; and
 * notifications under forced registration modes, whose message buffers
 * are registered with keys of their own.  (Everything seen through the
 * API: test/api/check_notify.c.)
 */
#include "notifyutil.h"

#include "fabric/shm_loop.h"
#include "reg/mem.h"
#include "xfer/notify.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- data before notification ------------------------------------------- */

static const size_t after_data_sizes[] = {1, 64 * KiB, 16 * MiB};
#define AFTER_DATA_REPS 3
#define AFTER_DATA_REGION (16 * MiB + 64 * KiB)

/*
 * The initiator has its own progress thread, so nothing but the library
 * decides when the notification goes; the test thread polls the target
 * and checks the data the moment the notification is handed out.  Loop
 * index: provider, then default or chunked.  Chunked, a write is many
 * operations of 256 KiB with only 2 in flight, so a notification sent
 * before the last of them completed would overtake data even on a
 * provider that delivers in order.
 */
START_TEST(test_notification_after_data)
{
    const char *prov = tu_providers[_i % (int)tu_nproviders];
    bool chunked = _i >= (int)tu_nproviders;
    struct ferry_config cfg;
    struct tu_fx x;
    uint8_t *want = tu_alloc_buf(AFTER_DATA_REGION);

    tu_config(&cfg, prov);
    if (chunked) {
        cfg.max_msg_size = 256 * KiB;
        cfg.tx_depth = 2;
    }
    tu_fx_open(&x, prov, &cfg, 1, 1, AFTER_DATA_REGION, 16 * MiB);
    tu_fill(x.tbuf, x.tlen, 0xbac0);
    memcpy(want, x.tbuf, x.tlen);
    for (size_t k = 0; k < TU_ARRAY_LEN(after_data_sizes); k++) {
        for (unsigned rep = 0; rep < AFTER_DATA_REPS; rep++) {
            size_t len = after_data_sizes[k];
            uint64_t roff = rep * 4099u; /* unaligned, and moving */
            uint64_t id = 1000 + k * 10 + rep, value = len + rep;
            uint64_t seed = 0x5000 + k * 16 + rep;
            struct ferry_notification n[4] = {{.id = 0}};
            ferry_req_t *req;
            size_t bad;
            int got, ret;

            tu_fill(x.lbuf, len, seed);
            req = notified_write(&x, 0, roff, len, id, value);
            got = poll_some(x.p.target, n, 4, prov);
            /* The very moment it is seen, every byte must be there. */
            bad = tu_check(x.tbuf + roff, len, seed);
            ck_assert_msg(bad == SIZE_MAX,
                          "%s%s: notification for a %zu-byte write (rep %u) "
                          "was seen while byte %zu had not landed",
                          prov, chunked ? " (chunked)" : "", len, rep, bad);
            ck_assert_int_eq(got, 1);
            ck_assert_uint_eq(n[0].id, id);
            ck_assert_uint_eq(n[0].value, value);

            /* The request ends, successfully, and only with the
             * notification delivered. */
            ret = ferry_req_wait(req, PATIENCE_MS);
            ck_assert_msg(ret == 0, "%s: %zu-byte notified write ended with "
                          "%s: %s", prov, len, ferry_strerror(ret),
                          ferry_last_error());
            ck_assert_int_eq(ferry_req_test(req), 0);
            ck_assert_int_eq(req->notify, FERRY__NOTIFY_DONE);
            ck_assert_uint_eq(req->bytes_done, len);
            ferry_req_close(req);

            memcpy(want + roff, x.lbuf, len);
            tu_assert_same(x.tbuf, want, x.tlen, "target after the write");
            ck_assert_int_eq(ferry_notify_poll(x.p.target, n, 4), 0);
        }
    }
    tu_free_buf(want, AFTER_DATA_REGION);
    tu_fx_close(&x);
}
END_TEST

/*
 * Without the target's progress the data cannot land, so neither may the
 * request end nor the notification appear; once the target progresses,
 * the data is there when the notification is.
 */
START_TEST(test_request_waits_for_notification)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_pair p;
    uint8_t addr[512];
    size_t alen = sizeof(addr), len = 8 * MiB;
    uint8_t *tbuf = tu_alloc_buf(len), *lbuf = tu_alloc_buf(len);
    ferry_mem_t *tmem, *lmem;
    ferry_rmem_t *rmem;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_notification n = {.id = 0};
    struct ferry_iov iov;
    ferry_req_t *req;
    uint64_t t0;
    int ret, got = 0;

    /* Neither side has a progress thread: the test drives both. */
    tu_config(&cfg, prov);
    ck_assert_int_eq(ferry_context_create(&cfg, &p.init), 0);
    ck_assert_int_eq(ferry_context_create(&cfg, &p.target), 0);
    ck_assert_int_eq(ferry_context_address(p.target, addr, &alen), 0);
    ck_assert_int_eq(ferry_peer_add(p.init, addr, alen, &p.peer), 0);
    ck_assert_int_eq(ferry_mem_register(p.target, tbuf, len, FERRY_MEM_HOST,
                                        0, RW, &tmem),
                     0);
    ck_assert_int_eq(ferry_mem_register(p.init, lbuf, len, FERRY_MEM_HOST, 0,
                                        0, &lmem),
                     0);
    rmem = tu_share(tmem, p.peer);

    /* Warm-up: connection set-up needs both sides' progress. */
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 1;
    opts.notify_value = 1;
    iov = (struct ferry_iov){lbuf, lmem, rmem, 0, 1};
    ck_assert_int_eq(ferry_write(p.peer, &iov, 1, &opts, &req), 0);
    tu_finish_on_stalled(p.target, req, "warm-up");
    t0 = tu_now_ns();
    while ((got = ferry_notify_poll(p.target, &n, 1)) == 0)
        ck_assert_msg(tu_ms_since(t0) < PATIENCE_MS, "warm-up notification");
    ck_assert_int_eq(got, 1);

    /* The real write: 8 MiB cannot land while the target sleeps. */
    tu_fill(lbuf, len, 0x7777);
    opts.notify_id = 2;
    opts.notify_value = 22;
    iov = (struct ferry_iov){lbuf, lmem, rmem, 0, len};
    ck_assert_int_eq(ferry_write(p.peer, &iov, 1, &opts, &req), 0);
    for (int i = 0; i < 2000; i++)
        ck_assert_int_ge(ferry_progress(p.init), 0);
    ck_assert_msg(ferry_req_test(req) == FERRY_EINPROGRESS,
                  "%s: the notified write ended although the target never "
                  "progressed (notify state %d)",
                  prov, (int)req->notify);
    ck_assert_int_ne(req->notify, FERRY__NOTIFY_DONE);

    /* Now the target progresses only through ferry_notify_poll. */
    t0 = tu_now_ns();
    got = 0;
    while (got == 0) {
        got = ferry_notify_poll(p.target, &n, 1);
        ck_assert_int_ge(got, 0);
        if (got == 0)
            ck_assert_int_ge(ferry_progress(p.init), 0);
        ck_assert_msg(tu_ms_since(t0) < PATIENCE_MS, "no notification");
    }
    ck_assert_msg(tu_check(tbuf, len, 0x7777) == SIZE_MAX,
                  "%s: notification seen before the data landed", prov);
    ck_assert_uint_eq(n.id, 2);
    ck_assert_uint_eq(n.value, 22);
    t0 = tu_now_ns();
    while ((ret = ferry_req_test(req)) == FERRY_EINPROGRESS) {
        ck_assert_int_ge(ferry_progress(p.target), 0);
        ck_assert_msg(tu_ms_since(t0) < PATIENCE_MS, "request never ended");
    }
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    ck_assert_int_eq(req->notify, FERRY__NOTIFY_DONE);
    ferry_req_close(req);

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    ck_assert_int_eq(ferry_mem_close(tmem), 0);
    tu_pair_close(&p);
    tu_free_buf(tbuf, len);
    tu_free_buf(lbuf, len);
}
END_TEST

/*
 * Notifications under every registration mode a provider may ask for:
 * with FI_MR_LOCAL the message buffers themselves are registered, and with
 * FI_MR_PROV_KEY forced on a provider that takes requested keys, ferry
 * must still give each of those registrations a key of its own.
 */
static const struct {
    const char *prov;
    unsigned force;
} forced_modes[] = {
    {"tcp;ofi_rxm", FERRY_MR_LOCAL},
    {"shm", FERRY_MR_LOCAL},
    {"tcp;ofi_rxm", FERRY_MR_LOCAL | FERRY_MR_PROV_KEY},
    {"shm", FERRY_MR_LOCAL | FERRY_MR_PROV_KEY},
    {"shm", FERRY_MR_LOCAL | FERRY_MR_PROV_KEY | FERRY_MR_VIRT_ADDR},
};

static void distinct_remote_keys(ferry_context_t *ctx, const char *what)
{
    uint8_t *a = tu_alloc_buf(64 * KiB), *b = tu_alloc_buf(64 * KiB);
    struct ferry_mem *ma, *mb;
    uint64_t ka, kb;

    ck_assert_int_eq(ferry_mem_register(ctx, a, 64 * KiB, FERRY_MEM_HOST, 0,
                                        FERRY_ACCESS_REMOTE_WRITE, &ma),
                     0);
    ck_assert_int_eq(ferry_mem_register(ctx, b, 64 * KiB, FERRY_MEM_HOST, 0,
                                        FERRY_ACCESS_REMOTE_WRITE, &mb),
                     0);
    ka = fi_mr_key(ma->mr[0]);
    kb = fi_mr_key(mb->mr[0]);
    ck_assert_msg(ka != kb && ka != FI_KEY_NOTAVAIL && kb != FI_KEY_NOTAVAIL,
                  "%s: regions with remote access got keys %llu and %llu",
                  what, (unsigned long long)ka, (unsigned long long)kb);
    ck_assert_int_eq(ferry_mem_close(ma), 0);
    ck_assert_int_eq(ferry_mem_close(mb), 0);
    tu_free_buf(a, 64 * KiB);
    tu_free_buf(b, 64 * KiB);
}

START_TEST(test_forced_mr_modes)
{
    const char *prov = forced_modes[_i].prov;
    struct ferry_config cfg;
    struct ferry_notification n[4];
    char what[96];
    struct tu_fx x;
    int got;

    snprintf(what, sizeof(what), "%s with mr_mode_force 0x%x", prov,
             forced_modes[_i].force);
    tu_config(&cfg, prov);
    cfg.mr_mode_force = forced_modes[_i].force;
    tu_fx_open(&x, prov, &cfg, 0, 1, 64 * KiB, 64 * KiB);
    ck_assert_msg(ferry__fabric_of(x.p.init)->register_local && ferry__fabric_of(x.p.target)->register_local,
                  "%s: FI_MR_LOCAL forced, yet no local registration", what);
    ck_assert_ptr_nonnull(ferry__xfer_of(x.p.target)->notify.rx[0].recv_mr);
    ck_assert_ptr_nonnull(ferry__xfer_of(x.p.init)->notify.rx[0].send_mr);
    /* Two registrations a peer may address never share a key.  Message
     * buffers are local only: a provider may give them all
     * FI_KEY_NOTAVAIL (libfabric 2.x's shm does), and ferry never uses
     * their keys, so nothing is asserted about them. */
    distinct_remote_keys(x.p.init, what);
    tu_fill(x.lbuf, 64 * KiB, 0x6060);
    req_ok(notified_write(&x, 0, 0, 64 * KiB, 31, 1), what);
    req_ok(notify_only(x.p.peer, 31, 2), what);
    ck_assert_msg(ferry_counter_wait(x.p.target, 31, 3, PATIENCE_MS) == 0,
                  "%s: %s", what, ferry_last_error());
    ck_assert_msg(tu_check(x.tbuf, 64 * KiB, 0x6060) == SIZE_MAX, "%s", what);
    got = ferry_notify_poll(x.p.target, n, 4);
    ck_assert_int_eq(got, 2);
    ck_assert(n[0].id == 31 && n[0].value == 1);
    ck_assert(n[1].id == 31 && n[1].value == 2);
    /* And back the other way: the target notifies the initiator -- unless
     * libfabric's shm cannot connect two endpoints of one process both
     * ways (shm_loop.h), and ferry says so instead of crashing. */
    {
        uint8_t addr[512];
        size_t alen = sizeof(addr);
        ferry_peer_t *back;

        ck_assert_int_eq(ferry_context_address(x.p.init, addr, &alen), 0);
        if (ferry__shm_loop_faulty(ferry__fabric_of(x.p.target)->rails[0].info)) {
            ck_assert_int_eq(ferry_peer_add(x.p.target, addr, alen, &back),
                             FERRY_ENOTSUP);
            tu_assert_sentence("both ways", NULL);
            tu_fx_close(&x);
            return;
        }
        ck_assert_int_eq(ferry_peer_add(x.p.target, addr, alen, &back), 0);
        ferry_req_t *req = notify_only(back, 32, 5);
        uint64_t t0 = tu_now_ns(), v = 0;
        int ret;

        /* The initiator has no progress thread: drive it meanwhile. */
        while ((ret = ferry_req_test(req)) == FERRY_EINPROGRESS) {
            ck_assert_int_ge(ferry_progress(x.p.init), 0);
            ck_assert_msg(tu_ms_since(t0) < PATIENCE_MS, "%s: stuck", what);
        }
        ck_assert_msg(ret == 0, "%s: %s", what, ferry_last_error());
        ferry_req_close(req);
        ck_assert_msg(ferry_counter_wait(x.p.init, 32, 5, PATIENCE_MS) == 0,
                      "%s: %s", what, ferry_last_error());
        ck_assert_int_eq(ferry_counter_get(x.p.init, 32, &v), 0);
        ck_assert_uint_eq(v, 5);
    }
    tu_fx_close(&x);
}
END_TEST

/* ---- suite ------------------------------------------------------------------ */

static Suite *notify_suite(void)
{
    Suite *s = suite_create("notify");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "after_data", 60);
    tcase_add_loop_test(tc, test_notification_after_data, 0, 2 * np);
    tcase_add_loop_test(tc, test_request_waits_for_notification, 0, np);
    tcase_add_loop_test(tc, test_forced_mr_modes, 0,
                        (int)TU_ARRAY_LEN(forced_modes));
    return s;
}

int main(void)
{
    return tu_run(notify_suite());
}
