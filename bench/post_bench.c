/*
 * post_bench: the cost of ferry_xfer_post for N blocks chosen by index,
 * the yardstick of the Python binding (a Python twin takes the same steps
 * and prints the same line).
 *
 *   post_bench [--blocks N] [--block-size B] [--iters K] [--warmup W]
 *              [--provider P] [--domain D] [--initiator-thread 0|1]
 *
 * Defaults: N 1024 (1 to 1000000), B 4096, K 200, W 20, provider
 * "tcp;ofi_rxm", domain "lo" (--domain "": NULL, the provider's own, as
 * shm needs).  The steps, in this order:
 *
 *   1. Two contexts in this process, each from ferry_config_init with
 *      provider and domain: the target, with progress_thread = 1, then
 *      the initiator, without (its waits drive it) unless
 *      --initiator-thread 1.
 *   2. The target allocates a region of 2*N*B bytes (2N blocks, so that
 *      indices can be chosen), zero-filled, registers it (host memory,
 *      FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ) and exports
 *      its key blob.
 *   3. The initiator adds the target as a peer (ferry_context_address of
 *      the target, ferry_peer_add), imports the blob (ferry_rmem_import),
 *      and registers a local region of the same size, filled with 0x5a
 *      (no remote access).
 *   4. A local list ("local blocks") and a remote list ("remote blocks"),
 *      each one segment of 2N blocks of B bytes from offset 0, stride B;
 *      ferry_xfer_prepare(peer, FERRY_OP_WRITE, local, remote).
 *   5. Indices, as uint32: local_idx[i] = (i * 7) % 2N and
 *      remote_idx[i] = (i * 13 + 5) % 2N for i < N (repeats allowed).
 *   6. W warm-up iterations, then K timed ones.  Each iteration:
 *      ferry_xfer_post(prep, local_idx, remote_idx, N, NULL opts) is
 *      timed alone ("post"); then ferry_req_wait(req, -1) and
 *      ferry_req_close(req); post + wait + free are timed together
 *      ("round").  Clock: CLOCK_MONOTONIC.
 *   7. Teardown: release the prepared transfer, destroy both lists, free
 *      the imported region, deregister the local region, remove the peer,
 *      destroy the initiator, deregister the target's region, destroy the
 *      target.
 *
 * Percentiles are nearest-rank over the K sorted samples: the p-th is
 * sample ceil(p * K / 100) (from 1), so p50 of 200 is the 100th.
 * Human-readable lines go to stderr; stdout gets exactly one line:
 *
 *   post_bench lang=c blocks=N block_size=B iters=K post_p50_us=X
 *   post_p99_us=X round_p50_us=X round_p99_us=X
 *
 * (one line, microseconds with one decimal).  Exit 0; 1 when a ferry call
 * fails (the call, its error and ferry's sentence on stderr); 2 for bad
 * options; --help prints the usage and exits 0.
 */
#include <ferry.h>

#include "benchutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 1000000u
#define MAX_ITERS 1000000u
/* Each of the two regions is allocated and registered in full. */
#define MAX_REGION (4ull << 30)

static size_t opt_blocks = 1024;
static size_t opt_block = 4096;
static size_t opt_iters = 200;
static size_t opt_warmup = 20;
static const char *opt_provider = "tcp;ofi_rxm";
static const char *opt_domain = "lo";
static int opt_initiator_thread;

/* ---- options ------------------------------------------------------------- */

static void usage(FILE *out, int code)
{
    fprintf(out,
            "usage: post_bench [--blocks N (1-%u, default 1024)] "
            "[--block-size B (default 4096)]\n"
            "                  [--iters K (1-%u, default 200)] "
            "[--warmup W (0-%u, default 20)]\n"
            "                  [--provider P (default tcp;ofi_rxm)] "
            "[--domain D (default lo; \"\": the provider's)]\n"
            "                  [--initiator-thread 0|1 (default 0)]\n",
            MAX_BLOCKS, MAX_ITERS, MAX_ITERS);
    exit(code);
}

/* A whole number in [min, max], or a sentence and the usage (exit 2). */
static size_t number(const char *flag, const char *s, unsigned long long min,
                     unsigned long long max)
{
    unsigned long long v;
    char *end;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < min ||
        v > max) {
        fprintf(stderr, "post_bench: %s '%s': give a whole number from %llu "
                        "to %llu\n",
                flag, s, min, max);
        usage(stderr, 2);
    }
    return (size_t)v;
}

static void options(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) { /* an option and its value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            usage(stdout, 0);
        if (v == NULL) {
            fprintf(stderr, "post_bench: %s: unknown, or missing its value\n",
                    a);
            usage(stderr, 2);
        }
        if (strcmp(a, "--blocks") == 0)
            opt_blocks = number(a, v, 1, MAX_BLOCKS);
        else if (strcmp(a, "--block-size") == 0)
            opt_block = number(a, v, 1, MAX_REGION);
        else if (strcmp(a, "--iters") == 0)
            opt_iters = number(a, v, 1, MAX_ITERS);
        else if (strcmp(a, "--warmup") == 0)
            opt_warmup = number(a, v, 0, MAX_ITERS);
        else if (strcmp(a, "--provider") == 0)
            opt_provider = v;
        else if (strcmp(a, "--domain") == 0)
            opt_domain = v;
        else if (strcmp(a, "--initiator-thread") == 0)
            opt_initiator_thread = (int)number(a, v, 0, 1);
        else {
            fprintf(stderr, "post_bench: %s: unknown option\n", a);
            usage(stderr, 2);
        }
    }
    /* blocks <= 1e6 and block size <= 4 GiB: the product fits 64 bits. */
    if (2ull * opt_blocks * opt_block > MAX_REGION ||
        2ull * opt_blocks * opt_block > SIZE_MAX) {
        fprintf(stderr,
                "post_bench: %zu blocks of %zu bytes need two regions of "
                "2 x %zu x %zu = %llu bytes each, above the %llu (4 GiB) "
                "this bench allows: give fewer or smaller blocks\n",
                opt_blocks, opt_block, opt_blocks, opt_block,
                2ull * opt_blocks * opt_block, MAX_REGION);
        exit(2);
    }
}

/* ---- setup --------------------------------------------------------------- */

/* The target has a progress thread (it never calls ferry).  The
 * initiator has none unless --initiator-thread 1: its waits drive it
 * (they poll), and on a 2-core machine a third thread takes the main
 * thread's core at random, which times the scheduler more than the post;
 * with one, the main thread sleeps in its waits and each post starts
 * with cold caches. */
static ferry_context_t *open_context(const char *role, int progress_thread)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;
    int ret;

    if ((ret = ferry_config_init(&cfg)))
        die("ferry_config_init", ret);
    cfg.provider = opt_provider;
    cfg.domain = opt_domain[0] != '\0' ? opt_domain : NULL;
    cfg.progress_thread = progress_thread;
    if ((ret = ferry_context_create(&cfg, &ctx)))
        die("ferry_context_create", ret);
    if ((ret = ferry_context_info(ctx, &info)))
        die("ferry_context_info", ret);
    fprintf(stderr, "post_bench: %s context: %s on %s (%s)\n", role,
            info.provider, info.domain, info.fabric);
    return ctx;
}

/* One segment of 2N blocks of B bytes over mem (local) or rmem (remote). */
static ferry_dlist_t *block_list(ferry_context_t *ctx, ferry_mem_t *mem,
                                 ferry_rmem_t *rmem, const char *name)
{
    struct ferry_dlist_segment seg = {.mem = mem,
                                      .rmem = rmem,
                                      .offset = 0,
                                      .block_size = opt_block,
                                      .count = 2 * opt_blocks,
                                      .stride = opt_block};
    ferry_dlist_t *dl;
    int ret;

    if ((ret = ferry_dlist_create(ctx, mem ? FERRY_DLIST_LOCAL
                                           : FERRY_DLIST_REMOTE,
                                  name, &dl)))
        die("ferry_dlist_create", ret);
    if ((ret = ferry_dlist_add(dl, &seg, NULL)))
        die("ferry_dlist_add", ret);
    return dl;
}

/* ---- statistics ---------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* Nearest rank: sample ceil(p * n / 100) of the sorted ones, in us. */
static double percentile_us(const uint64_t *sorted, size_t n, unsigned p)
{
    size_t rank = (p * n + 99) / 100;

    return (double)sorted[rank > 0 ? rank - 1 : 0] / 1e3;
}

/* ---- main ---------------------------------------------------------------- */

int main(int argc, char **argv)
{
    ferry_context_t *tctx, *ictx;
    ferry_mem_t *tmem, *lmem;
    ferry_rmem_t *rmem;
    ferry_peer_t *peer;
    ferry_dlist_t *local, *remote;
    ferry_prep_t *prep;
    ferry_req_t *req;
    void *addr = NULL, *blob = NULL;
    size_t alen = 0, blen = 0, len, nblocks;
    uint8_t *tbuf, *lbuf;
    uint32_t *local_idx, *remote_idx;
    uint64_t *post_ns, *round_ns;
    int ret;

    options(argc, argv);
    len = 2 * opt_blocks * opt_block;
    nblocks = 2 * opt_blocks;
    fprintf(stderr,
            "post_bench: %zu of %zu blocks of %zu bytes per post, %zu "
            "iterations after %zu warm-up, %s on %s\n",
            opt_blocks, nblocks, opt_block, opt_iters, opt_warmup,
            opt_provider, opt_domain[0] ? opt_domain : "(the provider's)");

    /* 1. Contexts. */
    tctx = open_context("target", 1);
    ictx = open_context("initiator", opt_initiator_thread);

    /* 2. The target's region, registered and exported. */
    tbuf = malloc(len);
    lbuf = malloc(len);
    local_idx = malloc(opt_blocks * sizeof(*local_idx));
    remote_idx = malloc(opt_blocks * sizeof(*remote_idx));
    post_ns = malloc(opt_iters * sizeof(*post_ns));
    round_ns = malloc(opt_iters * sizeof(*round_ns));
    if (tbuf == NULL || lbuf == NULL || local_idx == NULL ||
        remote_idx == NULL || post_ns == NULL || round_ns == NULL)
        die("malloc", FERRY_ENOMEM);
    memset(tbuf, 0, len);
    if ((ret = ferry_mem_register(tctx, tbuf, len, FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_WRITE |
                                      FERRY_ACCESS_REMOTE_READ,
                                  &tmem)))
        die("ferry_mem_register (target)", ret);
    if ((ret = ferry_mem_export(tmem, NULL, &blen)) != FERRY_ENOSPC)
        die("ferry_mem_export (size)", ret);
    if ((blob = malloc(blen)) == NULL)
        die("malloc", FERRY_ENOMEM);
    if ((ret = ferry_mem_export(tmem, blob, &blen)))
        die("ferry_mem_export", ret);

    /* 3. The initiator: the peer, the imported region, its own region. */
    if ((ret = ferry_context_address(tctx, NULL, &alen)) != FERRY_ENOSPC)
        die("ferry_context_address (size)", ret);
    if ((addr = malloc(alen)) == NULL)
        die("malloc", FERRY_ENOMEM);
    if ((ret = ferry_context_address(tctx, addr, &alen)))
        die("ferry_context_address", ret);
    if ((ret = ferry_peer_add(ictx, addr, alen, &peer)))
        die("ferry_peer_add", ret);
    if ((ret = ferry_rmem_import(peer, blob, blen, &rmem)))
        die("ferry_rmem_import", ret);
    memset(lbuf, 0x5a, len);
    if ((ret = ferry_mem_register(ictx, lbuf, len, FERRY_MEM_HOST, 0, 0,
                                  &lmem)))
        die("ferry_mem_register (initiator)", ret);

    /* 4. Lists, prepared once. */
    local = block_list(ictx, lmem, NULL, "local blocks");
    remote = block_list(ictx, NULL, rmem, "remote blocks");
    if ((ret = ferry_xfer_prepare(peer, FERRY_OP_WRITE, local, remote,
                                  &prep)))
        die("ferry_xfer_prepare", ret);

    /* 5. Indices (N <= 1e6: every product fits 32 bits). */
    for (size_t i = 0; i < opt_blocks; i++) {
        local_idx[i] = (uint32_t)((i * 7) % nblocks);
        remote_idx[i] = (uint32_t)((i * 13 + 5) % nblocks);
    }

    /* 6. Warm-up, then the timed iterations. */
    for (size_t it = 0; it < opt_warmup + opt_iters; it++) {
        uint64_t t0, t1, t2;

        t0 = now_ns();
        ret = ferry_xfer_post(prep, local_idx, remote_idx, opt_blocks, NULL,
                              &req);
        t1 = now_ns();
        if (ret)
            die("ferry_xfer_post", ret);
        if ((ret = ferry_req_wait(req, -1)))
            die("ferry_req_wait", ret);
        ferry_req_close(req);
        t2 = now_ns();
        if (it >= opt_warmup) {
            post_ns[it - opt_warmup] = t1 - t0;
            round_ns[it - opt_warmup] = t2 - t0;
        }
    }

    /* 7. Teardown. */
    if ((ret = ferry_xfer_close(prep)))
        die("ferry_xfer_close", ret);
    if ((ret = ferry_dlist_close(local)))
        die("ferry_dlist_close (local)", ret);
    if ((ret = ferry_dlist_close(remote)))
        die("ferry_dlist_close (remote)", ret);
    if ((ret = ferry_rmem_close(rmem)))
        die("ferry_rmem_close", ret);
    if ((ret = ferry_mem_close(lmem)))
        die("ferry_mem_close (initiator)", ret);
    if ((ret = ferry_peer_close(peer)))
        die("ferry_peer_close", ret);
    ferry_context_close(ictx);
    if ((ret = ferry_mem_close(tmem)))
        die("ferry_mem_close (target)", ret);
    ferry_context_close(tctx);

    qsort(post_ns, opt_iters, sizeof(*post_ns), cmp_u64);
    qsort(round_ns, opt_iters, sizeof(*round_ns), cmp_u64);
    fprintf(stderr,
            "post_bench: post p50 %.1f us, p99 %.1f us (%.1f ns/block); "
            "round p50 %.1f us, p99 %.1f us (%.1f MB/s at p50)\n",
            percentile_us(post_ns, opt_iters, 50),
            percentile_us(post_ns, opt_iters, 99),
            percentile_us(post_ns, opt_iters, 50) * 1e3 / (double)opt_blocks,
            percentile_us(round_ns, opt_iters, 50),
            percentile_us(round_ns, opt_iters, 99),
            (double)(opt_blocks * opt_block) /
                percentile_us(round_ns, opt_iters, 50));
    printf("post_bench lang=c blocks=%zu block_size=%zu iters=%zu "
           "post_p50_us=%.1f post_p99_us=%.1f round_p50_us=%.1f "
           "round_p99_us=%.1f\n",
           opt_blocks, opt_block, opt_iters,
           percentile_us(post_ns, opt_iters, 50),
           percentile_us(post_ns, opt_iters, 99),
           percentile_us(round_ns, opt_iters, 50),
           percentile_us(round_ns, opt_iters, 99));

    free(round_ns);
    free(post_ns);
    free(remote_idx);
    free(local_idx);
    free(addr);
    free(blob);
    free(lbuf);
    free(tbuf);
    return 0;
}
