/*
 * Stale keys where the target's pulse table is not mapped here, as for a
 * peer on another host (fabric/pulse.h): the initiator cannot check a key
 * before posting, and tcp;ofi_rxm (libfabric 1.17) answers a write with a
 * stale key by dropping the connection under every operation to that
 * peer.  The peer must stay usable: the stale request ends with
 * FERRY_ESTALE (found by reading the target's slot word over a new
 * connection), the next writes succeed, and writes in flight beside it
 * land.  Each case runs with the provider's tx_depth and again with so
 * few slots that the held operations take every one the data may: the
 * heartbeat and the key check must still go (fabric.h's
 * FERRY__CONTROL_OPS).  In one process, the table unmapped from the
 * initiator's peer by hand.  (On one host, two processes, and a target
 * destroyed in this process: test/api/check_stale.c.)
 */
#include "testutil.h"

#include "reg/mem.h"
#include "reg/peer.h"
#include "xfer/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TCP "tcp;ofi_rxm"
#define LEN (64 * KiB)
/* The stale request ends within this: a new connection, a heartbeat and
 * a read of the slot, far below the 30 s deadline. */
#define PROMPT_MS 2000
/* The writes in flight beside the stale one: pieces of a region. */
#define PIECES 16
#define PIECE (2 * MiB)

/* The initiator's peer no longer sees the target's table: as if it were
 * on another host. */
static void forget_table(ferry_peer_t *peer)
{
    ck_assert_ptr_nonnull(peer->pulse.local);
    munmap((void *)peer->pulse.local,
           (FERRY__PULSE_HEADER + FERRY__PULSE_SLOTS) * sizeof(uint64_t));
    peer->pulse.local = NULL;
}

static ferry_req_t *post(ferry_peer_t *peer, bool write, void *buf,
                         ferry_mem_t *lmem, ferry_rmem_t *rmem, uint64_t roff,
                         size_t len)
{
    struct ferry_iov iov = {buf, lmem, rmem, roff, len};
    ferry_req_t *req = NULL;
    int ret = write ? ferry_write(peer, &iov, 1, NULL, &req)
                    : ferry_read(peer, &iov, 1, NULL, &req);

    ck_assert_msg(ret == 0, "posting: %s", ferry_last_error());
    return req;
}

/* Waits for the stale request: FERRY_ESTALE, promptly, saying so. */
static void expect_stale(ferry_req_t *req, uint64_t t0, const char *what)
{
    int ret = ferry_req_wait(req, -1);
    uint64_t ms = tu_ms_since(t0);

    printf("stale (remote check): %s: %s after %llu ms: %s\n", what,
           ret == 0 ? "success" : ferry_strerror(ret), (unsigned long long)ms,
           ret == 0 ? "" : ferry_last_error());
    ck_assert_msg(ret == FERRY_ESTALE,
                  "%s ended with %s after %llu ms, expected FERRY_ESTALE: %s",
                  what, ret == 0 ? "success" : ferry_strerror(ret),
                  (unsigned long long)ms, ferry_last_error());
    tu_assert_sentence("no longer has a region", "registered",
                       "import its new", NULL);
    ck_assert_msg(ms < PROMPT_MS, "%s took %llu ms to fail", what,
                  (unsigned long long)ms);
    ferry_req_close(req);
}

static void expect_up(ferry_peer_t *peer)
{
    enum ferry_peer_state st;
    char why[256];

    ck_assert_int_eq(ferry_peer_state(peer, &st, why, sizeof(why)), 0);
    ck_assert_msg(st == FERRY_PEER_UP, "the peer is %d after a stale key: %s",
                  (int)st, why);
}

/* A pair on tcp whose initiator cannot see the target's table, with
 * target regions a (alen bytes, deregistered at once: ra is stale) and b
 * (blen), and an initiator region l (llen).  fx_open's tx_depth 0: the
 * provider's. */
struct fx {
    struct tu_pair p;
    uint8_t *a, *b, *l;
    size_t alen, blen, llen;
    ferry_mem_t *mb, *ml;
    ferry_rmem_t *ra, *rb;
};

static void fx_open(struct fx *f, size_t alen, size_t blen, size_t llen,
                    size_t tx_depth)
{
    struct ferry_config cfg;
    ferry_mem_t *ma;

    f->alen = alen;
    f->blen = blen;
    f->llen = llen;
    tu_config(&cfg, TCP);
    cfg.tx_depth = tx_depth;
    tu_pair_open(&f->p, TCP, &cfg);
    forget_table(f->p.peer);
    f->a = tu_alloc_buf(alen);
    f->b = tu_alloc_buf(blen);
    f->l = tu_alloc_buf(llen);
    ma = tu_register(f->p.target, f->a, alen, RW);
    f->mb = tu_register(f->p.target, f->b, blen, RW);
    f->ml = tu_register(f->p.init, f->l, llen, 0);
    f->ra = tu_share(ma, f->p.peer);
    f->rb = tu_share(f->mb, f->p.peer);
    /* Connected, the peer UP: a write into a while it lives. */
    tu_xfer_ok(f->p.peer, true,
               &(struct ferry_iov){f->l, f->ml, f->ra, 0, 4096}, 1,
               "write while the region lives");
    ck_assert_int_eq(ferry_mem_close(ma), 0);
}

static void fx_close(struct fx *f)
{
    ck_assert_int_eq(ferry_rmem_close(f->ra), 0);
    ck_assert_int_eq(ferry_rmem_close(f->rb), 0);
    ck_assert_int_eq(ferry_mem_close(f->mb), 0);
    ck_assert_int_eq(ferry_mem_close(f->ml), 0);
    tu_pair_close(&f->p);
    tu_free_buf(f->a, f->alen);
    tu_free_buf(f->b, f->blen);
    tu_free_buf(f->l, f->llen);
}

/*
 * The tx_depth of a case's pass _i: 0 (the provider's) in the first,
 * every_slot in the second, so few that what the case holds after the
 * drop takes every slot the data may have.
 */
static size_t depth_of(int i, size_t every_slot)
{
    return i == 0 ? 0 : every_slot;
}

/* A stale write, then a stale read, then writes into the live region. */
START_TEST(test_stale_then_live)
{
    struct fx f;

    fx_open(&f, LEN, LEN, LEN, depth_of(_i, 1));
    expect_stale(post(f.p.peer, true, f.l, f.ml, f.ra, 0, 4096), tu_now_ns(),
                 "write into the deregistered region");
    expect_stale(post(f.p.peer, false, f.l, f.ml, f.ra, 0, 4096),
                 tu_now_ns(), "read from the deregistered region");
    for (uint64_t seed = 0x5301; seed < 0x5309; seed++) {
        tu_fill(f.l, LEN, seed);
        tu_xfer_ok(f.p.peer, true,
                   &(struct ferry_iov){f.l, f.ml, f.rb, 0, LEN}, 1,
                   "live write after the stale ones");
        ferry_progress(f.p.target); /* orders the landing before the check */
        tu_assert_pattern(f.b, LEN, seed, "the live region after write %llu",
                          (unsigned long long)(seed - 0x5300));
    }
    expect_up(f.p.peer);
    fx_close(&f);
}
END_TEST

/*
 * Writes in flight to the live region when the stale one drops the
 * connection under them: each lands (ferry posts them again over the new
 * connection once the slot read says their region lives).
 */
START_TEST(test_stale_beside_writes_in_flight)
{
    struct fx f;
    ferry_req_t *req[PIECES], *stale;
    struct ferry_stats st;
    uint64_t t0;

    fx_open(&f, LEN, PIECES * PIECE, PIECES * PIECE, depth_of(_i, 2));
    for (size_t i = 0; i < PIECES; i++)
        tu_fill(f.l + i * PIECE, PIECE, 0x5400 + i);
    for (size_t i = 0; i < PIECES / 2; i++)
        req[i] = post(f.p.peer, true, f.l + i * PIECE, f.ml, f.rb, i * PIECE,
                      PIECE);
    t0 = tu_now_ns();
    stale = post(f.p.peer, true, f.l, f.ml, f.ra, 0, 4096);
    for (size_t i = PIECES / 2; i < PIECES; i++)
        req[i] = post(f.p.peer, true, f.l + i * PIECE, f.ml, f.rb, i * PIECE,
                      PIECE);
    expect_stale(stale, t0, "write into the deregistered region");
    for (size_t i = 0; i < PIECES; i++) {
        int ret = ferry_req_wait(req[i], -1);

        ck_assert_msg(ret == 0, "write %zu beside the stale one: %s", i,
                      ferry_last_error());
        ferry_req_close(req[i]);
    }
    ferry_progress(f.p.target);
    for (size_t i = 0; i < PIECES; i++)
        tu_assert_pattern(f.b + i * PIECE, PIECE, 0x5400 + i,
                          "piece %zu of the live region", i);
    st = tu_stats(f.p.init);
    printf("stale (remote check): %llu operations interrupted by the drop, "
           "%llu posted again\n",
           (unsigned long long)st.ops_interrupted,
           (unsigned long long)st.ops_posted_again);
    ck_assert_msg(st.ops_posted_again > 0,
                  "no write was in flight beside the stale one when the "
                  "connection dropped: the test proves nothing");
    ck_assert_uint_le(st.ops_posted_again, st.ops_interrupted);
    expect_up(f.p.peer);
    fx_close(&f);
}
END_TEST

/*
 * The provider pushed back on the peer once, so the peer has a window of
 * one operation (xfer/op.h), and the stale write fills it when the
 * connection drops under it: held, it keeps its slot.  The heartbeat and
 * the key check that follow still go (they take no heed of the window),
 * and the write ends with FERRY_ESTALE, the peer UP.  Held to the window,
 * they found no slot, and the live peer was declared dead after an eighth
 * of its liveness.  (The push-back is the provider's answer, given here
 * as libfabric 1.22's tcp gave it to a stream of 1 MiB writes.)
 */
START_TEST(test_stale_fills_the_window)
{
    struct fx f;
    struct ferry__xfer *x;
    struct ferry__lock *lock;
    struct ferry__rail *rail;
    ferry_req_t *live, *stale;
    uint64_t t0;

    fx_open(&f, LEN, LEN, LEN, depth_of(_i, 1));
    x = ferry__xfer_of(f.p.init);
    lock = &ferry__fabric_of(f.p.init)->lock;
    rail = ferry__peer_rail(f.p.peer, 0);
    tu_fill(f.l, LEN, 0x5600);
    live = post(f.p.peer, true, f.l, f.ml, f.rb, 0, LEN);
    ferry__lock_acquire(lock);
    ck_assert_uint_eq(f.p.peer->live.rail_ops[rail->index], 1);
    ferry__op_pushed_back(x, f.p.peer, rail);
    ferry__lock_release(lock);
    ck_assert_uint_eq(f.p.peer->live.window[rail->index], 1);
    t0 = tu_now_ns();
    stale = post(f.p.peer, true, f.l, f.ml, f.ra, 0, 4096);
    ck_assert_int_eq(ferry_req_wait(live, -1), 0);
    ferry_req_close(live);
    expect_stale(stale, t0, "write into the deregistered region, its "
                            "window full");
    ck_assert_uint_eq(f.p.peer->live.window[rail->index], 1);
    expect_up(f.p.peer);
    tu_xfer_ok(f.p.peer, true, &(struct ferry_iov){f.l, f.ml, f.rb, 0, LEN},
               1, "live write after the stale one");
    ferry_progress(f.p.target); /* orders the landing before the check */
    tu_assert_pattern(f.b, LEN, 0x5600, "the live region");
    fx_close(&f);
}
END_TEST

/* A stale write carrying a notification: it ends with FERRY_ESTALE, and
 * the target's wait on the notification's counter ends with the abort
 * (the notification never came); a live one carrying another counts. */
START_TEST(test_stale_write_with_notification)
{
    struct fx f;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov;
    ferry_req_t *req = NULL;
    uint64_t t0;
    int ret;

    fx_open(&f, LEN, LEN, LEN, depth_of(_i, 1));
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 77;
    opts.notify_value = 1;
    iov = (struct ferry_iov){f.l, f.ml, f.ra, 0, 4096};
    t0 = tu_now_ns();
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, &opts, &req), 0);
    expect_stale(req, t0, "notified write into the deregistered region");
    ret = ferry_counter_wait(f.p.target, 77, 1, 5000);
    ck_assert_msg(ret == FERRY_EABORTED,
                  "the target's wait for the stale write's notification "
                  "gave %s: %s",
                  ret == 0 ? "success" : ferry_strerror(ret),
                  ferry_last_error());
    opts.notify_id = 78;
    tu_fill(f.l, LEN, 0x5500);
    iov = (struct ferry_iov){f.l, f.ml, f.rb, 0, LEN};
    tu_xfer_ok(f.p.peer, true, &iov, 1, "notified live write");
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, &opts, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, -1), 0);
    ferry_req_close(req);
    ck_assert_int_eq(ferry_counter_wait(f.p.target, 78, 1, 5000), 0);
    tu_assert_pattern(f.b, LEN, 0x5500, "the live region");
    expect_up(f.p.peer);
    fx_close(&f);
}
END_TEST

/*
 * A process that restarts at its predecessor's address registers its
 * first region as the predecessor did.  Its key on every rail and its
 * pulse generation must still differ from the predecessor's: a peer's
 * write through the old blob then meets an unknown key, and its check of
 * the slot after a dropped connection finds the region gone, instead of
 * either landing in the successor's memory.  Here a context closed and a
 * new one opened in its place stand for the two processes.
 */
START_TEST(test_successor_shares_no_key)
{
    uint8_t key[FERRY__MAX_RAILS][FERRY__KEY_MAX];
    size_t key_len[FERRY__MAX_RAILS], len = 4096;
    uint64_t generation = 0;
    unsigned nrails = 0;

    for (int round = 0; round < 2; round++) {
        ferry_context_t *ctx = tu_context(TCP);
        uint8_t *buf = tu_alloc_buf(len);
        ferry_mem_t *mem = tu_register(ctx, buf, len, RW);

        ck_assert_uint_ne(mem->slot, FERRY__PULSE_NO_SLOT);
        ck_assert_uint_ne(mem->generation, 0);
        if (round == 0) {
            generation = mem->generation;
            nrails = tu_info(ctx).nrails;
            memcpy(key, mem->key, sizeof(key));
            memcpy(key_len, mem->key_len, sizeof(key_len));
        } else {
            ck_assert_msg(mem->generation != generation,
                          "the successor's first region has the "
                          "predecessor's generation %llu",
                          (unsigned long long)generation);
            for (unsigned r = 0; r < nrails; r++)
                ck_assert_msg(mem->key_len[r] != key_len[r] ||
                                  memcmp(mem->key[r], key[r], key_len[r]),
                              "rail %u: the successor's first region has "
                              "the predecessor's key",
                              r);
        }
        ck_assert_int_eq(ferry_mem_close(mem), 0);
        ck_assert_int_eq(ferry_context_close(ctx), 0);
        tu_free_buf(buf, len);
    }
}
END_TEST

static Suite *stale_suite(void)
{
    Suite *s = suite_create("stale (remote check)");
    TCase *tc = tu_tcase(s, "tcp", 60);

    tcase_add_loop_test(tc, test_stale_then_live, 0, 2);
    tcase_add_loop_test(tc, test_stale_beside_writes_in_flight, 0, 2);
    tcase_add_loop_test(tc, test_stale_fills_the_window, 0, 2);
    tcase_add_loop_test(tc, test_stale_write_with_notification, 0, 2);
    tcase_add_test(tc, test_successor_shares_no_key);
    return s;
}

int main(void)
{
    return tu_run(stale_suite());
}
