/*
 * rails and striping through the API: how requests spread over two tcp
 * rails of this machine (the ethernet interface and lo), counted by
 * ferry_context_stats, and which rail comes first by the topology.  (The
 * rails' domains, weights, the progress thread's CPUs and CPU lists:
 * test/unit/check_rails.c.)
 */
#include "railsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_large_request_striped)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint64_t r0, r1;

    two_rail_config(&cfg);
    tu_pair_open(&p, TCP, &cfg);
    write_all(&p, 64u << 20, 64u << 20, 11);
    rail_bytes(p.init, &r0, &r1);
    /* Equal weights (tcp reports no link speed): equal halves. */
    ck_assert_uint_eq(r0 + r1, 64u << 20);
    ck_assert_uint_eq(r0, 32u << 20);
    ck_assert_uint_eq(r1, 32u << 20);
    tu_pair_close(&p);
}
END_TEST

/* 8 requests of `len` bytes over two rails: each rail moves 4 of them. */
static void expect_turns(uint32_t len, uint64_t seed)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint64_t r0, r1;

    two_rail_config(&cfg);
    tu_pair_open(&p, TCP, &cfg);
    write_all(&p, 8 * (uint64_t)len, len, seed);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_uint_eq(r0, 4 * (uint64_t)len);
    ck_assert_uint_eq(r1, 4 * (uint64_t)len);
    tu_pair_close(&p);
}

/* Requests of 64 KiB, below the 128 KiB threshold: one rail each,
 * alternating. */
START_TEST(test_small_requests_take_turns)
{
    expect_turns(64u << 10, 12);
}
END_TEST

/* Striped requests that still go as one operation each (512 KiB: above
 * the threshold, below the 1 MiB operation) start on alternate rails. */
START_TEST(test_one_operation_stripes_take_turns)
{
    expect_turns(512u << 10, 13);
}
END_TEST

START_TEST(test_threshold_configurable)
{
    struct ferry_config cfg;
    struct tu_pair p;
    uint64_t r0, r1;

    two_rail_config(&cfg);
    cfg.stripe_threshold = 64u << 20; /* nothing here is that large */
    tu_pair_open(&p, TCP, &cfg);
    write_all(&p, 8u << 20, 8u << 20, 13);
    rail_bytes(p.init, &r0, &r1);
    ck_assert_msg((r0 == 0) != (r1 == 0),
                  "an unstriped request used both rails (%llu, %llu)",
                  (unsigned long long)r0, (unsigned long long)r1);
    tu_pair_close(&p);
}
END_TEST

/* ---- order from the topology (a fake sysfs and a saved topology) ---- */

/*
 * The first rail of a context for GPU `gpu`, checked against the reason:
 * the topology's primary NIC for that GPU must be the first rail's.
 */
static const char *first_rail(struct ferry_config *cfg, int gpu)
{
    static char name[64];
    char primary[96];
    ferry_context_t *ctx;
    int ret;

    cfg->cuda_device = gpu;
    ret = ferry_context_create(cfg, &ctx);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    snprintf(name, sizeof(name), "%s", tu_info(ctx).domain);
    snprintf(primary, sizeof(primary), "rails nearest the GPU: GPU %s: NIC %s",
             gpu == 0 ? "0000:01:03.0" : "0000:06:00.0",
             strcmp(name, "lo") == 0 ? "0000:05:00.0" : "0000:04:00.0");
    ck_assert_msg(strstr(tu_info(ctx).why, primary) != NULL,
                  "first rail %s, but why: %s", name, tu_info(ctx).why);
    ferry_context_close(ctx);
    return name;
}

START_TEST(test_gpu_nics_become_first_rails)
{
    struct ferry_config cfg;
    char gpu0[64];

    two_rail_config(&cfg);
    fake_machine(&cfg);
    /* GPUs 0 and 1 share the host bridge of both NICs: balanced, each
     * gets its own primary, and it becomes the context's first rail,
     * against the rank order (ethernet before lo) for one of them. */
    snprintf(gpu0, sizeof(gpu0), "%s", first_rail(&cfg, 0));
    ck_assert_str_ne(gpu0, first_rail(&cfg, 1));
}
END_TEST

/* A CUDA ordinal is not the topology's index: the driver's PCI address
 * finds the GPU (here the simulated device, placed by FERRY_SIM_PCI at
 * the fixture's GPUs in the reverse order). */
START_TEST(test_cuda_ordinal_found_by_pci)
{
    static const char *const want[] = {
        "CUDA device 0 is 0000:06:00.0; GPU 0000:06:00.0: NIC",
        "CUDA device 1 is 0000:01:03.0; GPU 0000:01:03.0: NIC",
    };
    struct ferry_config cfg;
    ferry_context_t *ctx;

    setenv("FERRY_SIM_PCI", "0000:06:00.0,0000:01:03.0", 1);
    setenv("FERRY_SIM_DEVICES", "2", 1); /* before the backend is chosen */
    two_rail_config(&cfg);
    fake_machine(&cfg);
    for (int d = 0; d < 2; d++) {
        cfg.cuda_device = d;
        ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
        why_says(ctx, want[d]);
        ferry_context_close(ctx);
    }
    setenv("FERRY_SIM_PCI", "0000:99:00.0", 1);
    cfg.cuda_device = 0;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    why_says(ctx, "0000:99:00.0, which the topology lacks");
    ferry_context_close(ctx);
    unsetenv("FERRY_SIM_PCI");
    unsetenv("FERRY_SIM_DEVICES");
}
END_TEST

START_TEST(test_no_topology_answer_keeps_rank)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    two_rail_config(&cfg);
    fake_machine(&cfg);
    /* Host memory with a topology read from a file: the calling thread's
     * node is unknown there, so the rank order stays, and says why. */
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_str_ne(tu_info(ctx).domain, "lo");
    why_says(ctx, "rails in rank order");
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_one_domain_is_left_alone)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    tu_config(&cfg, TCP); /* domain lo: one candidate */
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), 0);
    ck_assert_uint_eq(tu_info(ctx).nrails, 1);
    ck_assert_ptr_null(strstr(tu_info(ctx).why, "rails"));
    ferry_context_close(ctx);
}
END_TEST

/*
 * A fan-out over two rails: source -> receiver 0 -> receiver 1, every
 * context with both rails.  The source and the receiver that forwards
 * stripe their chunks over both, and receiver 1 holds every byte.
 */
START_TEST(test_fanout_uses_both_rails)
{
    enum { N = 2 };
    const size_t len = 8u << 20;
    struct ferry_config cfg;
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    ferry_context_t *src, *rctx[N];
    ferry_peer_t *peers[N];
    ferry_rmem_t *dst[N];
    uint8_t *sbuf = tu_alloc_buf(len), *rbuf[N];
    ferry_mem_t *smem, *rmem[N];
    ferry_fanout_t *f = NULL;
    uint64_t r0, r1;
    int ret;

    two_rail_config(&cfg);
    cfg.progress_thread = 1;
    src = tu_context_cfg(&cfg);
    tu_fill(sbuf, len, 31);
    smem = tu_register(src, sbuf, len, 0);
    for (size_t i = 0; i < N; i++) {
        uint8_t addr[512];
        size_t alen = sizeof(addr);

        rctx[i] = tu_context_cfg(&cfg);
        rbuf[i] = tu_alloc_buf(len);
        rmem[i] = tu_register(rctx[i], rbuf[i], len,
                              RW | FERRY_ACCESS_FANOUT); /* they forward */
        ck_assert_int_eq(ferry_context_address(rctx[i], addr, &alen), 0);
        ck_assert_int_eq(ferry_peer_add(src, addr, alen, &peers[i]), 0);
        dst[i] = tu_share(rmem[i], peers[i]);
    }
    opts.chunk = 1u << 20;
    opts.degree = 1;
    opts.notify_id = 5;
    ck_assert_int_eq(ferry_fanout(smem, 0, len, peers, dst, N, &opts, &f), 0);
    ret = ferry_fanout_wait(f, 30000);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    ferry_fanout_close(f);
    for (size_t i = 0; i < N; i++) {
        ck_assert_int_eq(ferry_counter_wait(rctx[i], 5, 1, 20000), 0);
        tu_assert_pattern(rbuf[i], len, 31, "receiver's region");
    }
    rail_bytes(src, &r0, &r1);
    ck_assert_msg(r0 >= len / 4 && r1 >= len / 4,
                  "source rails posted %llu and %llu bytes",
                  (unsigned long long)r0, (unsigned long long)r1);
    rail_bytes(rctx[0], &r0, &r1);
    ck_assert_msg(r0 >= len / 4 && r1 >= len / 4,
                  "forwarding receiver's rails posted %llu and %llu bytes",
                  (unsigned long long)r0, (unsigned long long)r1);
    for (size_t i = 0; i < N; i++) {
        ferry_context_close(rctx[i]);
        tu_free_buf(rbuf[i], len);
    }
    ferry_context_close(src);
    tu_free_buf(sbuf, len);
}
END_TEST

static Suite *rails_suite(void)
{
    Suite *s = suite_create("rails");
    TCase *tc = tcase_create("striping");

    tcase_add_test(tc, test_large_request_striped);
    tcase_add_test(tc, test_small_requests_take_turns);
    tcase_add_test(tc, test_one_operation_stripes_take_turns);
    tcase_add_test(tc, test_threshold_configurable);
    tcase_add_test(tc, test_fanout_uses_both_rails);
    suite_add_tcase(s, tc);
    tc = tcase_create("order");
    tcase_add_test(tc, test_gpu_nics_become_first_rails);
    tcase_add_test(tc, test_cuda_ordinal_found_by_pci);
    tcase_add_test(tc, test_no_topology_answer_keeps_rank);
    tcase_add_test(tc, test_one_domain_is_left_alone);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return rails_run(rails_suite);
}
