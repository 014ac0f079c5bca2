/*
 * peer module through the API: a remote-key blob is no address, a full
 * address vector says so, removing NULL is a no-op, destroying a
 * context whose peer still has remote regions imported closes them all,
 * and a peer added after another was removed (closed, or dead) is
 * reached, also once more peers than shm has entries came and went.
 * (Everything else, with the blobs built by hand and the peers' fields:
 * test/unit/check_peer.c.)
 */
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP tu_tcp()

/* A sentinel that a failed call must leave alone. */
#define UNTOUCHED ((ferry_peer_t *)(uintptr_t)0x5a5a)

START_TEST(test_add_rkey_blob_as_address)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = UNTOUCHED;
    ferry_mem_t *mem = NULL;
    void *buf = tu_alloc_buf(4096);
    uint8_t rkey[512];
    size_t len = sizeof(rkey);
    void *copy;

    ck_assert_int_eq(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0,
                                        FERRY_ACCESS_REMOTE_READ, &mem),
                     0);
    ck_assert_int_eq(ferry_mem_export(mem, rkey, &len), 0);
    /* An exact-size heap copy: a read past len is one ASan reports. */
    copy = tu_heap_copy(rkey, len);
    TU_EXPECT_ERROR(ferry_peer_add(ctx, copy, len, &peer), FERRY_EBLOB,
                    "address blob is a remote-key blob, expected an address "
                    "blob");
    free(copy);
    ck_assert_ptr_eq(peer, UNTOUCHED);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/* A domain that takes no more addresses says why: shm's address vector
 * holds its ep_cnt (256) peers, and the 257th was refused with nothing
 * but "Invalid argument". */
START_TEST(test_add_beyond_the_address_vector)
{
    ferry_context_t *ctx = tu_context("shm");
    enum { MOST = 100000 };
    ferry_peer_t **peers = calloc(MOST, sizeof(*peers));
    uint8_t addr[512];
    size_t len = sizeof(addr);
    char words[64];
    int n = 0, ret = 0;

    ck_assert_ptr_nonnull(peers);
    ck_assert_int_eq(ferry_context_address(ctx, addr, &len), 0);
    while (n < MOST && (ret = ferry_peer_add(ctx, addr, len, &peers[n])) == 0)
        n++;
    ck_assert_msg(ret == FERRY_EPROVIDER, "shm took %d peers (%s)", n,
                  ferry_strerror(ret));
    snprintf(words, sizeof(words), "this context already has %d peers", n);
    tu_assert_sentence(words, "as many as the domain's address vector "
                              "takes, its ep_cnt", NULL);
    while (n > 0)
        ck_assert_int_eq(ferry_peer_close(peers[--n]), 0);
    free(peers);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_remove_null)
{
    ck_assert_int_eq(ferry_peer_close(NULL), 0);
    ck_assert_str_eq(ferry_last_error(), "");
}
END_TEST

START_TEST(test_context_destroy_with_rmem_held)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    ferry_mem_t *mem = NULL;
    void *buf = tu_alloc_buf(4096);

    /* Destroying the context closes its remote regions too, which point
     * at their peers: peers must outlive them in the teardown (a use after
     * free under AddressSanitizer otherwise). */
    tu_pair_open(&p, prov, NULL);
    ck_assert_int_eq(ferry_mem_register(p.target, buf, 4096, FERRY_MEM_HOST,
                                        0, FERRY_ACCESS_REMOTE_READ, &mem),
                     0);
    (void)tu_share(mem, p.peer);
    (void)tu_share(mem, p.peer);
    TU_EXPECT_ERROR(ferry_peer_close(p.peer), FERRY_EBUSY,
                    "2 remote regions imported from this peer are still "
                    "held");
    tu_pair_close(&p);
    tu_free_buf(buf, 4096);
}
END_TEST

/* Adds c as a peer of ctx (*peer, *rmem) and writes 64 KiB of seed's
 * pattern into it: 0 or the write's error. */
static int write_to_child(ferry_context_t *ctx, struct tu_child *c,
                          uint8_t *buf, uint64_t seed, ferry_peer_t **peer,
                          ferry_rmem_t **rmem)
{
    ferry_req_t *req;
    struct ferry_iov iov;
    int ret;

    tu_child_reach(ctx, c, peer, rmem);
    tu_fill(buf, 64 * KiB, seed);
    iov = (struct ferry_iov){buf, NULL, *rmem, 0, 64 * KiB};
    ck_assert_int_eq(ferry_write(*peer, &iov, 1, NULL, &req), 0);
    ret = ferry_req_wait(req, 10000);
    ferry_req_close(req);
    return ret;
}

static void remove_peer(ferry_peer_t *peer, ferry_rmem_t *rmem)
{
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_peer_close(peer), 0);
}

/*
 * A peer added after another was removed may take the removed one's
 * entry in the provider's tables, and must be reached as a new peer: the
 * data lands in its memory.  The first child is closed while alive (_i
 * even) or killed before its handle is closed (odd).  (A removed peer
 * whose id libfabric 1.17's shm kept, fabric/shm_mend.h: check_progress's
 * test_killed_peer_leaves_the_others.)
 */
/* Starts two children on prov, then a context (after them: a process
 * with threads forks none under ThreadSanitizer) that writes to the
 * first from buf (64 KiB); the first's handles in *peer and *rmem. */
static ferry_context_t *write_to_first_of_two(const char *prov,
                                              struct tu_child *first,
                                              struct tu_child *second,
                                              uint8_t *buf,
                                              ferry_peer_t **peer,
                                              ferry_rmem_t **rmem)
{
    ferry_context_t *ctx;

    tu_child_start(first, prov, 64 * KiB, 0);
    tu_child_start(second, prov, 64 * KiB, 0);
    ctx = tu_context(prov);
    ck_assert_int_eq(write_to_child(ctx, first, buf, 0x4141, peer, rmem), 0);
    ck_assert(tu_child_verify(first, 0x4141));
    return ctx;
}

START_TEST(test_peer_after_a_removed_one)
{
    const char *prov = tu_providers[_i / 2];
    bool killed = _i % 2 != 0;
    struct tu_child first, second;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    uint8_t *buf = tu_alloc_buf(64 * KiB);
    ferry_context_t *ctx =
        write_to_first_of_two(prov, &first, &second, buf, &peer, &rmem);
    int ret;

    if (killed) {
        tu_child_kill(&first);
        remove_peer(peer, rmem);
    } else {
        remove_peer(peer, rmem);
        tu_child_stop(&first);
    }
    ret = write_to_child(ctx, &second, buf, 0x4242, &peer, &rmem);
    ck_assert_msg(ret == 0, "%s: a write to the peer added after one %s "
                            "gave %s: %s",
                  prov, killed ? "killed" : "closed", ferry_strerror(ret),
                  ferry_last_error());
    ck_assert(tu_child_verify(&second, 0x4242));
    remove_peer(peer, rmem);
    tu_child_stop(&second);
    ferry_context_close(ctx);
    tu_free_buf(buf, 64 * KiB);
}
END_TEST

/*
 * More peers of this host than shm has entries in its tables (256), each
 * added, written to and removed in turn (before it closes) after one was
 * killed: each must be reached as a new peer, its data landing,
 * whichever entry it takes.  shm keeps the id of a peer killed, or
 * removed before it closes, in its entry (fabric/shm_mend.h).  Up to
 * libfabric 1.22 the next peer may take the entry just freed: before
 * ferry's mend of 1.19 to 1.22, the write to the second peer here never
 * ended on 1.22 (the peer declared unreachable).  From 2.0 shm hands its
 * entries out in turn, so the 256th peer after the first takes that
 * one's entry, and before ferry's mend the write to it crashed this
 * process (SIGSEGV in smr_generic_rma).
 */
#define CHURNED_PEERS 260

START_TEST(test_peers_beyond_the_entries_after_a_killed_one)
{
    const char *prov = "shm";
    struct tu_child killed, churned;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    uint8_t *buf = tu_alloc_buf(64 * KiB);
    ferry_context_t *ctx =
        write_to_first_of_two(prov, &killed, &churned, buf, &peer, &rmem);
    int ret;

    tu_child_kill(&killed);
    remove_peer(peer, rmem);
    for (unsigned i = 0; i < CHURNED_PEERS; i++) {
        if (i > 0)
            tu_child_renew(&churned);
        ret = write_to_child(ctx, &churned, buf, 0x5000 + i, &peer, &rmem);
        ck_assert_msg(ret == 0, "%s: a write to peer %u after the killed "
                                "one gave %s: %s",
                      prov, i + 1, ferry_strerror(ret), ferry_last_error());
        ck_assert_msg(tu_child_verify(&churned, 0x5000 + i),
                      "%s: the data written to peer %u after the killed "
                      "one did not land there",
                      prov, i + 1);
        remove_peer(peer, rmem);
    }
    tu_child_stop(&churned);
    ferry_context_close(ctx);
    tu_free_buf(buf, 64 * KiB);
}
END_TEST

static Suite *peer_suite(void)
{
    Suite *s = suite_create("peer");
    TCase *tc = tcase_create("add");

    tcase_add_test(tc, test_add_rkey_blob_as_address);
    tcase_add_test(tc, test_add_beyond_the_address_vector);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetime");
    tcase_add_test(tc, test_remove_null);
    tcase_add_loop_test(tc, test_context_destroy_with_rmem_held, 0,
                        (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tu_tcase(s, "replaced", 60);
    tcase_add_loop_test(tc, test_peer_after_a_removed_one, 0,
                        2 * (int)tu_nproviders);
    tc = tu_tcase(s, "churned", 120);
    tcase_add_test(tc, test_peers_beyond_the_entries_after_a_killed_one);
    return s;
}

int main(void)
{
    return tu_run(peer_suite());
}
