/*
 * meta_bench: what the metadata service costs with many members.
 *
 *   meta_bench [--metadata URL] [--members N] [--contexts K] [--rounds R]
 *              [--probes P] [--ttl S] [--provider P] [--domain D]
 *
 * Opens N members (default 200) in one prefix, spread over K contexts
 * (default 4: ferry_meta_open takes many names on one context), each
 * watching (ferry_meta_watch), and waits until every watcher has seen
 * every member join.  Then measures:
 *   open     ferry_meta_open of each member (while the others join);
 *   publish  ferry_meta_publish of a region, R rounds over every member
 *            (default 5);
 *   join     P times (default 20), a new member opens: the time from the
 *            start of its ferry_meta_open to the moment each watcher has
 *            the JOIN (ferry_meta_event), one sample per watcher;
 *   leave    the same new member closing: from the start of
 *            ferry_meta_close to each watcher's LEAVE.
 * Prints p50, p99 and the worst of each in milliseconds.
 *
 * Without --metadata it starts a one-member etcd of its own on loopback
 * (test/api/etcdutil.c: /usr/bin/etcd, or FERRY_TEST_ETCD_DIR) and stops
 * it at the end.  Data never moves: contexts use tcp;ofi_rxm on lo
 * (--provider, --domain) only to have an address to publish.
 */
#include <ferry.h>

#include "benchutil.h"

#include "etcdutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_MEMBERS 5000
#define MAX_CONTEXTS 64
#define REGION 4096
/* A phase that takes longer than this has failed. */
#define GIVE_UP_MS 120000

static const char *opt_url;
static unsigned opt_members = 200;
static unsigned opt_contexts = 4;
static unsigned opt_rounds = 5;
static unsigned opt_probes = 20;
static unsigned opt_ttl = 10;
static const char *opt_provider = "tcp;ofi_rxm";
static const char *opt_domain = "lo";

/* Samples of one measurement. */
struct series {
    const char *name;
    double *v;
    size_t n, cap;
};

static void add(struct series *s, double ms)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (s->v == NULL) {
            fprintf(stderr, "meta_bench: out of memory\n");
            exit(1);
        }
    }
    s->v[s->n++] = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The value at quantile q (nearest rank). */
static double quantile(const struct series *s, double q)
{
    double x = q * (double)s->n;
    size_t rank = (size_t)x;

    if ((double)rank < x)
        rank++;

    return s->v[rank > 0 ? rank - 1 : 0];
}

static void print_series(struct series *s)
{
    qsort(s->v, s->n, sizeof(*s->v), cmp_double);
    if (s->n == 0) {
        printf("%-34s %8s\n", s->name, "none");
        return;
    }
    printf("%-34s %8zu %9.2f %9.2f %9.2f\n", s->name, s->n, quantile(s, 0.5),
           quantile(s, 0.99), s->v[s->n - 1]);
}

struct member {
    ferry_meta_t *meta;
    unsigned joins; /* JOINs seen (the initial sync) */
    bool seen;      /* the probe's event of this round */
};

static ferry_context_t *ctxs[MAX_CONTEXTS];
static ferry_mem_t *mems[MAX_CONTEXTS];
static struct member members[MAX_MEMBERS];

/*
 * Polls every watcher until each has an event of kind for name (joins
 * counted too), recording into s the time from t0 to each one's.
 */
static void await_all(enum ferry_meta_event_kind kind, const char *name,
                      uint64_t t0, struct series *s, const char *what)
{
    unsigned left = opt_members;
    struct timespec nap = {0, 100000};

    for (unsigned i = 0; i < opt_members; i++)
        members[i].seen = false;
    while (left > 0) {
        for (unsigned i = 0; i < opt_members; i++) {
            struct ferry_meta_event ev;

            while (ferry_meta_event(members[i].meta, 0, &ev) == 0) {
                if (ev.kind == FERRY_META_JOIN)
                    members[i].joins++;
                if (!members[i].seen && ev.kind == kind &&
                    (name == NULL || strcmp(ev.name, name) == 0)) {
                    if (s != NULL)
                        add(s, ms_since(t0));
                    if (name != NULL) {
                        members[i].seen = true;
                        left--;
                    }
                }
                /* The initial sync: every member's JOIN. */
                if (name == NULL && !members[i].seen &&
                    members[i].joins == opt_members) {
                    members[i].seen = true;
                    left--;
                }
            }
        }
        if (ms_since(t0) > GIVE_UP_MS) {
            fprintf(stderr, "meta_bench: %s: %u of %u watchers still waiting "
                    "after %d ms\n", what, left, opt_members, GIVE_UP_MS);
            exit(1);
        }
        nanosleep(&nap, NULL);
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: meta_bench [--metadata URL] [--members N (2-%d)] "
            "[--contexts K (1-%d)] [--rounds R] [--probes P] [--ttl S] "
            "[--provider P] [--domain D]\n",
            MAX_MEMBERS, MAX_CONTEXTS);
    exit(2);
}

static unsigned uarg(const char *s, unsigned lo, unsigned hi)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);

    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        usage();
    return (unsigned)v;
}

static void options(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (v == NULL)
            usage();
        i++;
        if (strcmp(o, "--metadata") == 0)
            opt_url = v;
        else if (strcmp(o, "--members") == 0)
            opt_members = uarg(v, 2, MAX_MEMBERS);
        else if (strcmp(o, "--contexts") == 0)
            opt_contexts = uarg(v, 1, MAX_CONTEXTS);
        else if (strcmp(o, "--rounds") == 0)
            opt_rounds = uarg(v, 1, 1000);
        else if (strcmp(o, "--probes") == 0)
            opt_probes = uarg(v, 1, 10000);
        else if (strcmp(o, "--ttl") == 0)
            opt_ttl = uarg(v, 2, 86400);
        else if (strcmp(o, "--provider") == 0)
            opt_provider = v;
        else if (strcmp(o, "--domain") == 0)
            opt_domain = v;
        else
            usage();
    }
}

int main(int argc, char **argv)
{
    static struct eu_cluster cluster;
    struct series open_s = {"ferry_meta_open", NULL, 0, 0};
    struct series pub_s = {"ferry_meta_publish", NULL, 0, 0};
    struct series join_s = {"join seen by each watcher", NULL, 0, 0};
    struct series leave_s = {"leave seen by each watcher", NULL, 0, 0};
    struct series popen_s = {"ferry_meta_open of the new member", NULL, 0, 0};
    char url[512], name[64];
    bool own_etcd;
    void *region;
    uint64_t t0;
    double sync_ms;
    int ret;

    options(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    own_etcd = opt_url == NULL;
    if (own_etcd) {
        const char *missing = eu_missing();

        if (missing != NULL) {
            fprintf(stderr, "meta_bench: %s (or pass --metadata URL)\n",
                    missing);
            return 77;
        }
        if (eu_start(&cluster, 1, 0) != 0) {
            fprintf(stderr, "meta_bench: starting etcd: %s\n", cluster.why);
            return 1;
        }
        snprintf(name, sizeof(name), "bench-%d", (int)getpid());
        eu_url(&cluster, name, 0, url, sizeof(url));
    } else {
        snprintf(url, sizeof(url), "%s", opt_url);
    }

    region = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        perror("meta_bench: mmap");
        return 1;
    }
    for (unsigned c = 0; c < opt_contexts; c++) {
        struct ferry_config cfg;

        ferry_config_init(&cfg);
        cfg.provider = opt_provider;
        cfg.domain = opt_domain[0] != '\0' ? opt_domain : NULL;
        cfg.local_only = 1;
        cfg.metadata_ttl_s = opt_ttl;
        if ((ret = ferry_context_create(&cfg, &ctxs[c])) != 0)
            die("ferry_context_create", ret);
        if ((ret = ferry_mem_register(ctxs[c], region, REGION, FERRY_MEM_HOST,
                                      0, FERRY_ACCESS_REMOTE_READ, &mems[c])))
            die("ferry_mem_register", ret);
    }
    printf("meta_bench: %u members on %u contexts, %s%s, TTL %u s\n",
           opt_members, opt_contexts, url,
           own_etcd ? " (a one-member etcd started here)" : "", opt_ttl);

    /* Everyone joins and watches; then every watcher has every JOIN. */
    t0 = now_ns();
    for (unsigned i = 0; i < opt_members; i++) {
        uint64_t t = now_ns();

        snprintf(name, sizeof(name), "m%04u", i);
        ret = ferry_meta_open(ctxs[i % opt_contexts], url, name,
                              &members[i].meta);
        if (ret != 0)
            die("ferry_meta_open", ret);
        add(&open_s, ms_since(t));
        if ((ret = ferry_meta_watch(members[i].meta)) != 0)
            die("ferry_meta_watch", ret);
    }
    await_all(FERRY_META_JOIN, NULL, t0, NULL, "the initial sync");
    sync_ms = ms_since(t0);

    for (unsigned r = 0; r < opt_rounds; r++)
        for (unsigned i = 0; i < opt_members; i++) {
            uint64_t t = now_ns();

            ret = ferry_meta_publish(members[i].meta, "kv",
                                     mems[i % opt_contexts]);
            if (ret != 0)
                die("ferry_meta_publish", ret);
            add(&pub_s, ms_since(t));
        }

    for (unsigned p = 0; p < opt_probes; p++) {
        ferry_meta_t *probe;

        snprintf(name, sizeof(name), "probe%u", p);
        t0 = now_ns();
        if ((ret = ferry_meta_open(ctxs[p % opt_contexts], url, name,
                                   &probe)) != 0)
            die("ferry_meta_open (probe)", ret);
        add(&popen_s, ms_since(t0));
        await_all(FERRY_META_JOIN, name, t0, &join_s, "join");
        t0 = now_ns();
        ferry_meta_close(probe);
        await_all(FERRY_META_LEAVE, name, t0, &leave_s, "leave");
    }

    printf("all %u watchers had all %u joins %.0f ms after the first open\n",
           opt_members, opt_members, sync_ms);
    printf("%-34s %8s %9s %9s %9s\n", "ms", "samples", "p50", "p99", "max");
    print_series(&open_s);
    print_series(&pub_s);
    print_series(&popen_s);
    print_series(&join_s);
    print_series(&leave_s);

    t0 = now_ns();
    for (unsigned i = 0; i < opt_members; i++)
        ferry_meta_close(members[i].meta);
    printf("closing the %u members took %.0f ms\n", opt_members, ms_since(t0));
    for (unsigned c = 0; c < opt_contexts; c++) {
        ferry_mem_close(mems[c]);
        ferry_context_close(ctxs[c]);
    }
    munmap(region, REGION);
    free(open_s.v);
    free(pub_s.v);
    free(join_s.v);
    free(leave_s.v);
    free(popen_s.v);
    if (own_etcd)
        eu_stop(&cluster);
    return 0;
}
