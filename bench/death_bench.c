/*
 * death_bench: how long ferry takes to notice a dead or stopped peer.
 *
 *   death_bench [--runs N] [--mode busy|idle|stop|all] [--liveness MS]
 *               [--provider P] [--domain D] [--beside]
 *
 * Each run starts a target process (its own context with a progress
 * thread and a 64 MiB region), reaches it, and then:
 *   busy  keeps four 1 MiB writes in flight to it and kills it (-9): the
 *         time from the kill to the peer's declaration;
 *   idle  only watches it (ferry_peer_watch, no request) and kills it:
 *         the time from the kill to the FERRY_NOTIFICATION_PEER_DOWN event;
 *   stop  keeps writes in flight and stops it (SIGSTOP): the time from
 *         the stop to the declaration (then kills it).
 * With --beside, a second target lives beside it, reached by the same
 * context and written to the same way the whole run, and for a liveness
 * period after the detection: whether it stayed up, and how many of its
 * writes completed after the signal, show whether one peer's death held
 * up the others.
 * Prints every run's milliseconds ("none": nothing noticed in 30 s), then
 * per mode how many runs noticed, the median and the worst.
 * Defaults: 20 runs of every mode, the config's liveness (2000 ms unless
 * FERRY_LIVENESS_MS says otherwise), tcp;ofi_rxm on lo (--domain "": the
 * provider's own, as shm needs).
 */
#include <ferry.h>

#include "benchutil.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024u * 1024u)
#define REGION (64 * MiB)
#define WRITE_LEN MiB
#define IN_FLIGHT 4
#define MAX_RUNS 1000
/* A run that sees nothing for this long has failed. */
#define GIVE_UP_MS 30000

enum mode { BUSY, IDLE, STOP, NMODES };
static const char *const mode_names[NMODES] = {"busy", "idle", "stop"};

static unsigned opt_runs = 20;
static int opt_mode = -1; /* -1: all */
static int opt_liveness = -1;
static const char *opt_provider = "tcp;ofi_rxm";
static const char *opt_domain = "lo";
static bool opt_beside;

static void config(struct ferry_config *cfg, bool progress_thread)
{
    ferry_config_init(cfg);
    cfg->provider = opt_provider;
    cfg->domain = opt_domain[0] != '\0' ? opt_domain : NULL;
    cfg->timeout_ms = 60000;
    cfg->progress_thread = progress_thread;
    if (opt_liveness >= 0)
        cfg->liveness_ms = (unsigned)opt_liveness;
}

/* ---- the target ---------------------------------------------------------- */

struct target {
    pid_t pid;
    uint8_t addr[1024], rkey[1024];
    size_t addr_len, rkey_len;
};

static void write_blob(int fd, const void *p, size_t len)
{
    if (write(fd, &len, sizeof(len)) != (ssize_t)sizeof(len) ||
        write(fd, p, len) != (ssize_t)len)
        _exit(3);
}

/* The target's process: sends its blobs, then serves until killed. */
static void target_main(int out)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    uint8_t addr[1024], rkey[1024];
    size_t alen = sizeof(addr), rlen = sizeof(rkey);
    void *buf = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    config(&cfg, true);
    if (buf == MAP_FAILED || ferry_context_create(&cfg, &ctx) != 0 ||
        ferry_context_address(ctx, addr, &alen) != 0 ||
        ferry_mem_register(ctx, buf, REGION, FERRY_MEM_HOST, 0,
                           FERRY_ACCESS_REMOTE_WRITE, &mem) != 0 ||
        ferry_mem_export(mem, rkey, &rlen) != 0) {
        fprintf(stderr, "death_bench: target: %s\n", ferry_last_error());
        _exit(2);
    }
    write_blob(out, addr, alen);
    write_blob(out, rkey, rlen);
    close(out);
    for (;;)
        pause();
}

static void read_blob(int fd, void *p, size_t cap, size_t *len)
{
    if (read(fd, len, sizeof(*len)) != (ssize_t)sizeof(*len) || *len > cap ||
        read(fd, p, *len) != (ssize_t)*len) {
        fprintf(stderr, "death_bench: the target did not start\n");
        exit(1);
    }
}

static void target_start(struct target *t)
{
    int fds[2];

    if (pipe(fds) != 0)
        exit(1);
    fflush(NULL);
    t->pid = fork();
    if (t->pid < 0)
        exit(1);
    if (t->pid == 0) {
        close(fds[0]);
        target_main(fds[1]);
    }
    close(fds[1]);
    read_blob(fds[0], t->addr, sizeof(t->addr), &t->addr_len);
    read_blob(fds[0], t->rkey, sizeof(t->rkey), &t->rkey_len);
    close(fds[0]);
}

static void target_kill(struct target *t)
{
    kill(t->pid, SIGKILL);
    waitpid(t->pid, NULL, 0);
}

/* ---- one run ---------------------------------------------------------------- */

struct side {
    ferry_context_t *ctx;
    ferry_mem_t *lmem;
    uint8_t *lbuf;
    unsigned liveness_ms;
};

static bool gone(ferry_peer_t *peer)
{
    enum ferry_peer_state st;

    return ferry_peer_state(peer, &st, NULL, 0) == 0 &&
           (st == FERRY_PEER_DEAD || st == FERRY_PEER_UNREACHABLE);
}

/* Keeps IN_FLIGHT writes posted to peer; frees those that ended.
 * Returns how many of them had completed. */
static unsigned keep_writing(ferry_peer_t *peer, ferry_rmem_t *rmem,
                             const struct side *s, ferry_req_t **reqs)
{
    unsigned completed = 0;

    for (unsigned i = 0; i < IN_FLIGHT; i++) {
        struct ferry_iov iov = {s->lbuf, s->lmem, rmem,
                                (uint64_t)i * WRITE_LEN, WRITE_LEN};
        int ret = reqs[i] != NULL ? ferry_req_test(reqs[i]) : -1;

        if (ret == FERRY_EINPROGRESS)
            continue;
        completed += ret == 0;
        ferry_req_close(reqs[i]);
        reqs[i] = NULL;
        if (!gone(peer))
            ferry_write(peer, &iov, 1, NULL, &reqs[i]);
    }
    return completed;
}

/* A target the context reached, with the writes out to it. */
struct reached {
    struct target t;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_req_t *reqs[IN_FLIGHT];
};

static void reach(const struct side *s, struct reached *r)
{
    int ret;

    memset(r, 0, sizeof(*r));
    target_start(&r->t);
    if ((ret = ferry_peer_add(s->ctx, r->t.addr, r->t.addr_len, &r->peer)) ||
        (ret = ferry_rmem_import(r->peer, r->t.rkey, r->t.rkey_len,
                                 &r->rmem)))
        die("reaching a target", ret);
}

/* Lets r's writes and handles go (the handles once the provider gave
 * their operations back). */
static void release(const struct side *s, struct reached *r)
{
    uint64_t t0;

    for (unsigned i = 0; i < IN_FLIGHT; i++) {
        if (r->reqs[i] != NULL)
            ferry_req_wait(r->reqs[i], 10000);
        ferry_req_close(r->reqs[i]);
    }
    t0 = now_ns();
    while ((ferry_rmem_close(r->rmem) == FERRY_EBUSY ||
            ferry_peer_close(r->peer) == FERRY_EBUSY) &&
           ms_since(t0) < GIVE_UP_MS)
        ferry_progress(s->ctx);
}

/* The target beside the one signalled (--beside), and what it saw. */
struct beside {
    struct reached r;
    unsigned after_signal; /* its writes completed since the signal */
};

/* Ends the target beside: whether it stayed up till then. */
static bool beside_stop(const struct side *s, struct beside *b)
{
    bool up = !gone(b->r.peer);

    release(s, &b->r);
    target_kill(&b->r.t);
    return up;
}

/* Keeps the target beside written to; counts what completed. */
static void write_beside(const struct side *s, struct beside *b)
{
    if (b != NULL)
        b->after_signal += keep_writing(b->r.peer, b->r.rmem, s, b->r.reqs);
}

/* Whether a PEER_DOWN event for peer is among the queued ones (peer
 * NULL: whether any event was). */
static bool peer_down_seen(ferry_context_t *ctx, ferry_peer_t *peer)
{
    struct ferry_notification ev[16];
    int n = ferry_notify_poll(ctx, ev, 16);

    for (int i = 0; i < n; i++)
        if (peer == NULL || (ev[i].kind == FERRY_NOTIFICATION_PEER_DOWN &&
                             ev[i].peer == peer))
            return true;
    return false;
}

/* One run of mode m: the milliseconds from the signal to the detection;
 * with b, the target beside is written to along. */
static double run_once(const struct side *s, enum mode m, struct beside *b)
{
    struct reached v;
    uint64_t t0, since;
    double ms = -1;
    int ret;

    reach(s, &v);
    /* Traffic for a while first: the connection is up, the peer UP. */
    t0 = now_ns();
    while (ms_since(t0) < 200) {
        keep_writing(v.peer, v.rmem, s, v.reqs);
        write_beside(s, b);
        ferry_progress(s->ctx);
    }
    /* Before the signal: what completed so far is not counted. */
    if (b != NULL)
        b->after_signal = 0;
    if (m == IDLE) {
        for (unsigned i = 0; i < IN_FLIGHT; i++)
            if (v.reqs[i] != NULL &&
                (ret = ferry_req_wait(v.reqs[i], 10000)))
                die("a write before the kill", ret);
        ferry_peer_watch(v.peer, 1);
    }
    /* Earlier runs' events go first: a freed peer's handle may come back
     * as this one's. */
    while (peer_down_seen(s->ctx, NULL))
        ;
    since = now_ns();
    kill(v.t.pid, m == STOP ? SIGSTOP : SIGKILL);
    while (ms < 0 && ms_since(since) < GIVE_UP_MS) {
        if (m != IDLE)
            keep_writing(v.peer, v.rmem, s, v.reqs);
        write_beside(s, b);
        ferry_progress(s->ctx);
        if (m == IDLE ? peer_down_seen(s->ctx, v.peer) : gone(v.peer))
            ms = ms_since(since);
    }
    /* The one beside goes on for a liveness period after the detection:
     * long enough to be declared, if it were held up. */
    t0 = now_ns();
    while (b != NULL && ms_since(t0) < s->liveness_ms) {
        write_beside(s, b);
        ferry_progress(s->ctx);
    }
    target_kill(&v.t);
    release(s, &v);
    return ms; /* -1: nothing noticed in GIVE_UP_MS */
}

/* ---- main ------------------------------------------------------------------ */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void run_mode(const struct side *s, enum mode m)
{
    static double ms[MAX_RUNS];
    unsigned n = 0, stayed_up = 0;

    printf("%s:", mode_names[m]);
    for (unsigned i = 0; i < opt_runs; i++) {
        struct beside b;
        double one;

        if (opt_beside)
            reach(s, &b.r);
        one = run_once(s, m, opt_beside ? &b : NULL);
        if (one >= 0)
            ms[n++] = one;
        printf(one >= 0 ? " %.0f" : " none", one);
        if (opt_beside) {
            bool up = beside_stop(s, &b);

            stayed_up += up;
            printf(" (beside: %s, %u writes)", up ? "up" : "declared",
                   b.after_signal);
        }
        fflush(stdout);
    }
    printf("\n%s: noticed in %u of %u runs (none: not in %d ms)", mode_names[m],
           n, opt_runs, GIVE_UP_MS);
    if (n > 0) {
        qsort(ms, n, sizeof(ms[0]), by_value);
        printf(", median %.0f ms, worst %.0f ms",
               n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2,
               ms[n - 1]);
    }
    if (opt_beside)
        printf("; the target beside stayed up in %u of %u runs", stayed_up,
               opt_runs);
    printf("\n");
}

static void usage(void)
{
    fprintf(stderr, "usage: death_bench [--runs N (1-%d)] [--mode "
                    "busy|idle|stop|all] [--liveness MS] [--provider P] "
                    "[--domain D] [--beside]\n",
            MAX_RUNS);
    exit(2);
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(argv[i], "--beside") == 0) {
            opt_beside = true;
            continue;
        }
        if (v == NULL)
            usage();
        if (strcmp(argv[i], "--runs") == 0) {
            opt_runs = (unsigned)strtoul(v, NULL, 10);
            if (opt_runs == 0 || opt_runs > MAX_RUNS)
                usage();
        } else if (strcmp(argv[i], "--mode") == 0) {
            opt_mode = -2;
            for (int m = 0; m < NMODES; m++)
                if (strcmp(v, mode_names[m]) == 0)
                    opt_mode = m;
            if (strcmp(v, "all") == 0)
                opt_mode = -1;
            if (opt_mode == -2)
                usage();
        } else if (strcmp(argv[i], "--liveness") == 0) {
            opt_liveness = atoi(v);
        } else if (strcmp(argv[i], "--provider") == 0) {
            opt_provider = v;
        } else if (strcmp(argv[i], "--domain") == 0) {
            opt_domain = v;
        } else {
            usage();
        }
        i++;
    }
}

int main(int argc, char **argv)
{
    struct ferry_config cfg;
    struct side s;
    int ret;

    parse(argc, argv);
    config(&cfg, false);
    s.liveness_ms = cfg.liveness_ms;
    if ((ret = ferry_context_create(&cfg, &s.ctx)))
        die("context", ret);
    s.lbuf = malloc(IN_FLIGHT * WRITE_LEN);
    if (s.lbuf == NULL)
        die("buffer", FERRY_ENOMEM);
    memset(s.lbuf, 0x5a, IN_FLIGHT * WRITE_LEN);
    if ((ret = ferry_mem_register(s.ctx, s.lbuf, IN_FLIGHT * WRITE_LEN,
                                  FERRY_MEM_HOST, 0, 0, &s.lmem)))
        die("registration", ret);
    printf("death_bench: %s on '%s', liveness %u ms, %u runs per mode "
           "(milliseconds from the signal to the detection)\n",
           opt_provider, opt_domain, cfg.liveness_ms, opt_runs);
    for (int m = 0; m < NMODES; m++)
        if (opt_mode < 0 || opt_mode == m)
            run_mode(&s, (enum mode)m);
    ferry_mem_close(s.lmem);
    ferry_context_close(s.ctx);
    free(s.lbuf);
    return 0;
}
