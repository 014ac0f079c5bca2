/*
 * fanout: the same bytes to many receivers with one call (ferry_fanout).
 *
 *   fanout recv [HOST:PORT]          registers a region that may receive
 *                                    fan-outs, publishes it as "fanout",
 *                                    waits for the data, verifies every
 *                                    byte, says how long it waited
 *   fanout send HOST:PORT...         looks "fanout" up at every receiver,
 *                                    fans a pattern out to all of them,
 *                                    reports the time and who lacks data
 *   fanout demo                      a sender and --receivers N receiver
 *                                    processes on this host
 *
 * Options: --size BYTES (default 64M; K/M/G), --receivers N (demo,
 * default 4), --degree D and --chunk BYTES (ferry picks by default),
 * --mode fanout|parallel|sequential (send; the last two write every copy
 * from the sender, all at once or one after the other: what ferry_fanout
 * saves), --timeout SECONDS (default 120).
 *
 * Each receiver's HOST:PORT is a meeting place of its own: the embedded
 * bootstrap there (bootstrap://HOST:PORT, ferry.h "Metadata"), where the
 * receiver joins as "fanout-recv" and the sender as "fanout-send";
 * whichever comes first listens there, the other connects.  A receiver
 * meets at 127.0.0.1:18520 by default; to be reached from other hosts
 * give it :PORT (or its address) and set the same FERRY_OOB_TOKEN on all
 * sides.  FERRY_PROVIDER / FERRY_DOMAIN pick the provider and the
 * interface.
 */
#include "example.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DONE_ID 1
#define MAX_RECEIVERS 64
#define DEMO_PORT 18520

static size_t opt_size = 64u << 20;
static unsigned opt_receivers = 4;
static unsigned opt_degree;
static size_t opt_chunk;
static const char *opt_mode = "fanout";
static int opt_timeout_s = 120;

static uint8_t pattern(size_t i)
{
    return (uint8_t)(((uint64_t)i * 0x9e3779b97f4a7c15ull) >> 56);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int open_context(const char *who, bool thread, ferry_context_t **ctx)
{
    struct ferry_config cfg;
    int ret;

    ferry_config_init(&cfg);
    cfg.progress_thread = thread;
    if ((ret = ferry_context_create(&cfg, ctx)))
        return ex_fail(who, "ferry_context_create", ret);
    return 0;
}

static int receive(const char *where)
{
    char url[300];
    ferry_context_t *ctx;
    ferry_meta_t *meta;
    ferry_mem_t *mem;
    uint8_t *buf = NULL;
    double t0;
    int ret, rc = 1;

    /* The progress thread forwards chunks to this receiver's children. */
    if (open_context("recv", true, &ctx))
        return 1;
    if ((buf = calloc(1, opt_size)) == NULL) {
        fprintf(stderr, "recv: out of memory for %zu bytes\n", opt_size);
        goto out;
    }
    if ((ret = ferry_mem_register(ctx, buf, opt_size, FERRY_MEM_HOST, 0,
                                  /* READ: a receiver forwards */
                                  FERRY_ACCESS_REMOTE_READ |
                                      FERRY_ACCESS_REMOTE_WRITE |
                                      FERRY_ACCESS_FANOUT,
                                  &mem))) {
        ex_fail("recv", "ferry_mem_register", ret);
        goto out;
    }
    if ((ret = ferry_meta_open(ctx, ex_url(where, url, sizeof(url)),
                               "fanout-recv", &meta)) ||
        (ret = ferry_meta_publish(meta, "fanout", mem))) {
        ex_fail("recv", "publishing the region", ret);
        goto out;
    }
    printf("recv %s: %zu bytes published as \"fanout\"\n", where, opt_size);
    fflush(stdout);
    t0 = now_s();
    if ((ret = ferry_counter_wait(ctx, DONE_ID, 1, opt_timeout_s * 1000))) {
        ex_fail("recv", "waiting for the data", ret);
        goto out;
    }
    for (size_t i = 0; i < opt_size; i++)
        if (buf[i] != pattern(i)) {
            fprintf(stderr, "recv %s: byte %zu is 0x%02x, expected 0x%02x\n",
                    where, i, buf[i], pattern(i));
            goto out;
        }
    printf("recv %s: %zu bytes verified (%.2f s after publishing)\n", where,
           opt_size, now_s() - t0);
    rc = 0;
out:
    fflush(stdout); /* a demo's receiver ends with _exit */
    /* Closing the context closes the metadata handle and the region. */
    ferry_context_close(ctx);
    free(buf);
    return rc;
}

/* Every copy written by the sender: all at once, or one after another
 * (the progress line counts the copies done). */
static int send_naive(ferry_mem_t *mem, uint8_t *buf, ferry_peer_t **peers,
                      ferry_rmem_t **dst, size_t n, bool parallel,
                      struct ex_progress *pg)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_req_t *reqs[MAX_RECEIVERS] = {0};
    double total = (double)n * (double)opt_size;
    char what[64];
    int ret = 0;

    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = DONE_ID;
    opts.notify_value = 1;
    opts.timeout_ms = opt_timeout_s * 1000;
    for (size_t i = 0; i < n && ret == 0; i++) {
        struct ferry_iov iov = {
            .local = buf, .lmem = mem, .rmem = dst[i], .len = opt_size};

        snprintf(what, sizeof(what), "send: copy %zu of %zu", i + 1, n);
        if ((ret = ferry_write(peers[i], &iov, 1, &opts, &reqs[i])))
            ex_fail("send", "ferry_write", ret);
        else if (!parallel &&
                 (ret = ex_req_wait(reqs[i], pg, what,
                                    (double)i * (double)opt_size, total))) {
            ex_progress_end(pg);
            ex_fail("send", "a copy", ret);
        }
    }
    /* In parallel the copies end about together: copy i waited for means
     * at least i done. */
    snprintf(what, sizeof(what), "send: %zu copies at once", n);
    for (size_t i = 0; i < n; i++) {
        int r = reqs[i] != NULL
                    ? ex_req_wait(reqs[i], pg, what,
                                  (double)i * (double)opt_size, total)
                    : 0;

        if (r != 0 && ret == 0) {
            ex_progress_end(pg);
            ret = ex_fail("send", "a copy", r);
        }
        ferry_req_close(reqs[i]);
    }
    return ret;
}

/* ferry tells how a fan-out ends, not how far it has come: its progress
 * line counts the seconds. */
static int send_fanout(ferry_mem_t *mem, ferry_peer_t **peers,
                       ferry_rmem_t **dst, size_t n, struct ex_progress *pg)
{
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    ferry_fanout_t *f;
    size_t missing[MAX_RECEIVERS];
    size_t nmissing;
    char what[128], b1[32];
    int ret;

    opts.chunk = opt_chunk;
    opts.degree = opt_degree;
    opts.notify_id = DONE_ID;
    opts.timeout_ms = opt_timeout_s * 1000;
    if ((ret = ferry_fanout(mem, 0, opt_size, peers, dst, n, &opts, &f)))
        return ex_fail("send", "ferry_fanout", ret);
    snprintf(what, sizeof(what), "send: fan-out of %s to %zu receivers",
             ex_bytes(b1, sizeof(b1), (double)opt_size), n);
    do {
        uint64_t done = 0, total = 0;

        /* The bytes the front of the chain or tree has: the rate and
         * what is left, on a terminal. */
        ferry_fanout_progress(f, &done, &total);
        ex_progress(pg, what, (double)done, (double)total);
    } while ((ret = ferry_fanout_wait(f, 250)) == FERRY_EAGAIN);
    ex_progress_end(pg);
    nmissing = ferry_fanout_missing(f, missing, MAX_RECEIVERS);
    for (size_t i = 0; i < nmissing && i < MAX_RECEIVERS; i++)
        fprintf(stderr, "send: receiver %zu did not get the data\n",
                missing[i]);
    if (ret != 0)
        ex_fail("send", "the fan-out", ret);
    ferry_fanout_close(f);
    return ret;
}

static int send_all(char **where, size_t n)
{
    ferry_peer_t *peers[MAX_RECEIVERS];
    ferry_rmem_t *dst[MAX_RECEIVERS];
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    uint8_t *buf;
    struct ex_progress pg;
    double t0, secs;
    int ret = 1;

    if (open_context("send", false, &ctx))
        return 1;
    if ((buf = malloc(opt_size)) == NULL) {
        fprintf(stderr, "send: out of memory for %zu bytes\n", opt_size);
        ferry_context_close(ctx);
        return 1;
    }
    for (size_t i = 0; i < opt_size; i++)
        buf[i] = pattern(i);
    if ((ret = ferry_mem_register(ctx, buf, opt_size, FERRY_MEM_HOST, 0, 0,
                                  &mem))) {
        ex_fail("send", "ferry_mem_register", ret);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char url[300];
        ferry_meta_t *meta;

        /* Waits for the receiver to publish; the lookup waited for its
         * address, so the peer is there at once. */
        if ((ret = ferry_meta_open(ctx, ex_url(where[i], url, sizeof(url)),
                                   "fanout-send", &meta)) ||
            (ret = ferry_meta_lookup(meta, "fanout-recv", "fanout",
                                     opt_timeout_s * 1000, &dst[i])) ||
            (ret = ferry_meta_peer(meta, "fanout-recv", 0, &peers[i]))) {
            ex_fail("send", where[i], ret);
            goto out;
        }
    }
    printf("send: every receiver reached; the transfer starts\n");
    fflush(stdout);
    t0 = now_s();
    ex_progress_start(&pg);
    if (strcmp(opt_mode, "fanout") == 0)
        ret = send_fanout(mem, peers, dst, n, &pg);
    else
        ret = send_naive(mem, buf, peers, dst, n,
                         strcmp(opt_mode, "parallel") == 0, &pg);
    ex_progress_end(&pg);
    secs = now_s() - t0;
    if (ret == 0)
        printf("send: %zu bytes to %zu receivers (%s) in %.3f s: %.2f GB/s "
               "per receiver\n",
               opt_size, n, opt_mode, secs, (double)opt_size / secs / 1e9);
out:
    /* Closing the context closes the metadata handles, the region and
     * what the lookups handed out. */
    ferry_context_close(ctx);
    free(buf);
    return ret != 0;
}

/* The receivers as child processes on consecutive ports, then the send. */
static int demo(void)
{
    char where[MAX_RECEIVERS][32], *list[MAX_RECEIVERS];
    pid_t pids[MAX_RECEIVERS];
    int rc = 0, status;

    for (unsigned i = 0; i < opt_receivers; i++) {
        snprintf(where[i], sizeof(where[i]), "127.0.0.1:%u", DEMO_PORT + i);
        list[i] = where[i];
        if ((pids[i] = fork()) == 0)
            _exit(receive(where[i]));
    }
    /* The sender's lookups wait for the receivers to publish. */
    rc = send_all(list, opt_receivers);
    for (unsigned i = 0; i < opt_receivers; i++) {
        if (rc != 0)
            kill(pids[i], SIGTERM);
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = 1;
    }
    printf("fanout: %s\n", rc == 0 ? "OK" : "FAILED");
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: fanout recv [HOST:PORT] | send HOST:PORT... | demo\n"
            "       [--size BYTES] [--receivers N] [--degree D] "
            "[--chunk BYTES]\n"
            "       [--mode fanout|parallel|sequential] [--timeout S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    char *args[MAX_RECEIVERS + 1];
    size_t nargs = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (a[0] != '-') {
            if (nargs == MAX_RECEIVERS + 1)
                usage();
            args[nargs++] = argv[i];
            continue;
        }
        if (i + 1 == argc)
            usage();
        if (strcmp(a, "--size") == 0)
            opt_size = ex_parse_size(argv[++i]);
        else if (strcmp(a, "--chunk") == 0)
            opt_chunk = ex_parse_size(argv[++i]);
        else if (strcmp(a, "--receivers") == 0)
            opt_receivers = (unsigned)atoi(argv[++i]);
        else if (strcmp(a, "--degree") == 0)
            opt_degree = (unsigned)atoi(argv[++i]);
        else if (strcmp(a, "--mode") == 0)
            opt_mode = argv[++i];
        else if (strcmp(a, "--timeout") == 0)
            opt_timeout_s = atoi(argv[++i]);
        else
            usage();
    }
    if (opt_receivers == 0 || opt_receivers > MAX_RECEIVERS ||
        opt_timeout_s <= 0 ||
        (strcmp(opt_mode, "fanout") && strcmp(opt_mode, "parallel") &&
         strcmp(opt_mode, "sequential"))) {
        fprintf(stderr, "fanout: --receivers is 1 to %d, --timeout is "
                        "positive, --mode is fanout, parallel or "
                        "sequential\n",
                MAX_RECEIVERS);
        return 2;
    }
    if (nargs >= 1 && strcmp(args[0], "recv") == 0 && nargs <= 2)
        return receive(nargs == 2 ? args[1] : "127.0.0.1:18520");
    if (nargs >= 2 && strcmp(args[0], "send") == 0)
        return send_all(args + 1, nargs - 1);
    if (nargs == 1 && strcmp(args[0], "demo") == 0)
        return demo();
    usage();
    return 2;
}
