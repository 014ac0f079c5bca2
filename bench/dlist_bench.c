/*
 * dlist_bench: the CPU cost of describing, preparing and posting block
 * descriptors through prepared lists.
 *
 *   dlist_bench [--blocks N] [--block-size B] [--provider P]
 *               [--patterns R]
 *
 * Measures, for N blocks (default 1M) of B bytes (default 64):
 *   - describing them as one paged segment, and as N explicit entries
 *   - ferry_xfer_prepare of local and remote lists
 *   - the ferry_xfer_post call for all N pairs (index checks, copy, the
 *     first operations handed to the provider)
 *   - posting and completing all N writes into a target process
 * and prints nanoseconds per descriptor for each.  The target is a second
 * process on this host, met through the embedded bootstrap
 * (ferry_meta_open of bootstrap://, whose hub the target is; shm by
 * default).
 *
 * --patterns R instead moves all N blocks R times (after 3 unmeasured)
 * in each of three ways: a prepared post of sorted indices (neighbouring
 * blocks: ferry merges them into operations of up to max_msg_size), one
 * of the same indices shuffled, and one ferry_write of a single iov over
 * the whole region; and prints, for each, the operations handed to the
 * provider per request (ferry_stats.rma_ops_posted; "n/a" from a library
 * without the counter) and GB/s.
 */
#include <ferry.h>

#include "benchutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t opt_blocks = 1u << 20;
static size_t opt_block = 64;
static const char *opt_provider = "shm";
static size_t opt_patterns; /* repetitions; 0: the descriptor costs */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static ferry_context_t *open_context(bool progress_thread)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    int ret;

    ferry_config_init(&cfg);
    cfg.provider = opt_provider;
    if (strstr(opt_provider, "tcp") != NULL)
        cfg.domain = "lo";
    cfg.local_only = 1;
    cfg.timeout_ms = 0;
    cfg.progress_thread = progress_thread;
    if ((ret = ferry_context_create(&cfg, &ctx)))
        die("ferry_context_create", ret);
    return ctx;
}

/* The pipe from the target carries the bootstrap's URL in this many bytes. */
#define URL_MAX 1024

static int run_target(int report_fd, size_t len)
{
    ferry_context_t *ctx = open_context(true);
    ferry_mem_t *mem;
    ferry_meta_t *meta;
    void *buf = calloc(1, len);
    char url[URL_MAX] = "";
    int ret;

    if (buf == NULL)
        die("calloc", FERRY_ENOMEM);
    if ((ret = ferry_mem_register(ctx, buf, len, FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_WRITE, &mem)) ||
        (ret = ferry_meta_open(ctx, "bootstrap://127.0.0.1:0", "target",
                               &meta)) ||
        (ret = ferry_meta_publish(meta, "blocks", mem)))
        die("target setup", ret);
    /* The hub's URL names the port it got. */
    snprintf(url, sizeof(url), "%s", ferry_meta_url(meta));
    if (write(report_fd, url, sizeof(url)) != sizeof(url))
        return 1;
    /* The initiator says it is done with a notification. */
    ret = ferry_counter_wait(ctx, 1, 1, -1);
    ferry_meta_close(meta);
    ferry_context_close(ctx);
    free(buf);
    return ret == 0 ? 0 : 1;
}

static void report(const char *what, double seconds)
{
    printf("  %-46s %8.1f ns/descriptor  (%.3f s)\n", what,
           seconds * 1e9 / (double)opt_blocks, seconds);
}

static ferry_dlist_t *paged_list(ferry_context_t *ctx, ferry_mem_t *mem,
                                 ferry_rmem_t *rmem, const char *name)
{
    struct ferry_dlist_segment seg = {.mem = mem,
                                      .rmem = rmem,
                                      .block_size = opt_block,
                                      .count = opt_blocks,
                                      .stride = opt_block};
    ferry_dlist_t *dl;
    int ret;

    if ((ret = ferry_dlist_create(ctx, mem ? FERRY_DLIST_LOCAL
                                           : FERRY_DLIST_REMOTE,
                                  name, &dl)) ||
        (ret = ferry_dlist_add(dl, &seg, NULL)))
        die("building a paged list", ret);
    return dl;
}

/* Operations the context handed to its provider so far. */
static uint64_t ops_posted(ferry_context_t *ctx)
{
    struct ferry_stats st = FERRY_STATS_INIT;
    int ret;

    if ((ret = ferry_context_stats(ctx, &st)))
        die("ferry_context_stats", ret);
    return st.rma_ops_posted[0];
}

enum pattern { SORTED, SHUFFLED, ONE_IOV };

/* Moves every block once, the pattern's way, and waits. */
static void move_blocks(ferry_prep_t *prep, ferry_peer_t *peer,
                        const uint32_t *idx, enum pattern p,
                        struct ferry_iov *whole)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_req_t *req;
    int ret;

    opts.timeout_ms = -1;
    ret = p == ONE_IOV ? ferry_write(peer, whole, 1, &opts, &req)
                       : ferry_xfer_post(prep, idx, idx, opt_blocks, &opts,
                                         &req);
    if (ret || (ret = ferry_req_wait(req, -1)))
        die("moving the blocks", ret);
    ferry_req_close(req);
}

static void run_patterns(ferry_context_t *ctx, ferry_prep_t *prep,
                         ferry_peer_t *peer, ferry_mem_t *mem,
                         ferry_rmem_t *rmem, uint8_t *buf, uint32_t *sorted)
{
    static const char *const names[] = {
        "prepared, sorted indices", "prepared, shuffled indices",
        "one iov over the region"};
    struct ferry_iov whole = {buf, mem, rmem, 0, opt_blocks * opt_block};
    uint32_t *shuffled = malloc(opt_blocks * sizeof(*shuffled));
    uint64_t seed = 0x9e3779b97f4a7c15u;

    if (shuffled == NULL)
        die("malloc", FERRY_ENOMEM);
    memcpy(shuffled, sorted, opt_blocks * sizeof(*shuffled));
    for (size_t i = opt_blocks - 1; i > 0; i--) { /* Fisher-Yates */
        size_t j;
        uint32_t t;

        seed = seed * 6364136223846793005u + 1442695040888963407u;
        j = (size_t)((seed >> 33) % (i + 1));
        t = shuffled[i], shuffled[i] = shuffled[j], shuffled[j] = t;
    }
    for (enum pattern p = SORTED; p <= ONE_IOV; p++) {
        const uint32_t *idx = p == SHUFFLED ? shuffled : sorted;
        uint64_t ops;
        double t;
        char per[32];

        for (int w = 0; w < 3; w++)
            move_blocks(prep, peer, idx, p, &whole);
        ops = ops_posted(ctx);
        t = now_s();
        for (size_t r = 0; r < opt_patterns; r++)
            move_blocks(prep, peer, idx, p, &whole);
        t = now_s() - t;
        ops = ops_posted(ctx) - ops;
        if (ops == 0)
            snprintf(per, sizeof(per), "n/a");
        else
            snprintf(per, sizeof(per), "%.1f", (double)ops / opt_patterns);
        printf("  %-28s %8s ops/request %8.2f GB/s %9.1f us/request\n",
               names[p], per,
               (double)(opt_blocks * opt_block) * opt_patterns / t / 1e9,
               t * 1e6 / opt_patterns);
    }
    free(shuffled);
}

/* The ferry_xfer_post call for every block, then its writes to the end. */
static void run_post_costs(ferry_prep_t *prep, const uint32_t *idx)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_req_t *req;
    double t, c;
    int ret;

    opts.timeout_ms = -1;
    c = cpu_s();
    t = now_s();
    if ((ret = ferry_xfer_post(prep, idx, idx, opt_blocks, &opts, &req)))
        die("ferry_xfer_post", ret);
    report("post call (index checks, copy, first ops)", now_s() - t);
    if ((ret = ferry_req_wait(req, -1)))
        die("waiting for the writes", ret);
    t = now_s() - t;
    c = cpu_s() - c;
    report("post and complete every write (wall)", t);
    report("post and complete every write (CPU)", c);
    printf("  %.2f M descriptors/s end to end\n",
           (double)opt_blocks / t / 1e6);
    ferry_req_close(req);
}

static void run_initiator(const char *url)
{
    size_t len = opt_blocks * opt_block;
    ferry_context_t *ctx = open_context(false);
    ferry_dlist_t *local, *remote, *explicit_list;
    ferry_meta_t *meta;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_prep_t *prep;
    ferry_mem_t *mem;
    ferry_req_t *req;
    uint32_t *idx = malloc(opt_blocks * sizeof(*idx));
    uint8_t *buf = malloc(len);
    double t;
    int ret;

    if (idx == NULL || buf == NULL)
        die("malloc", FERRY_ENOMEM);
    memset(buf, 0x5a, len);
    for (size_t i = 0; i < opt_blocks; i++)
        idx[i] = (uint32_t)i;
    if ((ret = ferry_mem_register(ctx, buf, len, FERRY_MEM_HOST, 0, 0,
                                  &mem)) ||
        (ret = ferry_meta_open(ctx, url, "initiator", &meta)) ||
        (ret = ferry_meta_lookup(meta, "target", "blocks", 10000, &rmem)) ||
        (ret = ferry_meta_peer(meta, "target", 0, &peer)))
        die("initiator setup", ret);

    printf("dlist_bench: %zu blocks of %zu bytes, provider %s\n", opt_blocks,
           opt_block, opt_provider);
    t = now_s();
    local = paged_list(ctx, mem, NULL, "local blocks");
    remote = paged_list(ctx, NULL, rmem, "remote blocks");
    report("describe (two paged lists, one segment each)", now_s() - t);

    t = now_s();
    if ((ret = ferry_dlist_create(ctx, FERRY_DLIST_LOCAL, "explicit",
                                  &explicit_list)))
        die("ferry_dlist_create", ret);
    for (size_t i = 0; i < opt_blocks; i++) {
        struct ferry_dlist_segment seg = {.mem = mem,
                                          .offset = i * opt_block,
                                          .block_size = opt_block,
                                          .count = 1};
        if ((ret = ferry_dlist_add(explicit_list, &seg, NULL)))
            die("ferry_dlist_add", ret);
    }
    report("describe (one list of explicit entries)", now_s() - t);
    ferry_dlist_close(explicit_list);

    t = now_s();
    if ((ret = ferry_xfer_prepare(peer, FERRY_OP_WRITE, local, remote,
                                  &prep)))
        die("ferry_xfer_prepare", ret);
    report("prepare (validate both lists)", now_s() - t);

    if (opt_patterns > 0)
        run_patterns(ctx, prep, peer, mem, rmem, buf, idx);
    else
        run_post_costs(prep, idx);
    if ((ret = ferry_notify_send(peer, 1, 1, NULL, &req)) ||
        (ret = ferry_req_wait(req, 10000)))
        die("telling the target to stop", ret);
    ferry_req_close(req);
    ferry_xfer_close(prep);
    ferry_dlist_close(local);
    ferry_dlist_close(remote);
    ferry_meta_close(meta);
    ferry_context_close(ctx);
    free(buf);
    free(idx);
}

static size_t parse_count(const char *flag, const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : 0;

    if (shift)
        end++;
    if (end == s || *end != '\0' || v == 0 || v > (UINT32_MAX >> shift)) {
        fprintf(stderr, "dlist_bench: %s %s: give a positive number "
                "(K and M suffixes allowed, at most 4G)\n", flag, s);
        exit(2);
    }
    return (size_t)v << shift;
}

int main(int argc, char **argv)
{
    int fds[2], status = 0;
    char url[URL_MAX];
    pid_t pid;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc)
            opt_blocks = parse_count(argv[i], argv[i + 1]), i++;
        else if (strcmp(argv[i], "--block-size") == 0 && i + 1 < argc)
            opt_block = parse_count(argv[i], argv[i + 1]), i++;
        else if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc)
            opt_provider = argv[++i];
        else if (strcmp(argv[i], "--patterns") == 0 && i + 1 < argc)
            opt_patterns = parse_count(argv[i], argv[i + 1]), i++;
        else {
            fprintf(stderr, "usage: dlist_bench [--blocks N] [--block-size "
                    "B] [--provider P] [--patterns R]\n");
            return 2;
        }
    }
    if (opt_blocks > SIZE_MAX / opt_block) {
        fprintf(stderr, "dlist_bench: --blocks x --block-size overflows\n");
        return 2;
    }
    if (pipe(fds) != 0)
        return 1;
    pid = fork();
    if (pid == 0)
        _exit(run_target(fds[1], opt_blocks * opt_block));
    close(fds[1]);
    if (read(fds[0], url, sizeof(url)) != sizeof(url)) {
        fprintf(stderr, "dlist_bench: the target did not start\n");
        return 1;
    }
    url[sizeof(url) - 1] = '\0';
    run_initiator(url);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
