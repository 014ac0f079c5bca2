/*
 * ferry_fanout through the API, with the source and its receivers as
 * contexts of this process on tcp over loopback, each with its progress
 * thread (the receivers' threads do the forwarding): every receiver's
 * bytes are checked against the pattern and its counter must reach 1,
 * for a chain, a tree, sizes that are no multiple of the chunk, one
 * receiver, staged device memory on every side; a receiver that is gone
 * (on tcp and on shm) is reported by index and why while the one behind
 * it still gets everything; receivers in this process that an shm
 * provider lets reach the source one way only are refused up front;
 * bad arguments are refused with
 * sentences that say what to do, and so is a shape in which a region
 * peers may only write would forward, while such regions take a fan-out
 * as leaves.  A fan-out across processes in
 * namespaces with rate-limited links: bench/fanout_netns.sh.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP tu_tcp()
#define MAX_RECV 8
#define DONE_ID 77
#define SEED 0xfa11
/* A region that receives a fan-out and may forward it (docs/semantics.md:
 * only a region its peers may read forwards), and one that may not. */
#define FORWARDER                                                             \
    (FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |                   \
     FERRY_ACCESS_FANOUT)
#define LEAF (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_FANOUT)

struct receiver {
    ferry_context_t *ctx;
    void *buf;
    ferry_mem_t *mem;
    ferry_peer_t *peer; /* the source's handle for it */
    ferry_rmem_t *rmem; /* the source's import of its region */
};

struct fan_fx {
    ferry_context_t *src;
    void *buf;
    ferry_mem_t *mem;
    size_t len;
    size_t n;
    struct receiver r[MAX_RECV];
    ferry_peer_t *peers[MAX_RECV];
    ferry_rmem_t *dst[MAX_RECV];
};

/* Liveness of the next fixture's contexts: off, unless a test loses a
 * receiver on purpose (then long enough that a slow sanitizer build does
 * not lose the live ones too). */
static unsigned fx_liveness_ms;
/* The provider of the next fixture's contexts; NULL: TCP. */
static const char *fx_provider;

static void config(struct ferry_config *cfg)
{
    tu_config(cfg, fx_provider != NULL ? fx_provider : TCP);
    cfg->progress_thread = 1;
    cfg->liveness_ms = fx_liveness_ms;
}

static void receiver_open(struct fan_fx *fx, struct receiver *r,
                          unsigned access)
{
    struct ferry_config cfg;
    uint8_t addr[512];
    size_t alen = sizeof(addr);

    config(&cfg);
    r->ctx = tu_context_cfg(&cfg);
    r->buf = tu_alloc_buf(fx->len);
    memset(r->buf, 0, fx->len);
    r->mem = tu_register(r->ctx, r->buf, fx->len, access);
    ck_assert_int_eq(ferry_context_address(r->ctx, addr, &alen), 0);
    ck_assert_msg(ferry_peer_add(fx->src, addr, alen, &r->peer) == 0, "%s",
                  ferry_last_error());
    r->rmem = tu_share(r->mem, r->peer);
}

/* The source and n receivers whose regions grant `access`. */
static void fx_open_as(struct fan_fx *fx, size_t n, size_t len,
                       unsigned access)
{
    struct ferry_config cfg;

    memset(fx, 0, sizeof(*fx));
    fx->n = n;
    fx->len = len;
    config(&cfg);
    fx->src = tu_context_cfg(&cfg);
    fx->buf = tu_alloc_buf(len);
    tu_fill(fx->buf, len, SEED);
    fx->mem = tu_register(fx->src, fx->buf, len, 0);
    for (size_t i = 0; i < n; i++) {
        receiver_open(fx, &fx->r[i], access);
        fx->peers[i] = fx->r[i].peer;
        fx->dst[i] = fx->r[i].rmem;
    }
}

static void fx_open(struct fan_fx *fx, size_t n, size_t len)
{
    fx_open_as(fx, n, len, FORWARDER);
}

static void receiver_close(struct fan_fx *fx, struct receiver *r)
{
    if (r->ctx == NULL)
        return;
    ferry_context_close(r->ctx);
    tu_free_buf(r->buf, fx->len);
    r->ctx = NULL;
}

static void fx_close(struct fan_fx *fx)
{
    for (size_t i = 0; i < fx->n; i++)
        receiver_close(fx, &fx->r[i]);
    ferry_context_close(fx->src);
    tu_free_buf(fx->buf, fx->len);
}

/* Receiver i counted the fan-out and holds the source's bytes. */
static void assert_received(struct fan_fx *fx, size_t i)
{
    int ret = ferry_counter_wait(fx->r[i].ctx, DONE_ID, 1, 20000);

    ck_assert_msg(ret == 0, "receiver %zu: %s", i, ferry_last_error());
    tu_assert_pattern(fx->r[i].buf, fx->len, SEED, "receiver's region");
}

static uint64_t bytes_posted(ferry_context_t *ctx)
{
    struct ferry_stats st = tu_stats(ctx);
    uint64_t sum = 0;

    for (size_t i = 0; i < 8; i++)
        sum += st.bytes_posted[i];
    return sum;
}

/*
 * Node x (0 the source, i + 1 receiver i) of a tree of degree d wrote
 * the data once per child, and its plan (a few hundred bytes) to each:
 * the receivers forward, the source does not write every copy itself.
 */
static void assert_copies(struct fan_fx *fx, unsigned degree)
{
    for (size_t x = 0; x <= fx->n; x++) {
        ferry_context_t *ctx = x == 0 ? fx->src : fx->r[x - 1].ctx;
        uint64_t kids = 0, posted = bytes_posted(ctx);

        for (size_t j = 1; j <= fx->n; j++)
            kids += (j - 1) / degree == x;
        ck_assert_msg(posted >= kids * fx->len &&
                          posted <= kids * (fx->len + 4096),
                      "node %zu posted %llu bytes for %llu children of %zu",
                      x, (unsigned long long)posted,
                      (unsigned long long)kids, fx->len);
    }
}

static void fan_ok(struct fan_fx *fx, size_t chunk, unsigned degree)
{
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    ferry_fanout_t *f = NULL;
    uint64_t done = 0, total = 0, before = 0;
    int ret;

    opts.chunk = chunk;
    opts.degree = degree;
    opts.notify_id = DONE_ID;
    ret = ferry_fanout(fx->mem, 0, fx->len, fx->peers, fx->dst, fx->n,
                       &opts, &f);
    ck_assert_msg(ret == 0, "ferry_fanout: %s", ferry_last_error());
    /* Its progress only grows, up to the whole once it ended. */
    while ((ret = ferry_fanout_wait(f, 1)) == FERRY_EAGAIN) {
        ck_assert_int_eq(ferry_fanout_progress(f, &done, &total), 0);
        ck_assert_uint_eq(total, fx->len);
        ck_assert_uint_le(done, total);
        ck_assert_uint_ge(done, before);
        before = done;
    }
    ck_assert_msg(ret == 0, "ferry_fanout_wait: %s", ferry_last_error());
    ck_assert_int_eq(ferry_fanout_progress(f, &done, &total), 0);
    ck_assert_uint_eq(done, fx->len);
    ck_assert_uint_eq(total, fx->len);
    TU_EXPECT_ERROR(ferry_fanout_progress(f, NULL, &total), FERRY_EINVAL,
                    "done or total is NULL");
    ck_assert_uint_eq(ferry_fanout_missing(f, NULL, 0), 0);
    ferry_fanout_close(f);
    for (size_t i = 0; i < fx->n; i++)
        assert_received(fx, i);
}

START_TEST(chain_of_three)
{
    struct fan_fx fx;

    fx_open(&fx, 3, 4 * MiB);
    fan_ok(&fx, 256 * KiB, 1);
    assert_copies(&fx, 1);
    fx_close(&fx);
}
END_TEST

/* Five receivers in a binary tree; the last chunk is short. */
START_TEST(tree_odd_size)
{
    struct fan_fx fx;

    fx_open(&fx, 5, MiB + 12345);
    fan_ok(&fx, 64 * KiB, 2);
    assert_copies(&fx, 2);
    fx_close(&fx);
}
END_TEST

/* One receiver, fewer bytes than any chunk ferry would pick. */
START_TEST(one_receiver_small)
{
    struct fan_fx fx;

    fx_open(&fx, 1, 100);
    fan_ok(&fx, 0, 0);
    fx_close(&fx);
}
END_TEST

/*
 * ferry's own choice of shape (tcp reports no link speed: 10 Gbit/s is
 * assumed): 4 MiB to three receivers is cheaper as a chain (the source
 * sends one copy), 64 KiB to four as a fan of degree 4 (the hops would
 * cost more than the bytes: the source sends all four).
 */
START_TEST(shape_chosen_by_size)
{
    struct fan_fx fx;

    fx_open(&fx, 3, 4 * MiB);
    fan_ok(&fx, 0, 0);
    assert_copies(&fx, 1);
    fx_close(&fx);
    fx_open(&fx, 4, 64 * KiB);
    fan_ok(&fx, 0, 0);
    assert_copies(&fx, 4);
    fx_close(&fx);
}
END_TEST

/* The same regions take a second fan-out (a new plan, new data). */
START_TEST(twice_over_the_same_regions)
{
    struct fan_fx fx;

    fx_open(&fx, 2, 2 * MiB);
    fan_ok(&fx, 128 * KiB, 1);
    for (size_t i = 0; i < fx.n; i++) {
        ck_assert_int_eq(ferry_counter_reset(fx.r[i].ctx, DONE_ID), 0);
        memset(fx.r[i].buf, 0, fx.len);
    }
    fan_ok(&fx, 128 * KiB, 1);
    fx_close(&fx);
}
END_TEST

/* A chain of the fixture's receivers, 256 KiB chunks, started. */
/* Whether ctx's libfabric connects two shm endpoints of one process one
 * way only (its shm provider from 2.5 on: docs/compatibility.md). */
static bool one_way_shm(ferry_context_t *ctx)
{
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;

    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    return info.fi_version >= ((2u << 16) | 5u);
}

/* A fan-out to receivers that could never reach the source back is
 * refused before it starts, with a sentence that says why. */
static void assert_one_way_refused(struct fan_fx *fx)
{
    ferry_fanout_t *f = NULL;

    TU_EXPECT_ERROR(ferry_fanout(fx->mem, 0, fx->len, fx->peers, fx->dst,
                                 fx->n, NULL, &f),
                    FERRY_ENOTSUP, "receiver 0 is a context of this process");
    tu_assert_sentence("both ways", "FERRY_PROVIDER=tcp", NULL);
    ck_assert_ptr_null(f);
}

static ferry_fanout_t *start_chain(struct fan_fx *fx)
{
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    ferry_fanout_t *f = NULL;

    opts.chunk = 256 * KiB;
    opts.degree = 1;
    opts.notify_id = DONE_ID;
    ck_assert_msg(ferry_fanout(fx->mem, 0, fx->len, fx->peers, fx->dst,
                               fx->n, &opts, &f) == 0,
                  "ferry_fanout: %s", ferry_last_error());
    return f;
}

/*
 * Source -> 0 -> 1 -> 2, and receiver 0 or 1 is gone before the data
 * comes: it is reported missing by index and why, and the other two
 * still get everything (the source takes 1 over; 0 takes 2 over).  On
 * tcp and on shm, where the closed context is known at once and the
 * source's first write to it is what fails.
 */
START_TEST(middle_receiver_gone)
{
    size_t gone = (size_t)_i % 2, kept[2] = {gone == 0 ? 1 : 0, 2};
    struct fan_fx fx;
    ferry_fanout_t *f;
    size_t missing[MAX_RECV];
    char lost[32];
    int ret;

    fx_liveness_ms = 3000;
    fx_provider = _i < 2 ? TCP : "shm";
    fx_open(&fx, 3, 2 * MiB);
    fx_provider = TCP;
    if (_i >= 2 && one_way_shm(fx.src)) {
        assert_one_way_refused(&fx);
        fx_close(&fx);
        return;
    }
    receiver_close(&fx, &fx.r[gone]);
    f = start_chain(&fx);
    ret = ferry_fanout_wait(f, 30000);
    ck_assert_msg(ret == FERRY_EPEERDEAD, "wait: %d %s", ret,
                  ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "died without the data") != NULL,
                  "%s", ferry_last_error());
    snprintf(lost, sizeof(lost), "%zu (", gone);
    ck_assert_msg(strstr(ferry_last_error(), lost) != NULL &&
                      strstr(ferry_last_error(), "context was closed") != NULL,
                  "the reason is missing: %s", ferry_last_error());
    ck_assert_uint_eq(ferry_fanout_missing(f, missing, MAX_RECV), 1);
    ck_assert_uint_eq(missing[0], gone);
    {
        /* Ended without one receiver: its progress stays within its
         * total. */
        uint64_t done = 0, total = 0;

        ck_assert_int_eq(ferry_fanout_progress(f, &done, &total), 0);
        ck_assert_uint_eq(total, 2 * MiB);
        ck_assert_uint_le(done, total);
    }
    ferry_fanout_close(f);
    assert_received(&fx, kept[0]);
    assert_received(&fx, kept[1]);
    fx_close(&fx);
}
END_TEST

/*
 * Receivers that are contexts of this process on an shm that connects
 * two of its endpoints one way only: refused up front, where they would
 * otherwise wait out the deadline without a word (the fault forced, so
 * that the rule is tested on every libfabric).
 */
START_TEST(one_way_shm_refused)
{
    struct fan_fx fx;

    setenv("FERRY_SHM_LOOP_FAULT", "1", 1);
    fx_provider = "shm";
    fx_open(&fx, 2, 64 * KiB);
    fx_provider = TCP;
    unsetenv("FERRY_SHM_LOOP_FAULT");
    assert_one_way_refused(&fx);
    fx_close(&fx);
}
END_TEST

/*
 * Receiver 0 of a chain goes away while the data flows: whatever it had
 * forwarded by then, receiver 1 ends up with everything, and the result
 * names receiver 0 only if it had not got everything itself.
 */
START_TEST(middle_receiver_dies_midway)
{
    struct fan_fx fx;
    ferry_fanout_t *f;
    size_t missing[MAX_RECV];
    int ret;

    fx_liveness_ms = 3000;
    fx_open(&fx, 2, 32 * MiB);
    f = start_chain(&fx);
    receiver_close(&fx, &fx.r[0]);
    ret = ferry_fanout_wait(f, 30000);
    ck_assert_msg(ret == 0 || ret == FERRY_EPEERDEAD, "wait: %d %s", ret,
                  ferry_last_error());
    if (ret == FERRY_EPEERDEAD) {
        ck_assert_uint_eq(ferry_fanout_missing(f, missing, MAX_RECV), 1);
        ck_assert_uint_eq(missing[0], 0);
    }
    ferry_fanout_close(f);
    assert_received(&fx, 1);
    fx_close(&fx);
}
END_TEST

/*
 * Device memory on every side (the simulated device: tcp cannot register
 * it, so it is staged through host buffers): the source's region and the
 * receivers' are device memory, and each receiver forwards from its own.
 */
START_TEST(staged_device_memory)
{
    enum { N = 3 };
    const size_t len = 3 * MiB + 4096;
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    struct fan_fx fx;
    void *dev[N + 1];
    uint8_t *host = tu_alloc_buf(len);
    ferry_fanout_t *f = NULL;
    int ret;

    setenv("FERRY_SIM_DEVICES", "2", 1);
    fx_open(&fx, N, len);
    tu_fill(host, len, SEED);
    ck_assert_int_eq(ferry_device_alloc(0, len, &dev[0]), 0);
    ck_assert_int_eq(ferry_device_copy(dev[0], host, len), 0);
    ck_assert_int_eq(ferry_mem_close(fx.mem), 0);
    ck_assert_int_eq(ferry_mem_register(fx.src, dev[0], len, FERRY_MEM_CUDA,
                                        0, 0, &fx.mem),
                     0);
    ck_assert_str_eq(ferry_mem_path(fx.mem), "cuda staged");
    for (size_t i = 0; i < N; i++) {
        struct receiver *r = &fx.r[i];

        ck_assert_int_eq(ferry_device_alloc(1, len, &dev[i + 1]), 0);
        ck_assert_int_eq(ferry_mem_close(r->mem), 0);
        ck_assert_int_eq(ferry_rmem_close(r->rmem), 0);
        ck_assert_int_eq(ferry_mem_register(r->ctx, dev[i + 1], len,
                                            FERRY_MEM_CUDA, 1, FORWARDER,
                                            &r->mem),
                         0);
        r->rmem = fx.dst[i] = tu_share(r->mem, r->peer);
    }
    opts.chunk = 512 * KiB;
    opts.degree = 1;
    opts.notify_id = DONE_ID;
    ck_assert_int_eq(ferry_fanout(fx.mem, 0, len, fx.peers, fx.dst, N, &opts,
                                  &f),
                     0);
    ret = ferry_fanout_wait(f, 30000);
    ck_assert_msg(ret == 0, "wait: %s", ferry_last_error());
    ferry_fanout_close(f);
    for (size_t i = 0; i < N; i++) {
        ck_assert_int_eq(ferry_counter_wait(fx.r[i].ctx, DONE_ID, 1, 20000),
                         0);
        memset(host, 0, len);
        ck_assert_int_eq(ferry_device_copy(host, dev[i + 1], len), 0);
        tu_assert_pattern(host, len, SEED, "receiver's device memory");
    }
    fx_close(&fx);
    for (size_t i = 0; i <= N; i++)
        ck_assert_int_eq(ferry_device_free(dev[i]), 0);
    tu_free_buf(host, len);
}
END_TEST

static void assert_refused(struct fan_fx *fx, uint64_t offset, size_t len,
                           const struct ferry_fanout_opts *opts,
                           const char *words)
{
    ferry_fanout_t *f = NULL;
    int ret = ferry_fanout(fx->mem, offset, len, fx->peers, fx->dst, fx->n,
                           opts, &f);

    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(ferry_last_error(), words) != NULL,
                  "'%s' lacks '%s'", ferry_last_error(), words);
}

START_TEST(bad_arguments)
{
    struct fan_fx fx;
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    struct ferry_xfer_opts xo = FERRY_XFER_OPTS_INIT;
    struct receiver plain;
    ferry_mem_t *mem;
    ferry_req_t *req = NULL;

    fx_open(&fx, 1, MiB);
    assert_refused(&fx, 0, 0, NULL, "len is 0");
    assert_refused(&fx, 4096, fx.len, NULL, "runs past the source region");
    opts.notify_id = FERRY_NOTIFY_ID_RESERVED + 5;
    assert_refused(&fx, 0, fx.len, &opts, "one of ferry's own");
    /* A receiver whose region has no inbox, and one too small. */
    receiver_open(&fx, &plain, FERRY_ACCESS_REMOTE_WRITE);
    fx.dst[0] = plain.rmem;
    fx.peers[0] = plain.peer;
    assert_refused(&fx, 0, fx.len, NULL, "FERRY_ACCESS_FANOUT");
    fx.dst[0] = fx.r[0].rmem;
    fx.peers[0] = plain.peer;
    ck_assert_int_eq(ferry_fanout(fx.mem, 0, fx.len, fx.peers, fx.dst, 1,
                                  NULL, &(ferry_fanout_t *){NULL}),
                     FERRY_EHANDLE);
    fx.peers[0] = fx.r[0].peer;
    receiver_close(&fx, &plain);
    /* FANOUT without REMOTE_WRITE, and the reserved ids in plain calls. */
    ck_assert_int_eq(ferry_mem_register(fx.src, fx.buf, fx.len,
                                        FERRY_MEM_HOST, 0,
                                        FERRY_ACCESS_FANOUT, &mem),
                     FERRY_EINVAL);
    ck_assert_msg(strstr(ferry_last_error(), "add FERRY_ACCESS_REMOTE_WRITE"),
                  "%s", ferry_last_error());
    xo.flags = FERRY_XFER_NOTIFY;
    xo.notify_id = FERRY_NOTIFY_ID_RESERVED;
    ck_assert_int_eq(ferry_write(fx.peers[0],
                                 &(struct ferry_iov){.local = fx.buf,
                                                     .lmem = fx.mem,
                                                     .rmem = fx.dst[0],
                                                     .len = 8},
                                 1, &xo, &req),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry_notify_send(fx.peers[0], FERRY_NOTIFY_ID_RESERVED,
                                       1, NULL, &req),
                     FERRY_EINVAL);
    ck_assert_msg(strstr(ferry_last_error(), "use an id below"), "%s",
                  ferry_last_error());
    fx_close(&fx);
}
END_TEST

/*
 * Regions peers may write but not read take fan-outs as leaves only: a
 * chain through them is refused, naming the first receiver that would
 * forward and both ways out; a fan in which the source writes to each of
 * them works.
 */
START_TEST(write_only_regions_are_leaves)
{
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    struct fan_fx fx;

    fx_open_as(&fx, 3, MiB, LEAF);
    opts.degree = 1;
    assert_refused(&fx, 0, fx.len, &opts, "receiver 0 forwards");
    tu_assert_sentence("does not grant FERRY_ACCESS_REMOTE_READ",
                       "register the receivers with FERRY_ACCESS_REMOTE_READ",
                       "set opts.degree to 3", NULL);
    opts.degree = 2;
    assert_refused(&fx, 0, fx.len, &opts, "with degree 2, receiver 0");
    fan_ok(&fx, 256 * KiB, 3);
    assert_copies(&fx, 3);
    fx_close(&fx);
}
END_TEST

/* A region too small for the data is refused naming the receiver. */
START_TEST(region_too_small)
{
    struct fan_fx fx;
    struct fan_fx big;

    fx_open(&fx, 2, 64 * KiB);
    fx_open(&big, 1, MiB);
    /* big's source fans MiB out to fx's receivers' 64 KiB regions. */
    for (size_t i = 0; i < fx.n; i++) {
        uint8_t addr[512], blob[1024];
        size_t alen = sizeof(addr), blen = sizeof(blob);

        ck_assert_int_eq(ferry_context_address(fx.r[i].ctx, addr, &alen), 0);
        ck_assert_int_eq(ferry_peer_add(big.src, addr, alen, &big.peers[i]),
                         0);
        ck_assert_int_eq(ferry_mem_export(fx.r[i].mem, blob, &blen), 0);
        ck_assert_int_eq(ferry_rmem_import(big.peers[i], blob, blen,
                                           &big.dst[i]),
                         0);
    }
    ck_assert_int_eq(ferry_fanout(big.mem, 0, big.len, big.peers, big.dst,
                                  2, NULL, &(ferry_fanout_t *){NULL}),
                     FERRY_EINVAL);
    ck_assert_msg(strstr(ferry_last_error(), "receiver 0's region is 65536 "
                                             "bytes"),
                  "%s", ferry_last_error());
    fx_close(&big);
    fx_close(&fx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fanout");

    tu_clear_ferry_env();
    tcase_add_test(tu_tcase(s, "chain", 60), chain_of_three);
    tcase_add_test(tu_tcase(s, "tree", 60), tree_odd_size);
    tcase_add_test(tu_tcase(s, "one", 60), one_receiver_small);
    tcase_add_test(tu_tcase(s, "shape", 60), shape_chosen_by_size);
    tcase_add_test(tu_tcase(s, "twice", 60), twice_over_the_same_regions);
    tcase_add_loop_test(tu_tcase(s, "gone", 90), middle_receiver_gone, 0, 4);
    tcase_add_test(tu_tcase(s, "one_way", 30), one_way_shm_refused);
    tcase_add_test(tu_tcase(s, "dies", 90), middle_receiver_dies_midway);
    tcase_add_test(tu_tcase(s, "device", 60), staged_device_memory);
    tcase_add_test(tu_tcase(s, "bad", 60), bad_arguments);
    tcase_add_test(tu_tcase(s, "small", 60), region_too_small);
    tcase_add_test(tu_tcase(s, "leaves", 60), write_only_regions_are_leaves);
    return tu_run(s);
}
