/*
 * rcache_bench: what a registration-cache hit costs, and how it scales.
 *
 *   rcache_bench [--iterations N] [--threads T] [--entries E] [--repeat R]
 *                [--quick] [--hit-only]
 *
 * Times, in one run on this machine:
 *   - a hit in ferry's cache: ferry__rcache_get + ferry__rcache_put (the
 *     path of every iov without lmem), with 1 and T threads, without and
 *     with a thread calling ferry_mem_invalidate on unrelated ranges in a
 *     loop.  With T threads, either every thread looks up any of the
 *     cached ranges ("shared"), or each its own share of them ("own"):
 *     a hit takes and drops a reference on its entry, so threads that
 *     share entries move those cache lines between their cores;
 *   - the same against a baseline written here: a sorted array under a
 *     pthread mutex (lookup, reference and release each under the lock),
 *     which is what most MR caches do;
 *   - no cache: ferry_mem_register + ferry_mem_close of 64 KiB, and
 *     raw fi_mr_reg + fi_close, on tcp;ofi_rxm and on shm; and, as proxies
 *     for a NIC provider (verbs, efa), which pins the pages in
 *     ibv_reg_mr, the pinning alone: io_uring buffer registration (the
 *     kernel's pin_user_pages(FOLL_LONGTERM), as ib_umem_get) and
 *     mlock + munlock (see reg_pin_setup).
 * --hit-only times the first case alone (one thread, no invalidations),
 * and the baseline's, and how long filling the cache took: the run
 * bench/scaling.sh repeats for 100 to 100 K entries.  It times them again
 * over HOT_SET entries spread evenly over the cache: the same searches,
 * with what they touch in the CPU's caches.
 * Each lookup thread goes over every entry of its share (all of them, or
 * its own part) in a random order, a new shuffle each pass, at a random
 * 4 KiB offset: a large cache is exercised whole, and neither the
 * prefetcher nor the branch predictor learns the order.  The cached
 * memory is mapped but never touched (lookups read only the cache's own
 * structures; tcp registers in software), so 100 K entries of 64 KiB take
 * no RAM.
 * Latencies are per operation, from batches of 64 lookups timed with
 * clock_gettime (p50/p99 over batches; the clock's own cost, printed, is
 * included); rates are lookups per second of wall time over all lookup
 * threads.  Each run is repeated (--repeat, default 3) and the one with
 * the best rate kept: on a shared machine, the others lost to neighbours.
 * The verdicts at the end compare against the targets; they are reported,
 * not asserted.  It times ferry's internals, so it links the library's
 * objects (lib/libferry-core.la) statically.
 */
#include "reg/rcache.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MIN_ADDRS 4096 /* lookup addresses per thread, at least (passes) */
#define ENTRY_LEN (64u << 10)
#define MAX_THREADS 16

static unsigned long opt_iterations = 2000000; /* lookups per thread */
static unsigned opt_threads = 2;
static size_t opt_entries = 256;
static unsigned long opt_reg_iterations = 20000;
static unsigned opt_repeat = 3;
static bool opt_hit_only;

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "rcache_bench: %s: %s (%s)\n", what, ferry_strerror(err),
            ferry_last_error());
    exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double percentile(double *v, size_t n, double p)
{
    size_t i;

    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_double);
    i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static void pin(unsigned cpu)
{
    cpu_set_t set;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    if (ncpu < 2)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpu % (unsigned)ncpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* ---- the mutex baseline ------------------------------------------------ */

struct base_entry {
    uintptr_t start, end;
    unsigned refs;
    bool dead;
};

struct base_cache {
    pthread_mutex_t lock;
    struct base_entry *e; /* sorted by start */
    size_t n;
    uint64_t hits, invalidations;
};

static struct base_entry *base_get(struct base_cache *c, uintptr_t start,
                                   uintptr_t end)
{
    struct base_entry *found = NULL;
    size_t lo = 0, hi;

    pthread_mutex_lock(&c->lock);
    hi = c->n;
    while (lo < hi) { /* first entry starting after start */
        size_t mid = lo + (hi - lo) / 2;
        if (c->e[mid].start <= start)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && c->e[lo - 1].end >= end && !c->e[lo - 1].dead) {
        found = &c->e[lo - 1];
        found->refs++;
        c->hits++;
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

static void base_put(struct base_cache *c, struct base_entry *e)
{
    pthread_mutex_lock(&c->lock);
    e->refs--;
    pthread_mutex_unlock(&c->lock);
}

static void base_invalidate(struct base_cache *c, uintptr_t start,
                            uintptr_t end)
{
    size_t lo = 0, hi;

    pthread_mutex_lock(&c->lock);
    hi = c->n;
    while (lo < hi) { /* first entry starting at or after end */
        size_t mid = lo + (hi - lo) / 2;
        if (c->e[mid].start < end)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo-- > 0 && c->e[lo].end > start) {
        if (!c->e[lo].dead)
            c->invalidations++;
        c->e[lo].dead = true;
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- lookup runs -------------------------------------------------------- */

enum which { FERRY, BASELINE };

/* --hit-only's working set that fits the CPU's caches. */
#define HOT_SET 64

struct run {
    enum which which;
    ferry_context_t *ctx;
    struct base_cache *base;
    uint8_t *region; /* opt_entries entries of ENTRY_LEN */
    uint8_t *far;    /* what the invalidation stream hits */
    unsigned nthreads;
    bool invalidations;
    bool own; /* each thread looks up its own share of the entries */
    size_t hot; /* if not 0, only this many entries, spread over all */
    /* Shared */
    pthread_barrier_t start;
    atomic_bool stop;
    _Atomic uint64_t inv_count;
    /* Results */
    double *batches[MAX_THREADS];
    size_t nbatches[MAX_THREADS];
    double t0[MAX_THREADS], t1[MAX_THREADS];
    unsigned long misses[MAX_THREADS];
};

struct lookup_arg {
    struct run *run;
    unsigned idx;
};

static uint64_t next_rand(uint64_t *rng)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return *rng >> 20;
}

static void *lookup_main(void *p)
{
    struct lookup_arg *a = p;
    struct run *r = a->run;
    size_t share = r->hot     ? r->hot
                   : r->own ? opt_entries / r->nthreads
                            : opt_entries;
    size_t first = r->own ? a->idx * share : 0;
    /* A hot set lies spread over the whole cache: every search still
     * goes through all the entries. */
    size_t stride = r->hot ? opt_entries / r->hot : 1;
    /* Whole passes over the share, at least MIN_ADDRS lookups. */
    size_t naddrs = share * ((MIN_ADDRS + share - 1) / share);
    size_t nb = opt_iterations / BATCH, k = 0, next = 0;
    double *lat = malloc(nb * sizeof(double));
    uintptr_t *addrs = malloc(naddrs * sizeof(uintptr_t));
    uint64_t rng = 0x9e3779b97f4a7c15ull * (a->idx + 1);

    if (lat == NULL || addrs == NULL)
        die("malloc", FERRY_ENOMEM);
    /* Each pass a shuffle (Fisher-Yates) of the share's entries, a 4 KiB
     * piece of each, chosen before the clock starts. */
    for (size_t pass = 0; pass < naddrs; pass += share) {
        uintptr_t *v = addrs + pass;

        for (size_t i = 0; i < share; i++)
            v[i] = (uintptr_t)r->region + (first + i * stride) * ENTRY_LEN +
                   (next_rand(&rng) % 8) * 4096 + 64;
        for (size_t i = share - 1; i > 0; i--) {
            size_t j = (size_t)(next_rand(&rng) % (i + 1));
            uintptr_t t = v[i];

            v[i] = v[j];
            v[j] = t;
        }
    }
    pin(a->idx);
    pthread_barrier_wait(&r->start);
    r->t0[a->idx] = now_ns();
    for (size_t b = 0; b < nb; b++) {
        double t = now_ns();

        for (unsigned i = 0; i < BATCH; i++) {
            uintptr_t addr = addrs[next];

            if (++next == naddrs)
                next = 0;

            if (r->which == FERRY) {
                struct ferry_mem *mem;
                struct ferry__rc_entry *ent;

                ferry__rcache_get(r->ctx, (void *)addr, 4000, &mem, &ent);
                if (ent != NULL)
                    ferry__rcache_put(ent);
                else
                    r->misses[a->idx]++; /* a miss is a one-shot here */
                if (ent == NULL)
                    ferry__mem_close(mem);
            } else {
                struct base_entry *ent =
                    base_get(r->base, addr, addr + 4000);
                if (ent != NULL)
                    base_put(r->base, ent);
                else
                    r->misses[a->idx]++;
            }
        }
        lat[k++] = (now_ns() - t) / BATCH;
    }
    r->t1[a->idx] = now_ns();
    free(addrs);
    r->batches[a->idx] = lat;
    r->nbatches[a->idx] = k;
    return NULL;
}

static void *invalidate_main(void *p)
{
    struct run *r = p;
    uint64_t i = 0;

    pthread_barrier_wait(&r->start);
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        uint8_t *a = r->far + (i % 64) * 4096;

        if (r->which == FERRY)
            ferry_mem_invalidate(a, 4096);
        else
            base_invalidate(r->base, (uintptr_t)a, (uintptr_t)a + 4096);
        i++;
    }
    atomic_store(&r->inv_count, i);
    return NULL;
}

struct result {
    double p50, p99, rate, inv_rate;
    unsigned long misses;
};

static struct result run_lookups(struct run *r)
{
    pthread_t th[MAX_THREADS], inv;
    struct lookup_arg args[MAX_THREADS];
    struct result res = {0};
    size_t total = 0;
    double *all, t0 = 1e300, t1 = 0;

    atomic_store(&r->stop, false);
    pthread_barrier_init(&r->start, NULL,
                         r->nthreads + (r->invalidations ? 1 : 0));
    for (unsigned i = 0; i < r->nthreads; i++) {
        args[i] = (struct lookup_arg){r, i};
        r->misses[i] = 0;
        pthread_create(&th[i], NULL, lookup_main, &args[i]);
    }
    if (r->invalidations)
        pthread_create(&inv, NULL, invalidate_main, r);
    for (unsigned i = 0; i < r->nthreads; i++)
        pthread_join(th[i], NULL);
    atomic_store(&r->stop, true);
    if (r->invalidations)
        pthread_join(inv, NULL);
    pthread_barrier_destroy(&r->start);

    for (unsigned i = 0; i < r->nthreads; i++) {
        total += r->nbatches[i];
        if (r->t0[i] < t0)
            t0 = r->t0[i];
        if (r->t1[i] > t1)
            t1 = r->t1[i];
        res.misses += r->misses[i];
    }
    all = malloc(total * sizeof(double));
    total = 0;
    for (unsigned i = 0; i < r->nthreads; i++) {
        memcpy(all + total, r->batches[i], r->nbatches[i] * sizeof(double));
        total += r->nbatches[i];
        free(r->batches[i]);
    }
    res.p50 = percentile(all, total, 0.50);
    res.p99 = percentile(all, total, 0.99);
    res.rate = (double)(total * BATCH) / ((t1 - t0) / 1e9);
    res.inv_rate = r->invalidations
                       ? (double)atomic_load(&r->inv_count) / ((t1 - t0) / 1e9)
                       : 0;
    free(all);
    return res;
}

/* ---- registration without a cache ----------------------------------------- */

enum reg_kind {
    REG_FERRY, /* ferry_mem_register + ferry_mem_close */
    REG_RAW,   /* fi_mr_reg + fi_close on the context's first domain */
    REG_PIN,   /* io_uring buffer registration: pin + unpin (NIC proxy) */
    REG_MLOCK, /* mlock + munlock (second NIC proxy) */
};

struct reg_result {
    bool ok;
    char why[128]; /* when !ok */
    double p50, p99, mean;
};

/*
 * The proxies for what a NIC provider pays.  ibv_reg_mr (verbs, and efa's
 * registration underneath) enters the kernel, which pins the pages with
 * pin_user_pages_fast(FOLL_LONGTERM) in ib_umem_get, maps them for DMA and
 * has the NIC write their translation; ibv_dereg_mr undoes the three.
 * IORING_REGISTER_BUFFERS pins the same way (FOLL_LONGTERM, and charges
 * RLIMIT_MEMLOCK) and IORING_UNREGISTER_BUFFERS unpins: the pinning half
 * alone, with no DMA mapping and no NIC command, so a lower bound.
 * mlock + munlock faults in and locks the pages and takes mmap_lock for
 * writing, which ib_umem_get does not: a second, rougher proxy.
 */
static int reg_pin_setup(int *ring, char *why, size_t n)
{
    struct io_uring_params params;

    memset(&params, 0, sizeof(params));
    *ring = (int)syscall(SYS_io_uring_setup, 4, &params);
    if (*ring < 0) {
        snprintf(why, n, "io_uring_setup: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int reg_once(ferry_context_t *ctx, enum reg_kind kind, int ring,
                    uint8_t *buf, unsigned long i, char *why, size_t n)
{
    int ret;

    switch (kind) {
    case REG_FERRY: {
        ferry_mem_t *mem;

        ret = ferry_mem_register(ctx, buf, ENTRY_LEN, FERRY_MEM_HOST, 0,
                                 FERRY_ACCESS_REMOTE_READ |
                                     FERRY_ACCESS_REMOTE_WRITE,
                                 &mem);
        if (ret == 0)
            ret = ferry_mem_close(mem);
        if (ret != 0)
            snprintf(why, n, "ferry_mem_register: %s (%s)",
                     ferry_strerror(ret), ferry_last_error());
        return ret;
    }
    case REG_RAW: {
        struct fid_mr *mr;

        /* Keys far from ferry's own. */
        ret = fi_mr_reg(ferry__fabric_of(ctx)->rails[0].domain, buf, ENTRY_LEN,
                        FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                        0, (1ull << 40) + i, 0, &mr, NULL);
        if (ret == 0)
            ret = fi_close(&mr->fid);
        if (ret != 0)
            snprintf(why, n, "fi_mr_reg: %s", fi_strerror(-ret));
        return ret;
    }
    case REG_PIN: {
        struct iovec iov = {.iov_base = buf, .iov_len = ENTRY_LEN};

        if (syscall(SYS_io_uring_register, ring, IORING_REGISTER_BUFFERS,
                    &iov, 1) != 0 ||
            syscall(SYS_io_uring_register, ring, IORING_UNREGISTER_BUFFERS,
                    NULL, 0) != 0) {
            snprintf(why, n, "io_uring_register: %s", strerror(errno));
            return -1;
        }
        return 0;
    }
    case REG_MLOCK:
        if (mlock(buf, ENTRY_LEN) != 0 || munlock(buf, ENTRY_LEN) != 0) {
            snprintf(why, n, "mlock: %s", strerror(errno));
            return -1;
        }
        return 0;
    }
    return -1;
}

static struct reg_result time_register(ferry_context_t *ctx,
                                       enum reg_kind kind)
{
    uint8_t *buf = mmap(NULL, ENTRY_LEN, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double *lat = malloc(opt_reg_iterations * sizeof(double)), sum = 0;
    struct reg_result res = {.ok = true};
    int ring = -1;

    if (buf == MAP_FAILED || lat == NULL)
        die("memory for the registration runs", FERRY_ENOMEM);
    memset(buf, 1, ENTRY_LEN);
    if (ctx == NULL && (kind == REG_FERRY || kind == REG_RAW)) {
        res.ok = false;
        snprintf(res.why, sizeof(res.why), "no context on this provider");
    } else if (kind == REG_PIN &&
               reg_pin_setup(&ring, res.why, sizeof(res.why)) != 0) {
        res.ok = false;
    }
    for (unsigned long i = 0; res.ok && i < opt_reg_iterations; i++) {
        double t = now_ns();

        if (reg_once(ctx, kind, ring, buf, i, res.why, sizeof(res.why)) !=
            0) {
            res.ok = false;
            break;
        }
        lat[i] = now_ns() - t;
        sum += lat[i];
    }
    if (res.ok) {
        res.mean = sum / (double)opt_reg_iterations;
        res.p50 = percentile(lat, opt_reg_iterations, 0.50);
        res.p99 = percentile(lat, opt_reg_iterations, 0.99);
    }
    if (ring >= 0)
        close(ring);
    free(lat);
    munmap(buf, ENTRY_LEN);
    return res;
}

static void reg_row(const char *what, const struct reg_result *r,
                    double hit_p50)
{
    if (!r->ok) {
        printf("  %-52s unavailable: %s\n", what, r->why);
        return;
    }
    printf("  %-52s %8.0f %8.0f %8.0f %9.0fx\n", what, r->p50, r->p99,
           r->mean, r->p50 / hit_p50);
}

static void reg_verdict(const char *what, const struct reg_result *r,
                        double hit_p50)
{
    char label[96];

    snprintf(label, sizeof(label), "  vs %s:", what);
    if (!r->ok)
        printf("  %-56s unavailable\n", label);
    else
        printf("  %-56s %8.0fx    %s\n", label, r->p50 / hit_p50,
               r->p50 / hit_p50 >= 100 ? "met" : "MISSED");
}

/* ---- main ------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: rcache_bench [--iterations N] [--threads T] "
            "[--entries E] [--repeat R] [--quick]\n"
            "                    [--hit-only]\n"
            "  --iterations N  cache lookups per thread and run (default "
            "2000000)\n"
            "  --threads T     threads of the multi-threaded runs (default "
            "2, at most %d)\n"
            "  --entries E     cached 64 KiB ranges looked up (default "
            "256)\n"
            "  --repeat R      runs of each case, best kept (default 3)\n"
            "  --quick         few iterations: a smoke test\n"
            "  --hit-only      only the hit, one thread, ferry's and the "
            "baseline's\n"
            "                  (p50, p99), and the time the cache took to "
            "fill\n"
            "  (counts take K and M: thousands and millions)\n",
            MAX_THREADS);
    exit(2);
}

/* A positive count; K and M multiply by 1000 and 1000000. */
static unsigned long parse_count(const char *flag, const char *s)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (end != s && *end == 'K')
        v *= 1000, end++;
    else if (end != s && *end == 'M')
        v *= 1000000, end++;
    if (end == s || *end != '\0' || v == 0 || errno != 0 || s[0] == '-') {
        fprintf(stderr, "rcache_bench: %s %s: give a positive number (K and "
                "M suffixes allowed)\n", flag, s);
        exit(2);
    }
    return v;
}

static void row(const char *what, unsigned threads, const char *entries,
                bool inv, const struct result *r)
{
    char inv_s[32];

    if (inv)
        snprintf(inv_s, sizeof(inv_s), "%.1f M/s", r->inv_rate / 1e6);
    else
        snprintf(inv_s, sizeof(inv_s), "-");
    printf("  %-22s %7u %7s %12s %8.1f %8.1f %11.1f %6lu\n", what, threads,
           entries, inv_s, r->p50, r->p99, r->rate / 1e6, r->misses);
}

/* The one-minute load average printed with the results, -1 if unknown. */
static double load_average(void)
{
    double load[3];

    return getloadavg(load, 3) < 0 ? -1 : load[0];
}

int main(int argc, char **argv)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    struct base_cache base = {.lock = PTHREAD_MUTEX_INITIALIZER};
    struct run run;
    struct result f1, f2, f2o, f1i, f2i, f2oi, b1, b2, b1i, b2i;
    struct reg_result reg, raw, reg_shm, raw_shm, pin, lock;
    ferry_context_t *shm_ctx = NULL;
    size_t region_len;
    uint8_t *region, *far;
    struct ferry_stats st = FERRY_STATS_INIT;
    double fill_s;
    int ret;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc)
            opt_iterations = parse_count(argv[i], argv[i + 1]), i++;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            opt_threads = (unsigned)parse_count(argv[i], argv[i + 1]), i++;
        else if (strcmp(argv[i], "--entries") == 0 && i + 1 < argc)
            opt_entries = parse_count(argv[i], argv[i + 1]), i++;
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            opt_repeat = (unsigned)parse_count(argv[i], argv[i + 1]), i++;
        else if (strcmp(argv[i], "--quick") == 0) {
            opt_iterations = 20000;
            opt_reg_iterations = 500;
            opt_repeat = 1;
        } else if (strcmp(argv[i], "--hit-only") == 0)
            opt_hit_only = true;
        else
            usage();
    }
    if (opt_threads > MAX_THREADS) {
        fprintf(stderr, "rcache_bench: --threads %u: at most %d\n",
                opt_threads, MAX_THREADS);
        return 2;
    }
    if (!opt_hit_only && opt_entries < opt_threads) { /* "own" runs */
        fprintf(stderr, "rcache_bench: --entries %zu: at least one per "
                "thread (--threads %u)\n", opt_entries, opt_threads);
        return 2;
    }
    if (opt_iterations < BATCH) {
        fprintf(stderr, "rcache_bench: --iterations %lu: at least %d\n",
                opt_iterations, BATCH);
        return 2;
    }
    if (opt_entries > SIZE_MAX / ENTRY_LEN) {
        fprintf(stderr, "rcache_bench: --entries %zu: too many\n",
                opt_entries);
        return 2;
    }

    ferry_config_init(&cfg);
    cfg.provider = "tcp;ofi_rxm";
    cfg.domain = "lo";
    cfg.local_only = 1;
    cfg.progress_thread = 0;
    cfg.rcache_max_entries = opt_entries + 16;
    if ((ret = ferry_context_create(&cfg, &ctx)))
        die("ferry_context_create", ret);

    /* opt_entries cached ranges, each its own entry (miss, then cached).
     * Never touched: no RAM, nor swap reserved, for the pages. */
    region_len = opt_entries * ENTRY_LEN;
    region = mmap(NULL, region_len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    far = mmap(NULL, 64 * 4096, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED || far == MAP_FAILED)
        die("mmap", FERRY_ENOMEM);
    base.e = calloc(opt_entries, sizeof(*base.e));
    if (base.e == NULL)
        die("calloc", FERRY_ENOMEM);
    base.n = opt_entries;
    fill_s = now_ns();
    for (size_t i = 0; i < opt_entries; i++) {
        struct ferry_mem *mem;
        struct ferry__rc_entry *ent;

        ret = ferry__rcache_get(ctx, region + i * ENTRY_LEN, ENTRY_LEN, &mem,
                                &ent);
        if (ret != 0 || ent == NULL)
            die("filling the cache", ret != 0 ? ret : FERRY_EINVAL);
        ferry__rcache_put(ent);
        base.e[i].start = (uintptr_t)(region + i * ENTRY_LEN);
        base.e[i].end = base.e[i].start + ENTRY_LEN;
    }
    fill_s = (now_ns() - fill_s) / 1e9;

    memset(&run, 0, sizeof(run));
    run.ctx = ctx;
    run.base = &base;
    run.region = region;
    run.far = far;

#define RUN(out, w, n, inv, own_)                                             \
    do {                                                                      \
        run.which = (w);                                                      \
        run.nthreads = (n);                                                   \
        run.invalidations = (inv);                                            \
        run.own = (own_);                                                     \
        (out) = run_lookups(&run);                                            \
        for (unsigned rep_ = 1; rep_ < opt_repeat; rep_++) {                  \
            struct result again_ = run_lookups(&run);                         \
            if (again_.rate > (out).rate)                                     \
                (out) = again_;                                               \
        }                                                                     \
    } while (0)

    RUN(f1, FERRY, 1, false, false); /* warm-up */
    RUN(f1, FERRY, 1, false, false);
    if (opt_hit_only) {
        printf("rcache_bench: hit only, one thread: %zu cached 64 KiB "
               "ranges (filled in %.2f s), %lu lookups per run in random "
               "order over all of them, best of %u; load average %.1f; "
               "%s\n",
               opt_entries, fill_s, opt_iterations, opt_repeat, load_average(),
               ferry_version_string());
        printf("  ferry get+put: p50 %.1f ns, p99 %.1f ns, %.1f M "
               "lookups/s, %lu misses\n",
               f1.p50, f1.p99, f1.rate / 1e6, f1.misses);
        /* The same lookups in the baseline, for scale: how a usual cache
         * of this many entries slows down. */
        RUN(b1, BASELINE, 1, false, false);
        printf("  mutex + sorted array: p50 %.1f ns, p99 %.1f ns, %.1f M "
               "lookups/s, %lu misses\n",
               b1.p50, b1.p99, b1.rate / 1e6, b1.misses);
        /* The same search over every entry, but a working set that stays
         * in the CPU's caches: what the cache's structure costs, apart
         * from fetching a random entry from memory. */
        run.hot = opt_entries < HOT_SET ? opt_entries : HOT_SET;
        RUN(f1, FERRY, 1, false, false);
        RUN(b1, BASELINE, 1, false, false);
        printf("  %zu hot entries spread over all: ferry p50 %.1f ns, "
               "mutex + sorted array p50 %.1f ns\n",
               run.hot, f1.p50, b1.p50);
        ferry_context_close(ctx);
        munmap(region, region_len);
        munmap(far, 64 * 4096);
        free(base.e);
        return 0;
    }
    RUN(f2, FERRY, opt_threads, false, false);
    RUN(f2o, FERRY, opt_threads, false, true);
    RUN(f1i, FERRY, 1, true, false);
    RUN(f2i, FERRY, opt_threads, true, false);
    RUN(f2oi, FERRY, opt_threads, true, true);
    RUN(b1, BASELINE, 1, false, false);
    RUN(b2, BASELINE, opt_threads, false, false);
    RUN(b1i, BASELINE, 1, true, false);
    RUN(b2i, BASELINE, opt_threads, true, false);
    reg = time_register(ctx, REG_FERRY);
    raw = time_register(ctx, REG_RAW);
    /* shm, in the same run; a context without a cache of its own. */
    cfg.provider = "shm";
    cfg.domain = NULL;
    cfg.registration_cache = 0;
    if (ferry_context_create(&cfg, &shm_ctx) != 0)
        shm_ctx = NULL;
    reg_shm = time_register(shm_ctx, REG_FERRY);
    raw_shm = time_register(shm_ctx, REG_RAW);
    ferry_context_close(shm_ctx);
    pin = time_register(NULL, REG_PIN);
    lock = time_register(NULL, REG_MLOCK);

    {
        double t = now_ns();

        for (int i = 0; i < 1000; i++)
            (void)now_ns();
        t = (now_ns() - t) / 1000;
        printf("rcache_bench: %lu lookups per thread and run, best of %u; "
               "%zu cached 64 KiB ranges, lookups of 4000 bytes; %ld CPUs, "
               "load average %.1f; clock_gettime %.0f ns (%.1f ns per "
               "lookup in a batch); %s\n",
               opt_iterations, opt_repeat, opt_entries,
               sysconf(_SC_NPROCESSORS_ONLN), load_average(), t, t / BATCH,
               ferry_version_string());
    }
    printf("  %-22s %7s %7s %12s %8s %8s %11s %6s\n", "hit path", "threads",
           "entries", "invalidating", "p50 ns", "p99 ns", "M lookups/s",
           "misses");
    row("ferry get+put", 1, "all", false, &f1);
    row("ferry get+put", opt_threads, "shared", false, &f2);
    row("ferry get+put", opt_threads, "own", false, &f2o);
    row("ferry get+put", 1, "all", true, &f1i);
    row("ferry get+put", opt_threads, "shared", true, &f2i);
    row("ferry get+put", opt_threads, "own", true, &f2oi);
    row("mutex + sorted array", 1, "all", false, &b1);
    row("mutex + sorted array", opt_threads, "shared", false, &b2);
    row("mutex + sorted array", 1, "all", true, &b1i);
    row("mutex + sorted array", opt_threads, "shared", true, &b2i);
    printf("\n  %-52s %8s %8s %8s %10s\n",
           "no cache, per transfer (64 KiB, 16 pages)", "p50 ns", "p99 ns",
           "mean ns", "/ hit p50");
    reg_row("ferry_mem_register + _deregister, tcp;ofi_rxm", &reg, f1.p50);
    reg_row("fi_mr_reg + fi_close, tcp;ofi_rxm", &raw, f1.p50);
    reg_row("ferry_mem_register + _deregister, shm", &reg_shm, f1.p50);
    reg_row("fi_mr_reg + fi_close, shm", &raw_shm, f1.p50);
    reg_row("NIC proxy: pin + unpin (io_uring buffers)", &pin, f1.p50);
    reg_row("NIC proxy: mlock + munlock", &lock, f1.p50);
    printf("  (tcp and shm register in software: a key-table insert, no "
           "pinning; the proxies\n   pin the pages as ibv_reg_mr does, "
           "without its DMA mapping and NIC command)\n");

    printf("\ntargets (reported, not asserted):\n");
    printf("  %-56s %8.1f ns %s\n", "hit p50 <= 50 ns, one thread:", f1.p50,
           f1.p50 <= 50 ? "met" : "MISSED");
    printf("  >= 100x cheaper than register + deregister of 64 KiB (p50):\n");
    reg_verdict("ferry_mem_register, tcp;ofi_rxm", &reg, f1.p50);
    reg_verdict("ferry_mem_register, shm", &reg_shm, f1.p50);
    reg_verdict("NIC proxy, pin + unpin (lower bound)", &pin, f1.p50);
    printf("  %u threads >= 1.6x one thread's rate, own entries:%*s %8.2fx    "
           "%s\n",
           opt_threads, 7, "", f2o.rate / f1.rate,
           f2o.rate / f1.rate >= 1.6 ? "met" : "MISSED");
    printf("  %u threads >= 1.6x one thread's rate, shared entries:%*s "
           "%8.2fx    %s\n",
           opt_threads, 4, "", f2.rate / f1.rate,
           f2.rate / f1.rate >= 1.6 ? "met" : "MISSED");
    printf("  >= 3x the mutex baseline, %u threads, invalidations running:"
           "%8.2fx    %s (own entries: %.2fx)\n",
           opt_threads, f2i.rate / b2i.rate,
           f2i.rate / b2i.rate >= 3 ? "met" : "MISSED",
           f2oi.rate / b2i.rate);

    ferry_context_stats(ctx, &st);
    if (f1.misses + f2.misses + f2o.misses + f1i.misses + f2i.misses +
            f2oi.misses !=
        0)
        printf("note: some ferry lookups missed (a lookup that meets the "
               "monitor handling events goes the slow way)\n");
    ferry_context_close(ctx);
    munmap(region, region_len);
    munmap(far, 64 * 4096);
    free(base.e);
    return 0;
}
