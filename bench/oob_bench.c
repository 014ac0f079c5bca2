/*
 * oob_bench: what hostile clients cost a legitimate one on the bootstrap.
 *
 *   oob_bench [--tries N] [--idle N] [--flood N] [--warmup MS]
 *             [--provider P] [--domain D]
 *
 * A bootstrap hub (ferry_meta_open of bootstrap://127.0.0.1:0, its own
 * context with a progress thread) publishes one region; a client times
 * joining it (ferry_meta_open: connect, prove the token, check that its
 * name is free, offer its address) followed by ferry_meta_lookup of the
 * region, --tries times (default 200), each under a name of its own, in
 * four scenes:
 *   idle          nobody else;
 *   idle sockets  a process keeps --idle sockets (default 1000) connected
 *                 that never say a word (the kernel keeps them from the
 *                 hub: TCP_DEFER_ACCEPT), opening a new one for each
 *                 that is dropped;
 *   half hellos   the same, but each sends the first byte of a frame and
 *                 then nothing: the hub takes them, and the oldest
 *                 goes for each newcomer, which the process replaces at
 *                 once (a storm of connections, as fast as both go);
 *   pipeliners    a process keeps --flood clients (default 8) that prove
 *                 the token and pipeline lookups of the region without
 *                 ever reading an answer, connecting again when dropped.
 * Prints, per scene, the median, the 99th percentile and the worst in
 * milliseconds, the tries that failed (2 s timeouts), what the hostile
 * process did, and the ratios of the median and the 99th percentile to
 * the idle scene's.  Each hostile process gets --warmup ms (default 500)
 * before the timing starts; past 5000, the hub's handshake time,
 * the kernel has handed it the silent sockets of the idle scene and
 * dropped them.  Defaults: tcp;ofi_rxm on lo.
 *
 * The flooders prove the (empty) token with ferry's own handshake
 * (oob/auth.h) and ask for the region by the hub's own key for it
 * (oob/meta.h), so this program links the library's objects statically.
 */
#include <ferry.h>

#include "benchutil.h"
#include "sockutil.h"

#include "oob/auth.h"
#include "oob/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRIES 100000
#define TRY_TIMEOUT_MS 2000
/* The hub's name, its region, and the key it keeps the region under. */
#define HUB_NAME "server"
#define REGION "reg"
#define REGION_KEY "regions/" HUB_NAME "/" REGION

static unsigned opt_tries = 200;
static unsigned opt_idle = 1000;
static unsigned opt_flood = 8;
static unsigned opt_warmup_ms = 500;
static const char *opt_provider = "tcp;ofi_rxm";
static const char *opt_domain = "lo";

static volatile sig_atomic_t stop_now;

static ferry_context_t *context(bool progress_thread)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    int ret;

    ferry_config_init(&cfg);
    cfg.provider = opt_provider;
    cfg.domain = opt_domain[0] != '\0' ? opt_domain : NULL;
    cfg.progress_thread = progress_thread;
    /* Each step of a try (connecting included) gives up after this. */
    cfg.metadata_timeout_ms = TRY_TIMEOUT_MS;
    if ((ret = ferry_context_create(&cfg, &ctx)))
        die("ferry_context_create", ret);
    return ctx;
}

/* ---- the hostile process ------------------------------------------------ */

/* What a hostile process did, sent to the parent when it is stopped. */
struct hostile_report {
    unsigned long reconnects;
    unsigned long long bytes;
};

/* A socket that says nothing, or only the first byte of a frame; -1. */
static int idle_dial(int port, bool one_byte)
{
    int fd = su_dial(port);

    if (fd >= 0 && one_byte && send(fd, "F", 1, MSG_NOSIGNAL) != 1) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Idle sockets; one dropped is replaced at once. */
static void idle_sockets(int port, unsigned n, bool one_byte,
                         struct hostile_report *rep)
{
    struct pollfd *p = calloc(n, sizeof(*p));

    if (p == NULL)
        _exit(2);
    for (unsigned i = 0; i < n; i++)
        p[i] =
            (struct pollfd){.fd = idle_dial(port, one_byte), .events = POLLIN};
    while (!stop_now) {
        if (poll(p, n, 100) <= 0)
            continue;
        for (unsigned i = 0; i < n; i++) {
            if (p[i].revents == 0 && p[i].fd >= 0)
                continue;
            if (p[i].fd >= 0)
                close(p[i].fd);
            p[i].fd = idle_dial(port, one_byte);
            rep->reconnects++;
        }
    }
}

/* An authenticated non-blocking socket, or -1. */
static int flood_dial(int port, const uint8_t *addr, size_t alen)
{
    uint8_t srv[FERRY__OOB_BLOB_MAX];
    size_t slen = sizeof(srv);
    int fd = su_dial(port);

    if (fd < 0)
        return -1;
    if (ferry__oob_auth_client(fd, "", addr, alen, ferry__oob_deadline(2000),
                               "bench server", srv, &slen) != 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Lookups of the region back to back, to fill a send buffer in one
 * call. */
static size_t lookup_train(uint8_t *buf, size_t cap)
{
    uint8_t one[64];
    size_t len = 0, n;

    if (ferry__oob_build(one, &len, FERRY__FRAME_LOOKUP, REGION_KEY, NULL,
                         0))
        _exit(2);
    n = cap / len * len;
    for (size_t i = 0; i < n; i += len)
        memcpy(buf + i, one, len);
    return n;
}

/* Clients that pipeline lookups and never read. */
static void flooders(int port, unsigned n, const uint8_t *addr, size_t alen,
                     struct hostile_report *rep)
{
    static uint8_t train[16 * 1024];
    size_t tlen = lookup_train(train, sizeof(train));
    struct pollfd *p = calloc(n, sizeof(*p));

    if (p == NULL)
        _exit(2);
    for (unsigned i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = flood_dial(port, addr, alen),
                               .events = POLLOUT};
    while (!stop_now) {
        if (poll(p, n, 100) <= 0)
            continue;
        for (unsigned i = 0; i < n; i++) {
            ssize_t k = -1;

            if (p[i].revents == 0 && p[i].fd >= 0)
                continue;
            if (p[i].fd >= 0 && !(p[i].revents & (POLLERR | POLLHUP)))
                k = send(p[i].fd, train, tlen, MSG_NOSIGNAL);
            if (k > 0) {
                rep->bytes += (unsigned long long)k;
            } else if (k < 0 && (errno != EAGAIN || p[i].fd < 0)) {
                if (p[i].fd >= 0)
                    close(p[i].fd);
                p[i].fd = flood_dial(port, addr, alen);
                rep->reconnects++;
            }
        }
    }
}

static void on_term(int sig)
{
    (void)sig;
    stop_now = 1;
}

enum scene { SCENE_IDLE, SCENE_SOCKETS, SCENE_HALF, SCENE_FLOOD, NSCENES };

struct hostile {
    pid_t pid;
    int report; /* pipe from it */
};

/* Starts the hostile process of a scene (none for SCENE_IDLE). */
static struct hostile hostile_start(enum scene scene, int port,
                                    const uint8_t *addr, size_t alen)
{
    struct hostile h = {.pid = -1, .report = -1};
    struct hostile_report rep = {0, 0};
    int fds[2];

    if (scene == SCENE_IDLE)
        return h;
    if (pipe(fds) != 0)
        die("pipe", FERRY_ENOMEM);
    h.pid = fork();
    if (h.pid < 0)
        die("fork", FERRY_ENOMEM);
    if (h.pid == 0) {
        close(fds[0]);
        signal(SIGTERM, on_term);
        if (scene == SCENE_SOCKETS || scene == SCENE_HALF)
            idle_sockets(port, opt_idle, scene == SCENE_HALF, &rep);
        else
            flooders(port, opt_flood, addr, alen, &rep);
        _exit(write(fds[1], &rep, sizeof(rep)) == sizeof(rep) ? 0 : 3);
    }
    close(fds[1]);
    h.report = fds[0];
    return h;
}

static struct hostile_report hostile_stop(struct hostile *h)
{
    struct hostile_report rep = {0, 0};
    int status = 0;

    if (h->pid < 0)
        return rep;
    kill(h->pid, SIGTERM);
    if (read(h->report, &rep, sizeof(rep)) != sizeof(rep))
        fprintf(stderr, "oob_bench: the hostile process said nothing\n");
    waitpid(h->pid, &status, 0);
    close(h->report);
    return rep;
}

/* ---- the legitimate client ---------------------------------------------- */

/* One join+lookup in milliseconds, as member number try; < 0 when it
 * failed. */
static double try_once(ferry_context_t *ctx, const char *url, unsigned try)
{
    ferry_meta_t *meta = NULL;
    ferry_rmem_t *rmem = NULL;
    ferry_peer_t *peer = NULL;
    char name[32];
    uint64_t t0;
    double ms;
    int ret;

    /* A name per try: the hub lets the last one's go only when it sees
     * that connection close. */
    snprintf(name, sizeof(name), "client-%u", try);
    t0 = now_ns();
    ret = ferry_meta_open(ctx, url, name, &meta);
    if (ret == 0)
        ret = ferry_meta_lookup(meta, HUB_NAME, REGION, TRY_TIMEOUT_MS,
                                &rmem);
    ms = (double)(now_ns() - t0) / 1e6;
    if (ret != 0)
        fprintf(stderr, "oob_bench: a try failed after %.1f ms: %s\n", ms,
                ferry_last_error());
    ferry_rmem_close(rmem);
    /* Each join adds the hub as a peer again: let it go after leaving. */
    if (meta != NULL && ferry_meta_peer(meta, HUB_NAME, 0, &peer) != 0)
        peer = NULL;
    ferry_meta_close(meta);
    if (peer != NULL)
        ferry_peer_close(peer);
    return ret == 0 ? ms : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

struct result {
    double p50, p99, max;
    unsigned fails;
    struct hostile_report rep;
};

static struct result measure(ferry_context_t *ctx, const char *url,
                             unsigned *tries, double *ms)
{
    struct result r = {0, 0, 0, 0, {0, 0}};
    unsigned n = 0;

    for (unsigned i = 0; i < opt_tries; i++) {
        double t = try_once(ctx, url, (*tries)++);
        if (t < 0)
            r.fails++;
        else
            ms[n++] = t;
    }
    if (n == 0)
        return r;
    qsort(ms, n, sizeof(*ms), cmp_double);
    r.p50 = ms[n / 2];
    r.p99 = ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
    r.max = ms[n - 1];
    return r;
}

/* ---- main --------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: oob_bench [--tries N] [--idle N] [--flood N] "
                    "[--warmup MS] [--provider P] [--domain D]\n");
    exit(2);
}

static unsigned number(const char *s, unsigned max)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);

    if (*s == '\0' || *end != '\0' || v < 1 || v > max)
        usage();
    return (unsigned)v;
}

static void options(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) { /* an option and its value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (v == NULL)
            usage();
        if (strcmp(a, "--tries") == 0)
            opt_tries = number(v, MAX_TRIES);
        else if (strcmp(a, "--idle") == 0)
            opt_idle = number(v, 100000);
        else if (strcmp(a, "--flood") == 0)
            opt_flood = number(v, 1000);
        else if (strcmp(a, "--warmup") == 0)
            opt_warmup_ms = number(v, 600000);
        else if (strcmp(a, "--provider") == 0)
            opt_provider = v;
        else if (strcmp(a, "--domain") == 0)
            opt_domain = v;
        else
            usage();
    }
}

/* The hostile process needs a descriptor per idle socket. */
static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < opt_idle + 64)
            fprintf(stderr,
                    "oob_bench: only %lu descriptors: fewer idle "
                    "sockets than asked\n",
                    (unsigned long)rl.rlim_cur);
    }
}

int main(int argc, char **argv)
{
    static const char *const names[NSCENES] = {"idle", "idle sockets",
                                               "half hellos", "pipeliners"};
    ferry_context_t *sctx, *cctx;
    ferry_meta_t *hub;
    ferry_mem_t *mem;
    uint8_t addr[FERRY__OOB_BLOB_MAX];
    size_t alen = sizeof(addr);
    static char buf[4096];
    const char *url;
    struct result res[NSCENES];
    unsigned tries = 0;
    double *ms;
    int ret, port;

    options(argc, argv);
    raise_nofile();
    ms = calloc(opt_tries, sizeof(*ms));
    if (ms == NULL)
        die("calloc", FERRY_ENOMEM);
    sctx = context(true);
    cctx = context(false);
    if ((ret = ferry_mem_register(sctx, buf, sizeof(buf), FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_READ, &mem)) ||
        (ret = ferry_meta_open(sctx, "bootstrap://127.0.0.1:0", HUB_NAME,
                               &hub)) ||
        (ret = ferry_meta_publish(hub, REGION, mem)) ||
        (ret = ferry_context_address(cctx, addr, &alen)))
        die("setting up the hub", ret);
    /* The hub's URL names the port it got. */
    url = ferry_meta_url(hub);
    port = atoi(strrchr(url, ':') + 1);
    printf("oob_bench: %u tries of join+lookup each, %s on %s; %u idle "
           "sockets, %u pipelining clients\n",
           opt_tries, opt_provider, opt_domain[0] ? opt_domain : "(any)",
           opt_idle, opt_flood);
    for (int s = 0; s < NSCENES; s++) {
        struct hostile h = hostile_start((enum scene)s, port, addr, alen);
        if (s != SCENE_IDLE)
            usleep((useconds_t)opt_warmup_ms * 1000);
        res[s] = measure(cctx, url, &tries, ms);
        res[s].rep = hostile_stop(&h);
    }
    printf("%-14s %9s %9s %9s %6s %10s %10s  %s\n", "scene", "p50 ms", "p99 ms",
           "max ms", "fails", "p50/idle", "p99/idle", "hostile process");
    for (int s = 0; s < NSCENES; s++)
        printf("%-14s %9.3f %9.3f %9.3f %6u %10.2f %10.2f  %lu reconnects, "
               "%llu bytes sent\n",
               names[s], res[s].p50, res[s].p99, res[s].max, res[s].fails,
               res[0].p50 > 0 ? res[s].p50 / res[0].p50 : 0,
               res[0].p99 > 0 ? res[s].p99 / res[0].p99 : 0,
               res[s].rep.reconnects, res[s].rep.bytes);
    ferry_meta_close(hub);
    ferry_mem_close(mem);
    ferry_context_close(cctx);
    ferry_context_close(sctx);
    free(ms);
    return 0;
}
