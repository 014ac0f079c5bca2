/*
 * Peer helpers of the liveness suites (peerutil.h).
 */
#include "peerutil.h"

#include <time.h>

const char *state_name(enum ferry_peer_state s)
{
    switch (s) {
    case FERRY_PEER_CONNECTING:
        return "CONNECTING";
    case FERRY_PEER_UP:
        return "UP";
    case FERRY_PEER_UNREACHABLE:
        return "UNREACHABLE";
    case FERRY_PEER_DEAD:
        return "DEAD";
    }
    return "?";
}

void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

enum ferry_peer_state peer_state(ferry_peer_t *peer, char *why, size_t len)
{
    enum ferry_peer_state st = FERRY_PEER_CONNECTING;
    int ret = ferry_peer_state(peer, &st, why, len);

    ck_assert_msg(ret == 0, "ferry_peer_state: %s (%s)", ferry_strerror(ret),
                  ferry_last_error());
    return st;
}

uint64_t await_state(ferry_context_t *ctx, ferry_peer_t *peer,
                     enum ferry_peer_state want, unsigned limit_ms,
                     const char *what)
{
    uint64_t t0 = tu_now_ns();
    char why[256] = "";

    for (;;) {
        int ret = ferry_progress(ctx);
        enum ferry_peer_state st;

        ck_assert_msg(ret >= 0, "%s: ferry_progress failed with %s: %s", what,
                      ferry_strerror(ret), ferry_last_error());
        st = peer_state(peer, why, sizeof(why));
        if (st == want)
            return tu_ms_since(t0);
        ck_assert_msg(tu_ms_since(t0) < limit_ms,
                      "%s: the peer is still %s after %u ms, expected %s "
                      "(\"%s\")",
                      what, state_name(st), limit_ms, state_name(want), why);
        sleep_ms(1);
    }
}

void retry_busy(ferry_context_t *ctx, busy_fn *fn, void *arg, unsigned limit_ms,
                const char *what)
{
    uint64_t t0 = tu_now_ns();
    int ret;

    while ((ret = fn(arg)) == FERRY_EBUSY) {
        ck_assert_msg(tu_ms_since(t0) < limit_ms,
                      "%s still FERRY_EBUSY after %u ms: %s", what, limit_ms,
                      ferry_last_error());
        ck_assert_int_ge(ferry_progress(ctx), 0);
        sleep_ms(1);
    }
    ck_assert_msg(ret == 0, "%s: got %s, expected 0: %s", what,
                  ferry_strerror(ret), ferry_last_error());
}

int rmem_free_fn(void *arg)
{
    return ferry_rmem_close(arg);
}

int deregister_fn(void *arg)
{
    return ferry_mem_close(arg);
}

int peer_remove_fn(void *arg)
{
    return ferry_peer_close(arg);
}

ferry_peer_t *add_peer(ferry_context_t *ctx, const struct tu_child *c)
{
    ferry_peer_t *peer = NULL;
    int ret = ferry_peer_add(ctx, c->addr, c->addr_len, &peer);

    ck_assert_msg(ret == 0, "peer_add of the child: %s (%s)",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_ptr_nonnull(peer);
    return peer;
}

ferry_rmem_t *import_child(ferry_peer_t *peer, const struct tu_child *c,
                           size_t len)
{
    ferry_rmem_t *rmem = NULL;
    int ret = ferry_rmem_import(peer, c->rkey, c->rkey_len, &rmem);

    ck_assert_msg(ret == 0, "import of the child's region: %s (%s)",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rmem), len);
    return rmem;
}

void write_ok(ferry_peer_t *peer, void *buf, ferry_mem_t *lmem,
              ferry_rmem_t *rmem, size_t len, const char *what)
{
    struct ferry_iov iov = {buf, lmem, rmem, 0, len};

    tu_xfer_ok(peer, true, &iov, 1, what);
}

void replaced_open(struct replaced *r, const char *prov, size_t len,
                   uint64_t seed)
{
    r->len = len;
    r->ctx = tu_context(prov);
    r->peer = add_peer(r->ctx, &r->c);
    r->old = import_child(r->peer, &r->c, len);
    r->l = tu_alloc_buf(len);
    r->ml = tu_register(r->ctx, r->l, len, 0);
    tu_fill(r->l, len, seed);
    write_ok(r->peer, r->l, r->ml, r->old, len, "write while the region lives");
    ck_assert(tu_child_verify(&r->c, seed));
    tu_child_reregister(&r->c);
    r->fresh = import_child(r->peer, &r->c, len);
}

void replaced_close(struct replaced *r)
{
    ck_assert_int_eq(ferry_rmem_close(r->old), 0);
    ck_assert_int_eq(ferry_rmem_close(r->fresh), 0);
    ck_assert_int_eq(ferry_mem_close(r->ml), 0);
    ck_assert_int_eq(ferry_peer_close(r->peer), 0);
    ferry_context_close(r->ctx);
    tu_child_stop(&r->c);
    tu_free_buf(r->l, r->len);
}
