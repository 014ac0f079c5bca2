/*
 * ferry_bench --fanout N: ferry_fanout of --block-size bytes from this
 * process to N receiver processes on this host, each with its progress
 * thread (which forwards).  Times every fan-out from the call to its end
 * (warm-up first), then has every receiver check every byte.  On one host
 * the receivers share its CPUs and memory: the benefit of forwarding
 * shows across hosts with links of their own (bench/fanout_netns.sh).
 */
#include "fanout.h"

#include <ferry.h>

#include "fbench.h"
#include "pattern.h"
#include "util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RUNS 100000

struct receiver {
    pid_t pid;
    int to, from; /* pipes: commands to it, answers from it */
    uint8_t addr[512], rkey[1024];
    uint32_t addr_len, rkey_len;
};

static int context_for(const struct options *o, bool thread,
                       ferry_context_t **ctx)
{
    struct ferry_config cfg;

    ferry_config_init(&cfg);
    if (o->provider != NULL)
        cfg.provider = o->provider;
    if (o->domain != NULL)
        cfg.domain = o->domain;
    cfg.local_only = 1;
    cfg.progress_thread = thread;
    cfg.timeout_ms = o->timeout_ms;
    return ferry_context_create(&cfg, ctx);
}

static bool put(int fd, const void *p, size_t n)
{
    return write(fd, p, n) == (ssize_t)n;
}

static bool get(int fd, void *p, size_t n)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = read(fd, (uint8_t *)p + got, n - got);

        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* A receiver: registers its region, hands its blobs up, then answers
 * 'v' (are the bytes pattern A?) until 'q'. */
static int receiver_main(const struct options *o, int in, int out)
{
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    uint8_t *buf = calloc(1, o->block), cmd, addr[512], rkey[1024];
    size_t alen = sizeof(addr), rlen = sizeof(rkey);
    uint32_t lens[2];
    int ret;

    g_role = "ferry_bench (fan-out receiver)";
    if (buf == NULL)
        return complain("out of memory for %llu bytes",
                        (unsigned long long)o->block);
    if ((ret = context_for(o, true, &ctx)) ||
        (ret = ferry_mem_register(ctx, buf, o->block, FERRY_MEM_HOST, 0,
                                  /* READ: a receiver forwards */
                                  FERRY_ACCESS_REMOTE_READ |
                                      FERRY_ACCESS_REMOTE_WRITE |
                                      FERRY_ACCESS_FANOUT,
                                  &mem)) ||
        (ret = ferry_context_address(ctx, addr, &alen)) ||
        (ret = ferry_mem_export(mem, rkey, &rlen)))
        return fail("setting up the receiver", ret);
    lens[0] = (uint32_t)alen;
    lens[1] = (uint32_t)rlen;
    if (!put(out, lens, sizeof(lens)) || !put(out, addr, alen) ||
        !put(out, rkey, rlen))
        return complain("cannot hand the blobs to the source");
    while (get(in, &cmd, 1) && cmd == 'v') {
        uint8_t ok;

        corrupt_for_self_test(buf, o->block);
        ok = pattern_mismatch(buf, 0, o->block, PAT_A) == UINT64_MAX;

        if (!put(out, &ok, 1))
            break;
    }
    ferry_mem_close(mem);
    ferry_context_close(ctx);
    free(buf);
    return 0;
}

static bool spawn(const struct options *o, struct receiver *r)
{
    int down[2], up[2];
    pid_t parent = getpid();

    if (pipe(down) != 0 || pipe(up) != 0)
        return false;
    r->pid = fork();
    if (r->pid < 0)
        return false;
    if (r->pid == 0) {
        close(down[1]);
        close(up[0]);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(1);
        _exit(receiver_main(o, down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    r->to = down[1];
    r->from = up[0];
    uint32_t lens[2];
    if (!get(r->from, lens, sizeof(lens)) || lens[0] > sizeof(r->addr) ||
        lens[1] > sizeof(r->rkey))
        return false;
    r->addr_len = lens[0];
    r->rkey_len = lens[1];
    return get(r->from, r->addr, r->addr_len) &&
           get(r->from, r->rkey, r->rkey_len);
}

/* Asks every receiver to check its bytes; then they exit. */
static int verify_and_stop(struct receiver *r, size_t n)
{
    int bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint8_t cmd = 'v', ok = 0;

        if (!put(r[i].to, &cmd, 1) || !get(r[i].from, &ok, 1) || !ok) {
            complain("receiver %zu does not hold every byte of the source",
                     i);
            bad = 1;
        }
        cmd = 'q';
        put(r[i].to, &cmd, 1);
    }
    for (size_t i = 0; i < n; i++) {
        int status;

        waitpid(r[i].pid, &status, 0);
        close(r[i].to);
        close(r[i].from);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            bad = 1;
    }
    return bad;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* One fan-out, timed; 0 or the error (said). */
static int fan_once(const struct options *o, ferry_mem_t *mem,
                    ferry_peer_t **peers, ferry_rmem_t **dst, uint64_t *ns)
{
    struct ferry_fanout_opts opts = FERRY_FANOUT_OPTS_INIT;
    ferry_fanout_t *f;
    uint64_t t0 = now_ns();
    int ret;

    opts.chunk = o->fanout_chunk;
    opts.degree = o->fanout_degree;
    if ((ret = ferry_fanout(mem, 0, o->block, peers, dst, o->fanout, &opts,
                            &f)))
        return fail("ferry_fanout", ret);
    ret = ferry_fanout_wait(f, -1);
    *ns = now_ns() - t0;
    if (ret != 0)
        fail("the fan-out", ret);
    ferry_fanout_close(f);
    return ret;
}

/* Fan-outs of buf (pattern A) to the receivers: warm-up, then timed. */
static int run(const struct options *o, ferry_context_t *ctx, uint8_t *buf,
               struct receiver *r, uint64_t *times, size_t *nruns)
{
    ferry_peer_t *peers[MAX_FANOUT];
    ferry_rmem_t *dst[MAX_FANOUT];
    ferry_mem_t *mem;
    uint64_t ns, until;
    int ret;

    pattern_fill(buf, 0, o->block, PAT_A);
    if ((ret = ferry_mem_register(ctx, buf, o->block, FERRY_MEM_HOST, 0, 0,
                                  &mem)))
        return fail("ferry_mem_register", ret);
    for (size_t i = 0; i < o->fanout; i++)
        if ((ret = ferry_peer_add(ctx, r[i].addr, r[i].addr_len,
                                  &peers[i])) ||
            (ret = ferry_rmem_import(peers[i], r[i].rkey, r[i].rkey_len,
                                     &dst[i])))
            return fail("reaching a receiver", ret);
    /* Warm-up: connections made, caches filled. */
    for (until = now_ns() + (uint64_t)(o->warmup * 1e9), ret = 0;
         ret == 0 && (now_ns() < until || *nruns == 0); (*nruns)++)
        ret = fan_once(o, mem, peers, dst, &ns);
    *nruns = 0;
    until = now_ns() + (uint64_t)(o->duration * 1e9);
    while (ret == 0 && *nruns < MAX_RUNS &&
           (o->iterations != 0 ? *nruns < o->iterations
                               : *nruns == 0 || now_ns() < until)) {
        ret = fan_once(o, mem, peers, dst, &ns);
        times[(*nruns)++] = ns;
    }
    return ret;
}

int fanout_main(const struct options *o)
{
    struct receiver r[MAX_FANOUT];
    uint64_t *times = calloc(MAX_RUNS, sizeof(*times));
    uint8_t *buf = malloc(o->block);
    ferry_context_t *ctx;
    size_t nruns = 0;
    char size[32], med[32], lo[32], hi[32];
    double med_s;
    int ret;

    g_role = "ferry_bench (fan-out source)";
    if (times == NULL || buf == NULL)
        return complain("out of memory for %llu bytes",
                        (unsigned long long)o->block);
    for (size_t i = 0; i < o->fanout; i++)
        if (!spawn(o, &r[i]))
            return complain("could not start fan-out receiver %zu", i);
    if ((ret = context_for(o, false, &ctx)))
        return fail("ferry_context_create", ret);
    ret = run(o, ctx, buf, r, times, &nruns);
    if (ret == 0)
        ret = verify_and_stop(r, o->fanout);
    if (ret != 0 || nruns == 0)
        return 1;
    qsort(times, nruns, sizeof(*times), cmp_u64);
    med_s = (double)times[nruns / 2] * 1e-9;
    fmt_iec(size, sizeof(size), o->block);
    if (o->json)
        printf("{\"mode\":\"fanout\",\"receivers\":%llu,\"bytes\":%llu,"
               "\"runs\":%zu,\"median_s\":%.6f,\"min_s\":%.6f,"
               "\"max_s\":%.6f,\"gb_per_s_per_receiver\":%.4f,"
               "\"verified\":true}\n",
               (unsigned long long)o->fanout, (unsigned long long)o->block,
               nruns, med_s, (double)times[0] * 1e-9,
               (double)times[nruns - 1] * 1e-9, (double)o->block / med_s / 1e9);
    else
        printf("fan-out of %s to %llu receivers: %s per fan-out (median of "
               "%zu; %s to %s), %.2f GB/s per receiver, %.2f GB/s "
               "delivered; every receiver verified\n",
               size, (unsigned long long)o->fanout,
               fmt_ns(med, sizeof(med), (double)times[nruns / 2]), nruns,
               fmt_ns(lo, sizeof(lo), (double)times[0]),
               fmt_ns(hi, sizeof(hi), (double)times[nruns - 1]),
               (double)o->block / med_s / 1e9,
               (double)o->block * (double)o->fanout / med_s / 1e9);
    /* The context holds the source's registration: it goes first. */
    ferry_context_close(ctx);
    free(buf);
    free(times);
    return 0;
}
