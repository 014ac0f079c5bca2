/*
 * The ownership rule (ferry(7), "Ownership"), closed in every order.
 *
 * One context holds one handle of each kind made from it: a registration,
 * a peer (the context itself), a remote region imported from that peer,
 * a local and a remote descriptor list, a prepared transfer over them, a
 * request it posted (ended) and a metadata handle (the bootstrap hub).
 * For many orders of those eight, and every point in each order, the test
 * closes the handles before that point in that order, then the context:
 *
 *   - a close answers FERRY_EBUSY exactly while a handle that uses the
 *     one being closed is still open (and then changes nothing: the
 *     handle is tried again after the rest);
 *   - every other close answers 0;
 *   - ferry_context_close answers 0 and closes whatever is left.
 *
 * Built with --enable-asan (the CI's sanitizer stage), any close that
 * touches freed memory, or a context that leaves something behind (a
 * leak), fails the test.
 */
#include "testutil.h"

#include <ferry.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROV "shm"
#define LEN 8192u
#define BLOCK 4096u

enum handle {
    H_MEM,
    H_PEER,
    H_RMEM,
    H_LOCAL_LIST,
    H_REMOTE_LIST,
    H_PREP,
    H_REQ,
    H_META,
    H_COUNT
};

static const char *const handle_name[H_COUNT] = {
    "registration", "peer", "remote region", "local list", "remote list",
    "prepared transfer", "request", "metadata handle",
};

/* The handles each one is used by: it refuses to close while any of them
 * is open. */
static const unsigned used_by[H_COUNT] = {
    [H_MEM] = 1u << H_LOCAL_LIST,
    [H_PEER] = 1u << H_RMEM,
    [H_RMEM] = 1u << H_REMOTE_LIST,
    [H_LOCAL_LIST] = 1u << H_PREP,
    [H_REMOTE_LIST] = 1u << H_PREP,
};

struct handles {
    ferry_context_t *ctx;
    void *buf;
    ferry_mem_t *mem;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_dlist_t *local, *remote;
    ferry_prep_t *prep;
    ferry_req_t *req;
    ferry_meta_t *meta;
};

static void open_all(struct handles *h)
{
    struct ferry_dlist_segment seg = {0};
    uint32_t idx = 0, ridx = 1;
    int ret;

    memset(h, 0, sizeof(*h));
    h->ctx = tu_context(PROV);
    h->buf = tu_alloc_buf(LEN);
    h->mem = tu_register(h->ctx, h->buf, LEN,
                         FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    h->peer = tu_self_peer(h->ctx);
    h->rmem = tu_share(h->mem, h->peer);
    ck_assert_int_eq(ferry_dlist_create(h->ctx, FERRY_DLIST_LOCAL, "l",
                                        &h->local), 0);
    ck_assert_int_eq(ferry_dlist_create(h->ctx, FERRY_DLIST_REMOTE, "r",
                                        &h->remote), 0);
    seg.block_size = BLOCK;
    seg.count = LEN / BLOCK;
    seg.stride = BLOCK;
    seg.mem = h->mem;
    ck_assert_int_eq(ferry_dlist_add(h->local, &seg, NULL), 0);
    seg.mem = NULL;
    seg.rmem = h->rmem;
    ck_assert_int_eq(ferry_dlist_add(h->remote, &seg, NULL), 0);
    ck_assert_int_eq(ferry_xfer_prepare(h->peer, FERRY_OP_WRITE, h->local,
                                        h->remote, &h->prep), 0);
    ck_assert_int_eq(ferry_xfer_post(h->prep, &idx, &ridx, 1, NULL, &h->req),
                     0);
    ck_assert_int_eq(ferry_req_wait(h->req, 10000), 0);
    ret = ferry_meta_open(h->ctx, "bootstrap://127.0.0.1:0", "owner",
                          &h->meta);
    ck_assert_msg(ret == 0, "ferry_meta_open: %s", ferry_last_error());
}

static int close_one(struct handles *h, enum handle which)
{
    switch (which) {
    case H_MEM: return ferry_mem_close(h->mem);
    case H_PEER: return ferry_peer_close(h->peer);
    case H_RMEM: return ferry_rmem_close(h->rmem);
    case H_LOCAL_LIST: return ferry_dlist_close(h->local);
    case H_REMOTE_LIST: return ferry_dlist_close(h->remote);
    case H_PREP: return ferry_xfer_close(h->prep);
    case H_REQ: return ferry_req_close(h->req);
    case H_META: return ferry_meta_close(h->meta);
    default: break;
    }
    ck_abort_msg("no handle %d", (int)which);
    return 0;
}

/*
 * Closes order[0..cut) (a refused one again after the others, for as long
 * as that closes more: one held by a handle past the cut stays open),
 * then the context, which closes the rest.  open: the handles still open.
 */
static void close_in_order(const enum handle *order, int cut)
{
    struct handles h;
    unsigned open = (1u << H_COUNT) - 1;
    enum handle pending[H_COUNT];
    int npending = 0;

    open_all(&h);
    for (int i = 0; i < cut; i++)
        pending[npending++] = order[i];
    while (npending > 0) {
        int left = 0;

        for (int i = 0; i < npending; i++) {
            enum handle k = pending[i];
            bool busy = (used_by[k] & open) != 0;
            int ret = close_one(&h, k);

            ck_assert_msg(ret == (busy ? FERRY_EBUSY : 0),
                          "closing the %s (%s): %s (%s)", handle_name[k],
                          busy ? "in use: expected FERRY_EBUSY"
                               : "unused: expected 0",
                          ferry_strerror(ret), ferry_last_error());
            if (busy)
                pending[left++] = k;
            else
                open &= ~(1u << k);
        }
        if (left == npending)
            break; /* all held by handles past the cut */
        npending = left;
    }
    ck_assert_msg(ferry_context_close(h.ctx) == 0, "ferry_context_close: %s",
                  ferry_last_error());
    tu_free_buf(h.buf, LEN);
}

/* The k-th permutation of H_COUNT handles, k < H_COUNT! (the factorial
 * number system: every k names a different order). */
static void nth_order(unsigned long k, enum handle *order)
{
    enum handle left[H_COUNT];
    int nleft = H_COUNT;

    for (int i = 0; i < H_COUNT; i++)
        left[i] = (enum handle)i;
    for (int i = 0; i < H_COUNT; i++) {
        unsigned long f = 1;

        for (int j = 2; j < nleft; j++)
            f *= (unsigned long)j;
        int pick = (int)(k / f);

        k %= f;
        order[i] = left[pick];
        memmove(&left[pick], &left[pick + 1],
                (size_t)(nleft - pick - 1) * sizeof(left[0]));
        nleft--;
    }
}

/*
 * 8! = 40320 orders is too many contexts for a test, so the test walks
 * them with a stride coprime to 40320, which visits orders from every
 * part of the space (each first handle, each pair of first handles...),
 * and every cut point of each; `_i` (Check's loop index) picks the group.
 */
#define ORDERS_PER_GROUP 8
#define ORDER_STRIDE 4903ul /* prime, so coprime to 8! */

START_TEST(test_close_in_every_order)
{
    enum handle order[H_COUNT];

    for (int n = 0; n < ORDERS_PER_GROUP; n++) {
        unsigned long k =
            ((unsigned long)(_i * ORDERS_PER_GROUP + n) * ORDER_STRIDE) %
            40320ul;

        nth_order(k, order);
        for (int cut = 0; cut <= H_COUNT; cut++)
            close_in_order(order, cut);
    }
}
END_TEST

/* The orders that matter most, whole: creation order (every close but the
 * users' first is refused once) and its reverse (nothing is refused). */
START_TEST(test_close_in_creation_order_and_reverse)
{
    enum handle forward[H_COUNT], backward[H_COUNT];

    for (int i = 0; i < H_COUNT; i++) {
        forward[i] = (enum handle)i;
        backward[i] = (enum handle)(H_COUNT - 1 - i);
    }
    close_in_order(forward, H_COUNT);
    close_in_order(backward, H_COUNT);
}
END_TEST

/* A refused close names what holds the handle and leaves it working. */
START_TEST(test_refusal_names_the_user)
{
    struct handles h;
    uint32_t idx = 0, ridx = 1;
    ferry_req_t *req = NULL;

    open_all(&h);
    TU_EXPECT_ERROR(ferry_mem_close(h.mem), FERRY_EBUSY, "descriptor lists");
    TU_EXPECT_ERROR(ferry_dlist_close(h.local), FERRY_EBUSY,
                    "prepared transfer");
    TU_EXPECT_ERROR(ferry_peer_close(h.peer), FERRY_EBUSY,
                    "ferry_rmem_close them first");
    /* Still usable after the refusals. */
    ck_assert_int_eq(ferry_xfer_post(h.prep, &idx, &ridx, 1, NULL, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 10000), 0);
    ck_assert_int_eq(ferry_req_close(req), 0);
    ck_assert_int_eq(ferry_context_close(h.ctx), 0);
    tu_free_buf(h.buf, LEN);
}
END_TEST

/* Every close takes NULL, and a closed request is told apart. */
START_TEST(test_close_null_and_twice)
{
    struct handles h;

    ck_assert_int_eq(ferry_context_close(NULL), 0);
    ck_assert_int_eq(ferry_mem_close(NULL), 0);
    ck_assert_int_eq(ferry_rmem_close(NULL), 0);
    ck_assert_int_eq(ferry_peer_close(NULL), 0);
    ck_assert_int_eq(ferry_dlist_close(NULL), 0);
    ck_assert_int_eq(ferry_xfer_close(NULL), 0);
    ck_assert_int_eq(ferry_req_close(NULL), 0);
    ck_assert_int_eq(ferry_fanout_close(NULL), 0);
    ck_assert_int_eq(ferry_meta_close(NULL), 0);
    ck_assert_int_eq(ferry_probe_close(NULL), 0);
    ck_assert_int_eq(ferry_topo_close(NULL), 0);
    open_all(&h);
    /* A wrong kind of handle is refused by its magic, not used. */
    TU_EXPECT_ERROR(ferry_meta_close((ferry_meta_t *)(void *)h.ctx),
                    FERRY_EHANDLE, "not a live metadata handle");
    TU_EXPECT_ERROR(ferry_context_close((ferry_context_t *)(void *)h.meta),
                    FERRY_EHANDLE, "not a live ferry context");
    TU_EXPECT_ERROR(ferry_topo_close((ferry_topo_t *)(void *)h.ctx),
                    FERRY_EHANDLE, "not a live topology");
    ck_assert_int_eq(ferry_context_close(h.ctx), 0);
    tu_free_buf(h.buf, LEN);
}
END_TEST

static Suite *close_suite(void)
{
    Suite *s = suite_create("close");
    TCase *tc = tcase_create("ownership");

    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_close_in_every_order, 0, 4);
    tcase_add_test(tc, test_close_in_creation_order_and_reverse);
    tcase_add_test(tc, test_refusal_names_the_user);
    tcase_add_test(tc, test_close_null_and_twice);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(close_suite());
}
