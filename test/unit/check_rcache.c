/*
 * rcache module: the registration cache behind iovs without lmem, its
 * userfaultfd monitor, and ferry_mem_invalidate (DESIGN.md, invariants
 * I1-I3).
 *
 *  semantics  hits, misses, sub-ranges, overlaps; every way memory
 *             changes under a cached range (munmap, mmap MAP_FIXED,
 *             mremap, madvise, brk) invalidates it; caps and eviction
 *             (from the config and from FERRY_RCACHE_MAX_*);
 *             a registration used by a request in flight stays open;
 *             explicit invalidation without the monitor; file-backed
 *             memory and a disabled cache register per request.
 *  i1         ferry_mem_invalidate preserves errno, allocates nothing,
 *             takes no lock, logs nothing, ignores empty and wrapping
 *             ranges, and runs in signal handlers that interrupt ferry.
 *  allocator  the deadlock class of libfabric #10879 / Open MPI #13149:
 *             an allocator whose malloc and free madvise and munmap
 *             watched memory and call ferry_mem_invalidate, even under
 *             ferry's writer lock; the invalidation ring wrapping while
 *             a miss registers.  test/rcache_mimalloc.sh runs this case
 *             again with the real mimalloc preloaded.
 *  model      a seeded random walk checked step by step against a model
 *             of the cache.
 *
 * rcache_hooks.c, linked in, replaces the malloc family of this program
 * (it only forwards until a test arms it).  Concurrent tests run under a
 * watchdog that ends the test with a message instead of hanging.
 */
#include "testutil.h"

#include "rcache_hooks.h"

#include "reg/rcache.h"
#include "reg/monitor.h"
#include "xfer/op.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define PG ((size_t)4096)
/* rcache.c's ring of recent invalidations. */
#define RING_SLOTS 1024

/* ---- helpers ------------------------------------------------------------ */

static char msg_buf[256];
static const char *msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *msg(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg_buf, sizeof(msg_buf), fmt, ap);
    va_end(ap);
    return msg_buf;
}

static double now_s(void)
{
    return (double)tu_now_ns() / 1e9;
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: reproducible from the seed. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static uintptr_t page_down(uintptr_t a)
{
    return a & ~(uintptr_t)(PG - 1);
}

static uintptr_t page_up(uintptr_t a)
{
    return (a + PG - 1) & ~(uintptr_t)(PG - 1);
}

/*
 * munmap(), madvise() and mremap() return once the monitor has read their
 * event; it marks the entries just after, while its sequence is odd.
 * Waits for that, so stats and lookups see the result.
 */
static void settle_monitor(void)
{
    double until = now_s() + 20;

    while (ferry__monitor_seq() & 1) {
        ck_assert_msg(now_s() < until,
                      "the userfaultfd monitor has been handling one batch "
                      "of events for 20 s");
        sched_yield();
    }
}

/*
 * A pair of contexts (tu_pair) and a target region the initiator reaches
 * through rmem.  A stalled rig has no progress thread on the target:
 * nothing lands unless the test progresses it.
 */
struct rig {
    struct tu_pair p;
    const char *prov;
    bool stalled;
    uint8_t *tbuf;
    size_t tlen;
    ferry_mem_t *tmem;
    ferry_rmem_t *rmem;
};

/* Drives req to its end, progressing a stalled target too; frees it. */
static void drive(struct rig *r, ferry_req_t *req, const char *what)
{
    int ret;

    if (r->stalled) {
        tu_finish_on_stalled(r->p.target, req, what);
        return;
    }
    ret = ferry_req_wait(req, 60000);
    ck_assert_msg(ret == 0, "%s: ended with %s: %s", what, ferry_strerror(ret),
                  ferry_last_error());
    ferry_req_close(req);
}

static void rig_open(struct rig *r, const char *prov,
                     const struct ferry_config *base, bool stalled,
                     size_t tlen)
{
    struct ferry_config cfg;
    int ret;

    memset(r, 0, sizeof(*r));
    if (base != NULL)
        cfg = *base;
    else
        tu_config(&cfg, prov);
    cfg.provider = prov;
    cfg.domain = strstr(prov, "tcp") != NULL ? "lo" : NULL;
    r->prov = prov;
    r->stalled = stalled;
    if (stalled)
        tu_pair_open_threads(&r->p, cfg.provider, &cfg, 0, 0);
    else
        tu_pair_open(&r->p, prov, &cfg);
    r->tlen = tlen;
    r->tbuf = tu_alloc_buf(tlen);
    ret = ferry_mem_register(r->p.target, r->tbuf, tlen, FERRY_MEM_HOST, 0,
                             RW, &r->tmem);
    ck_assert_msg(ret == 0, "target register on %s: %s", prov,
                  ferry_last_error());
    r->rmem = tu_share(r->tmem, r->p.peer);
    if (stalled) {
        /* Connection set-up needs the target's progress: do it now with a
         * registered byte (not through the cache) on every rail (small
         * requests take them in turn), so that later operations go out
         * when posted. */
        uint8_t *b = tu_alloc_buf(PG);
        ferry_mem_t *m;
        struct ferry_iov iov = {b, NULL, r->rmem, 0, 1};
        ferry_req_t *req;

        ck_assert_int_eq(ferry_mem_register(r->p.init, b, PG, FERRY_MEM_HOST,
                                            0, 0, &m),
                         0);
        iov.lmem = m;
        for (unsigned i = 0; i < tu_info(r->p.init).nrails; i++) {
            b[0] = (uint8_t)(0xe0 + i);
            ck_assert_int_eq(ferry_write(r->p.peer, &iov, 1, NULL, &req), 0);
            drive(r, req, "warm-up write");
            ck_assert_uint_eq(r->tbuf[0], 0xe0 + i);
        }
        ck_assert_int_eq(ferry_mem_close(m), 0);
        tu_free_buf(b, PG);
    }
}

static void rig_close(struct rig *r)
{
    ck_assert_int_eq(ferry_rmem_close(r->rmem), 0);
    ck_assert_int_eq(ferry_mem_close(r->tmem), 0);
    tu_pair_close(&r->p);
    tu_free_buf(r->tbuf, r->tlen);
}

/* Writes [local, +len) to the target at roff with lmem == NULL. */
static void put_at(struct rig *r, const void *local, size_t len, uint64_t roff,
                   const char *what)
{
    struct ferry_iov iov = {(void *)local, NULL, r->rmem, roff, len};
    ferry_req_t *req = NULL;
    int ret = ferry_write(r->p.peer, &iov, 1, NULL, &req);

    ck_assert_msg(ret == 0, "%s: ferry_write on %s: %s: %s", what, r->prov,
                  ferry_strerror(ret), ferry_last_error());
    drive(r, req, what);
}

/* Fills local with pattern seed, writes it, and checks it landed. */
static void put_check(struct rig *r, void *local, size_t len, uint64_t seed,
                      const char *what)
{
    size_t bad;

    tu_fill(local, len, seed);
    settle_monitor(); /* the fill may have faulted on a watched page */
    put_at(r, local, len, 0, what);
    bad = tu_check(r->tbuf, len, seed);
    ck_assert_msg(bad == SIZE_MAX,
                  "%s on %s: byte %zu of %zu at the target is not the new "
                  "pattern",
                  what, r->prov, bad, len);
}

static struct ferry_stats stats(ferry_context_t *ctx)
{
    struct ferry_stats s = FERRY_STATS_INIT;

    ck_assert_int_eq(ferry_context_stats(ctx, &s), 0);
    return s;
}

/* Asserts the counters moved by exactly these amounts since `before`. */
#define EXPECT_DELTA(ctx, before, h, m, o, what)                              \
    do {                                                                      \
        struct ferry_stats a_ = stats(ctx);                                   \
        ck_assert_msg(a_.rcache_hits - (before).rcache_hits == (h) &&         \
                          a_.rcache_misses - (before).rcache_misses == (m) && \
                          a_.oneshot_registrations -                          \
                                  (before).oneshot_registrations ==           \
                              (o),                                            \
                      "%s: hits +%llu misses +%llu one-shot +%llu; expected " \
                      "+%d +%d +%d",                                          \
                      (what),                                                 \
                      (unsigned long long)(a_.rcache_hits -                   \
                                           (before).rcache_hits),             \
                      (unsigned long long)(a_.rcache_misses -                 \
                                           (before).rcache_misses),           \
                      (unsigned long long)(a_.oneshot_registrations -         \
                                           (before).oneshot_registrations),   \
                      (int)(h), (int)(m), (int)(o));                          \
    } while (0)

#define EXPECT_LIVE(ctx, n, bytes, what)                                      \
    do {                                                                      \
        struct ferry_stats l_ = stats(ctx);                                   \
        ck_assert_msg(l_.rcache_entries == (n) && l_.rcache_bytes == (bytes), \
                      "%s: %llu live entries of %llu bytes; expected %llu "   \
                      "of %llu",                                              \
                      (what), (unsigned long long)l_.rcache_entries,          \
                      (unsigned long long)l_.rcache_bytes,                    \
                      (unsigned long long)(n), (unsigned long long)(bytes));  \
    } while (0)

static uint64_t invalidations(ferry_context_t *ctx)
{
    return stats(ctx).rcache_invalidations;
}

/*
 * The head of struct ferry__rcache (private to rcache.c), mirrored to find
 * its writer lock for the tests that check what happens while ferry holds
 * it.  writer_lock() validates the mirror against the fields it can know.
 */
struct rc_head {
    struct ferry_context *ctx;
    void *snap;
    size_t max_entries, max_bytes;
    pthread_mutex_t writer;
};

static pthread_mutex_t *writer_lock(ferry_context_t *ctx, size_t max_entries,
                                    size_t max_bytes)
{
    struct rc_head *h = (struct rc_head *)ferry__reg_of(ctx)->rcache;

    ck_assert_ptr_nonnull(h);
    ck_assert_msg(h->ctx == ctx && h->max_entries == max_entries &&
                      h->max_bytes == max_bytes,
                  "struct ferry__rcache no longer starts with ctx, snap, "
                  "max_entries, max_bytes, writer: update struct rc_head in "
                  "check_rcache.c");
    return &h->writer;
}

/*
 * A watchdog for the concurrent tests: if none of the watched counters
 * moves for `seconds`, it prints what each thread was doing and ends the
 * test process, so that a deadlock fails the test with a message instead
 * of hanging CI.  It neither allocates nor takes locks.
 */
#define WD_MAX 4
struct watchdog {
    pthread_t thread;
    atomic_bool stop;
    const char *what;
    int seconds;
    unsigned n;
    _Atomic uint64_t progress[WD_MAX];
    _Atomic(const char *) stage[WD_MAX];
};

static void *watchdog_main(void *arg)
{
    struct watchdog *w = arg;
    uint64_t last[WD_MAX] = {0};
    double since = now_s();

    rh_exempt_thread();
    while (!atomic_load(&w->stop)) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        bool moved = false;

        nanosleep(&ts, NULL);
        for (unsigned i = 0; i < w->n; i++) {
            uint64_t p = atomic_load(&w->progress[i]);
            moved |= p != last[i];
            last[i] = p;
        }
        if (moved)
            since = now_s();
        else if (now_s() - since > w->seconds) {
            char line[512];
            int len = snprintf(line, sizeof(line),
                               "\nWATCHDOG: %s: no progress for %d s, a "
                               "deadlock:",
                               w->what, w->seconds);
            for (unsigned i = 0; i < w->n && len < (int)sizeof(line); i++)
                len += snprintf(line + len, sizeof(line) - (size_t)len,
                                " [thread %u: %llu iterations, now %s]", i,
                                (unsigned long long)last[i],
                                atomic_load(&w->stage[i]));
            if (len > (int)sizeof(line) - 2)
                len = (int)sizeof(line) - 2;
            line[len++] = '\n';
            if (write(2, line, (size_t)len) < 0)
                _exit(86);
            _exit(86);
        }
    }
    return NULL;
}

static void watchdog_start(struct watchdog *w, const char *what, unsigned n,
                           int seconds)
{
    memset(w, 0, sizeof(*w));
    w->what = what;
    w->n = n;
    w->seconds = seconds;
    for (unsigned i = 0; i < n; i++)
        atomic_store(&w->stage[i], "starting");
    ck_assert_int_eq(pthread_create(&w->thread, NULL, watchdog_main, w), 0);
}

static void watchdog_stop(struct watchdog *w)
{
    atomic_store(&w->stop, true);
    pthread_join(w->thread, NULL);
}

/* ---- semantics ------------------------------------------------------------ */

START_TEST(test_hit_miss_subrange)
{
    struct rig r;
    size_t len = 16 * PG;
    uint8_t *buf;
    struct ferry_stats s;

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    buf = tu_alloc_buf(len + 4 * PG);

    s = stats(r.p.init);
    put_check(&r, buf, len, 1, "first transfer");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "first transfer: a miss");
    EXPECT_LIVE(r.p.init, 1u, len, "after the first miss");

    s = stats(r.p.init);
    put_check(&r, buf, len, 2, "same range");
    EXPECT_DELTA(r.p.init, s, 1, 0, 0, "same range: a hit");

    s = stats(r.p.init);
    put_check(&r, buf + 2 * PG + 100, 3 * PG - 7, 3, "sub-range");
    put_check(&r, buf + len - 1, 1, 4, "last byte");
    put_check(&r, buf, 1, 5, "first byte");
    EXPECT_DELTA(r.p.init, s, 3, 0, 0, "sub-ranges: hits");

    /* One byte past the cached range: not covered, a new entry. */
    s = stats(r.p.init);
    put_check(&r, buf + len - PG, PG + 1, 6, "one byte past the end");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "past the end: a miss");
    EXPECT_LIVE(r.p.init, 2u, len + 2 * PG, "two entries");
    s = stats(r.p.init);
    put_check(&r, buf + len - PG, PG + 1, 7, "one byte past the end again");
    EXPECT_DELTA(r.p.init, s, 1, 0, 0, "past the end again: a hit");
    ck_assert_uint_eq(stats(r.p.init).rcache_invalidations, 0);

    tu_free_buf(buf, len + 4 * PG);
    rig_close(&r);
}
END_TEST

START_TEST(test_overlapping_ranges)
{
    struct rig r;
    uint8_t *buf;
    struct ferry_stats s;
    uint64_t inv;

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    buf = tu_alloc_buf(16 * PG);

    s = stats(r.p.init);
    put_check(&r, buf, 8 * PG, 1, "A = pages 0-7");
    put_check(&r, buf + 4 * PG, 8 * PG, 2, "B = pages 4-11");
    EXPECT_DELTA(r.p.init, s, 0, 2, 0, "A and B overlap: two misses");
    EXPECT_LIVE(r.p.init, 2u, 16 * PG, "A and B");

    s = stats(r.p.init);
    put_check(&r, buf + 5 * PG, 2 * PG, 3, "pages 5-6, in both");
    put_check(&r, buf + 9 * PG, 3 * PG, 4, "pages 9-11, in B only");
    put_check(&r, buf + PG, 3 * PG, 5, "pages 1-3, in A only");
    EXPECT_DELTA(r.p.init, s, 3, 0, 0, "ranges inside A or B hit");

    s = stats(r.p.init);
    put_check(&r, buf, 12 * PG, 6, "pages 0-11, in neither alone");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "the union is a miss");
    EXPECT_LIVE(r.p.init, 3u, 28 * PG, "A, B and the union");

    /* A change to page 6 kills all three; page 13 none. */
    inv = invalidations(r.p.init);
    ferry_mem_invalidate(buf + 13 * PG, PG);
    ck_assert_uint_eq(invalidations(r.p.init), inv);
    ferry_mem_invalidate(buf + 6 * PG + 10, 1);
    ck_assert_uint_eq(invalidations(r.p.init), inv + 3);
    EXPECT_LIVE(r.p.init, 0u, 0u, "after invalidating page 6");
    s = stats(r.p.init);
    put_check(&r, buf + 5 * PG, 2 * PG, 7, "pages 5-6 again");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "after the invalidation: a miss");

    tu_free_buf(buf, 16 * PG);
    rig_close(&r);
}
END_TEST

START_TEST(test_partial_munmap)
{
    struct rig r;
    uint8_t *buf;
    struct ferry_stats s;
    uint64_t inv;

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    buf = tu_alloc_buf(8 * PG);
    put_check(&r, buf, 8 * PG, 1, "cache 8 pages");
    EXPECT_LIVE(r.p.init, 1u, 8 * PG, "cached");

    inv = invalidations(r.p.init);
    ck_assert_int_eq(munmap(buf + 7 * PG, PG), 0);
    settle_monitor();
    ck_assert_uint_eq(invalidations(r.p.init), inv + 1);
    EXPECT_LIVE(r.p.init, 0u, 0u, "unmapping the last page kills the entry");

    /* Pages 0-1 are untouched, but their entry is gone: a miss. */
    s = stats(r.p.init);
    put_check(&r, buf, 2 * PG, 2, "pages 0-1 after the partial munmap");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "partial munmap: a miss");
    EXPECT_LIVE(r.p.init, 1u, 2 * PG, "the new entry");

    tu_free_buf(buf, 7 * PG);
    rig_close(&r);
}
END_TEST

/*
 * munmap, then mmap at the same address: the cache must register the new
 * pages (a miss).  tcp reads memory by address at send time, so the new
 * pattern landing proves the transfer took the new pages; the counters
 * prove the registration is new.
 */
START_TEST(test_munmap_mmap_fixed)
{
    struct rig r;
    size_t len = 16 * PG;
    uint8_t *buf, *again;
    struct ferry_stats s;
    uint64_t inv;

    rig_open(&r, tu_tcp(), NULL, false, 4 * MiB);
    buf = tu_alloc_buf(len);
    put_check(&r, buf, len, 0xa1, "old pages");
    s = stats(r.p.init);
    put_check(&r, buf, len, 0xa2, "old pages again");
    EXPECT_DELTA(r.p.init, s, 1, 0, 0, "old pages: a hit");

    inv = invalidations(r.p.init);
    ck_assert_int_eq(munmap(buf, len), 0);
    again = mmap(buf, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ck_assert_ptr_eq(again, buf);
    settle_monitor();
    ck_assert_uint_eq(invalidations(r.p.init), inv + 1);
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(buf[i] == 0, "the new mapping is not zero at %zu", i);

    s = stats(r.p.init);
    put_check(&r, buf, len, 0xb1, "new pages at the same address");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "new pages: a miss");
    EXPECT_LIVE(r.p.init, 1u, len, "one entry, of the new pages");

    /* mmap(MAP_FIXED) straight over the cached range unmaps it too. */
    inv = invalidations(r.p.init);
    again = mmap(buf + 4 * PG, 4 * PG, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ck_assert_ptr_eq(again, buf + 4 * PG);
    settle_monitor();
    ck_assert_uint_eq(invalidations(r.p.init), inv + 1);
    s = stats(r.p.init);
    put_check(&r, buf, len, 0xc1, "after mmap over the middle");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "mmap over the middle: a miss");

    tu_free_buf(buf, len);
    rig_close(&r);
}
END_TEST

START_TEST(test_mremap_moves)
{
    struct rig r;
    size_t len = 8 * PG;
    uint8_t *a, *b, *c, *moved;
    struct ferry_stats s;
    uint64_t inv;

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    a = tu_alloc_buf(len);
    b = tu_alloc_buf(len); /* a place to move to */
    put_check(&r, a, len, 0x11, "cache A");

    inv = invalidations(r.p.init);
    moved = mremap(a, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, b);
    ck_assert_ptr_eq(moved, b);
    settle_monitor();
    ck_assert_uint_eq(invalidations(r.p.init), inv + 1);
    EXPECT_LIVE(r.p.init, 0u, 0u, "the move killed A's entry");
    ck_assert_uint_eq(tu_check(b, len, 0x11), SIZE_MAX);

    s = stats(r.p.init);
    put_check(&r, b, len, 0x12, "the moved pages at B");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "B: a miss");
    /* A is a hole now; map it again: a miss too. */
    ck_assert_ptr_eq(mmap(a, len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
                     a);
    s = stats(r.p.init);
    put_check(&r, a, len, 0x13, "new pages at A");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "A again: a miss");
    EXPECT_LIVE(r.p.init, 2u, 2 * len, "A and B");

    /* MREMAP_DONTUNMAP moves A's pages to C and leaves A mapped, empty: no
     * UNMAP event, only REMAP says that A changed. */
    c = tu_alloc_buf(len);
    inv = invalidations(r.p.init);
    moved = mremap(a, len, len,
                   MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, c);
    ck_assert_ptr_eq(moved, c);
    settle_monitor();
    ck_assert_uint_eq(invalidations(r.p.init), inv + 1);
    EXPECT_LIVE(r.p.init, 1u, len, "only B is left");
    ck_assert_uint_eq(tu_check(c, len, 0x13), SIZE_MAX);
    s = stats(r.p.init);
    put_check(&r, a, len, 0x14, "A after MREMAP_DONTUNMAP");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "A after MREMAP_DONTUNMAP: a miss");
    tu_free_buf(c, len);

    tu_free_buf(a, len);
    tu_free_buf(b, len);
    rig_close(&r);
}
END_TEST

/* Reads p[0, len) in a thread, so that a read nobody answers fails. */
struct reader {
    const volatile uint8_t *p;
    size_t len;
    size_t nonzero;
    atomic_bool done;
};

static void *reader_main(void *arg)
{
    struct reader *rd = arg;

    rd->nonzero = SIZE_MAX;
    for (size_t i = 0; i < rd->len; i++)
        if (rd->p[i] != 0) {
            rd->nonzero = i;
            break;
        }
    atomic_store(&rd->done, true);
    return NULL;
}

START_TEST(test_madvise_dontneed)
{
    struct rig r;
    size_t len = 8 * PG;
    uint8_t *buf;
    struct ferry_stats s;
    struct reader rd = {0};
    pthread_t th;
    double until;
    uint64_t inv;

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    buf = tu_alloc_buf(len);
    put_check(&r, buf, len, 0x21, "cache 8 pages");

    inv = invalidations(r.p.init);
    ck_assert_int_eq(madvise(buf + 2 * PG, 2 * PG, MADV_DONTNEED), 0);
    settle_monitor();
    ck_assert_uint_eq(invalidations(r.p.init), inv + 1);
    EXPECT_LIVE(r.p.init, 0u, 0u, "MADV_DONTNEED killed the entry");

    /* The pages are missing in a watched range: the monitor must answer
     * the faults with the zero page, or the reader waits forever. */
    rd.p = buf + 2 * PG;
    rd.len = 2 * PG;
    ck_assert_int_eq(pthread_create(&th, NULL, reader_main, &rd), 0);
    until = now_s() + 20;
    while (!atomic_load(&rd.done)) {
        ck_assert_msg(now_s() < until,
                      "reading pages dropped by MADV_DONTNEED hangs: the "
                      "monitor does not answer missing-page faults");
        usleep(1000);
    }
    pthread_join(th, NULL);
    ck_assert_msg(rd.nonzero == SIZE_MAX, "byte %zu of the dropped pages is "
                  "not zero", rd.nonzero);
    /* The pages around them kept their data. */
    ck_assert_uint_eq(tu_check(buf, 2 * PG, 0x21), SIZE_MAX);
    ck_assert_uint_eq(buf[4 * PG], ((uint8_t *)r.tbuf)[4 * PG]);

    s = stats(r.p.init);
    put_check(&r, buf, len, 0x22, "after MADV_DONTNEED");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "after MADV_DONTNEED: a miss");
    s = stats(r.p.init);
    put_check(&r, buf, len, 0x23, "and again");
    EXPECT_DELTA(r.p.init, s, 1, 0, 0, "then a hit");

    tu_free_buf(buf, len);
    rig_close(&r);
}
END_TEST

#if !defined(__SANITIZE_THREAD__) /* see rcache_suite() */
/*
 * What LeakSanitizer does at exit, and a debugger or a checkpointer any
 * time: stop every thread (ferry's monitor too) with ptrace from a tracer
 * that shares the memory, then read it.  A page that MADV_DONTNEED
 * dropped in a watched range must read as zeros then.  When ranges were
 * watched in missing-page mode, only the monitor could map such a page,
 * so the reader hung for ever: found as check_rcache itself hanging in
 * LeakSanitizer under --enable-asan (an allocator purge had dropped a page
 * that LSan's allocator walk then read).
 */
struct stw {
    pid_t tids[256];
    int n;
    const volatile uint8_t *page;
    size_t len;
    atomic_int state; /* 0 reading, 1 read zeros, 2 read data, -1 no ptrace */
    atomic_int stopped; /* threads stopped so far */
};

/* The tracer: raw system calls only, on its own stack, no TLS. */
__attribute__((no_sanitize("address", "thread", "undefined"))) static int
stw_main(void *arg)
{
    struct stw *s = arg;
    int attached = 0, status;
    uint8_t acc = 0;

    for (; attached < s->n; attached++) {
        if (syscall(SYS_ptrace, PTRACE_SEIZE, s->tids[attached], 0, 0) != 0)
            break;
        syscall(SYS_ptrace, PTRACE_INTERRUPT, s->tids[attached], 0, 0);
        syscall(SYS_wait4, s->tids[attached], &status, __WALL, NULL);
        atomic_store(&s->stopped, attached + 1);
    }
    if (attached == s->n) {
        for (size_t i = 0; i < s->len; i++)
            acc |= s->page[i];
        atomic_store(&s->state, acc == 0 ? 1 : 2);
    } else {
        atomic_store(&s->state, -1);
    }
    for (int i = 0; i < attached; i++)
        syscall(SYS_ptrace, PTRACE_DETACH, s->tids[i], 0, 0);
    return 0;
}

START_TEST(test_dropped_page_readable_with_monitor_stopped)
{
    struct rig r;
    size_t len = 8 * PG, stack_len = 256 * KiB;
    uint8_t *buf, *stack;
    struct stw *s = calloc(1, sizeof(*s));
    pid_t me = (pid_t)syscall(SYS_gettid), tracer;
    DIR *d;
    struct dirent *de;
    double until;
    int status;

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    buf = tu_alloc_buf(len);
    put_check(&r, buf, len, 0x27, "cache 8 pages");
    ck_assert_int_eq(madvise(buf + 3 * PG, PG, MADV_DONTNEED), 0);
    settle_monitor();
    EXPECT_LIVE(r.p.init, 0u, 0u, "MADV_DONTNEED killed the entry");

    /* Every other thread of this process, ferry's included. */
    d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL && s->n < (int)TU_ARRAY_LEN(s->tids))
        if (de->d_name[0] != '.' && atoi(de->d_name) != me)
            s->tids[s->n++] = atoi(de->d_name);
    closedir(d);
    ck_assert_int_ge(s->n, 2);
    s->page = buf + 3 * PG;
    s->len = PG;
    stack = tu_alloc_buf(stack_len);
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    tracer = clone(stw_main, stack + stack_len,
                   CLONE_VM | CLONE_FS | CLONE_FILES | SIGCHLD, s);
    ck_assert_int_gt(tracer, 0);
    until = now_s() + 10;
    while (atomic_load(&s->state) == 0 && now_s() < until)
        usleep(1000);
    if (atomic_load(&s->state) == 0) {
        /* Stuck in the page fault: killing the tracer lets the threads go. */
        kill(tracer, SIGKILL);
        waitpid(tracer, &status, __WALL);
        ck_assert_msg(atomic_load(&s->stopped) == s->n,
                      "the tracer stopped only %d of %d threads in 10 s",
                      atomic_load(&s->stopped), s->n);
        ck_abort_msg("with every other thread stopped, reading a watched page "
                     "that MADV_DONTNEED dropped hangs: the page waits for "
                     "ferry's monitor (LeakSanitizer at exit, a debugger, a "
                     "checkpointer would hang the same way)");
    }
    ck_assert_int_eq(waitpid(tracer, &status, __WALL), tracer);
    ck_assert_msg(atomic_load(&s->state) != -1, "ptrace is not allowed here");
    ck_assert_msg(atomic_load(&s->state) == 1,
                  "the dropped page did not read as zeros");

    s->page = NULL;
    put_check(&r, buf, len, 0x28, "after the stop");
    tu_free_buf(stack, stack_len);
    tu_free_buf(buf, len);
    free(s);
    rig_close(&r);
}
END_TEST
#endif

/*
 * A shrinking brk unmaps the top of the heap.  malloc is told to keep a
 * large pad above its heap and never trim, so that it does not move the
 * break while the test owns the top (ASan and TSan do not use brk).
 */
START_TEST(test_sbrk_shrink)
{
    struct rig r;
    size_t len = 16 * PG, pad;
    uint8_t *cur, *top;
    struct ferry_stats s;
    uint64_t inv;
    void *p;

    /* Grow glibc's heap by 80 MiB now, and keep it (32 MiB is the
     * largest mmap threshold glibc accepts).  Sanitizers' and other
     * allocators ignore this and do not use brk at all. */
    mallopt(M_TOP_PAD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    p = malloc(16 << 20);
    ck_assert_ptr_nonnull(p);
    free(p);
    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    /* A provider may grow its own pools on its first transfers (rxm from
     * libfabric 1.18 does, with posix_memalign): let it do so now, before
     * the test owns the break, from memory that is not the heap top. */
    p = tu_alloc_buf(len);
    for (int i = 0; i < 4; i++)
        put_check(&r, p, len, 0x30 + (uint64_t)i, "a warm-up transfer");
    tu_free_buf(p, len);

    cur = sbrk(0);
    pad = page_up((uintptr_t)cur) - (uintptr_t)cur;
    ck_assert_ptr_ne(sbrk((intptr_t)(pad + len)), (void *)-1);
    top = cur + pad;
    ck_assert_ptr_eq(sbrk(0), top + len);
    put_check(&r, top, len, 0x31, "the heap top");
    s = stats(r.p.init);
    put_check(&r, top, len, 0x32, "the heap top again");
    EXPECT_DELTA(r.p.init, s, 1, 0, 0, "heap top: a hit");

    inv = invalidations(r.p.init);
    ck_assert_msg(sbrk(0) == top + len,
                  "something else moved the break while the test owned it");
    ck_assert_ptr_ne(sbrk(-(intptr_t)len), (void *)-1);
    settle_monitor();
    ck_assert_uint_eq(invalidations(r.p.init), inv + 1);
    EXPECT_LIVE(r.p.init, 0u, 0u, "sbrk(-len) killed the entry");

    ck_assert_ptr_eq(sbrk((intptr_t)len), top);
    s = stats(r.p.init);
    put_check(&r, top, len, 0x33, "the regrown heap top");
    EXPECT_DELTA(r.p.init, s, 0, 1, 0, "regrown heap top: a miss");

    rig_close(&r);
    ck_assert_ptr_ne(sbrk(-(intptr_t)(len + pad)), (void *)-1);
}
END_TEST

/*
 * Puts n distinct buffers of len bytes through a cache capped (by entries
 * or by bytes) at `live` of them: each is a miss, the cache never holds
 * more than `live`, all the others are evicted, and none is registered
 * as a one-shot.  The buffers stay in bufs for the caller to free.
 */
static void put_distinct(struct rig *r, uint8_t **bufs, unsigned n,
                         size_t len, unsigned live, const char *cap)
{
    struct ferry_stats s = stats(r->p.init), a;

    for (unsigned i = 0; i < n; i++) {
        bufs[i] = tu_alloc_buf(len);
        put_check(r, bufs[i], len, i, "distinct buffer");
        a = stats(r->p.init);
        ck_assert_msg(a.rcache_entries <= live && a.rcache_bytes <= live * len,
                      "%s: %llu entries of %llu bytes after %u buffers", cap,
                      (unsigned long long)a.rcache_entries,
                      (unsigned long long)a.rcache_bytes, i + 1);
    }
    a = stats(r->p.init);
    ck_assert_uint_eq(a.rcache_misses - s.rcache_misses, n);
    ck_assert_uint_eq(a.rcache_evictions - s.rcache_evictions, n - live);
    ck_assert_uint_eq(a.oneshot_registrations, s.oneshot_registrations);
    EXPECT_LIVE(r->p.init, live, live * len, cap);
}

START_TEST(test_cap_entries)
{
    struct ferry_config cfg;
    struct rig r;
    uint8_t *bufs[10];
    struct ferry_stats s, a;

    tu_config(&cfg, tu_providers[_i]);
    cfg.rcache_max_entries = 4;
    rig_open(&r, tu_providers[_i], &cfg, false, 4 * MiB);
    s = stats(r.p.init);
    put_distinct(&r, bufs, 10, 4 * PG, 4, "rcache_max_entries = 4");
    /* Every one still transfers correctly, cached or not. */
    for (int i = 0; i < 10; i++)
        put_check(&r, bufs[i], 4 * PG, 100 + (uint64_t)i, "second round");
    a = stats(r.p.init);
    ck_assert_uint_le(a.rcache_entries, 4);
    ck_assert_uint_le(a.rcache_hits - s.rcache_hits, 4);
    /* The one just used is still there. */
    s = stats(r.p.init);
    put_check(&r, bufs[9], 4 * PG, 200, "the last buffer again");
    EXPECT_DELTA(r.p.init, s, 1, 0, 0, "the last buffer: a hit");
    for (int i = 0; i < 10; i++)
        tu_free_buf(bufs[i], 4 * PG);
    rig_close(&r);
}
END_TEST

START_TEST(test_cap_bytes)
{
    struct ferry_config cfg;
    struct rig r;
    size_t len = 16 * PG;
    uint8_t *bufs[10], *big;
    struct ferry_stats s, a;

    tu_config(&cfg, tu_providers[_i]);
    cfg.rcache_max_bytes = 3 * len;
    rig_open(&r, tu_providers[_i], &cfg, false, 4 * MiB);

    /* Larger than the cap, in an empty cache: a one-shot, not an entry. */
    big = tu_alloc_buf(4 * len);
    s = stats(r.p.init);
    put_check(&r, big, 4 * len, 0x40, "larger than the cap, first");
    EXPECT_DELTA(r.p.init, s, 0, 1, 1, "larger than the cap: a one-shot");
    EXPECT_LIVE(r.p.init, 0u, 0u, "nothing over the cap is cached");

    put_distinct(&r, bufs, 10, len, 3, "rcache_max_bytes = 3 buffers");

    /* Larger than the cap with a full cache: evicting cannot help. */
    s = stats(r.p.init);
    put_check(&r, big, 4 * len, 0x41, "larger than the cap, again");
    EXPECT_DELTA(r.p.init, s, 0, 1, 1, "larger than the cap: a one-shot");
    ck_assert_uint_le(stats(r.p.init).rcache_bytes, 3 * len);

    /* Invalidated entries give their room back at once. */
    for (int i = 0; i < 10; i++)
        ferry_mem_invalidate(bufs[i], len);
    EXPECT_LIVE(r.p.init, 0u, 0u, "all invalidated");
    s = stats(r.p.init);
    for (int i = 0; i < 3; i++)
        put_check(&r, bufs[i], len, 0x50 + (uint64_t)i, "into freed room");
    a = stats(r.p.init);
    ck_assert_msg(a.rcache_evictions == s.rcache_evictions &&
                      a.oneshot_registrations == s.oneshot_registrations,
                  "3 entries after invalidating all: %llu evictions and %llu "
                  "one-shots; dead entries still count against the cap",
                  (unsigned long long)(a.rcache_evictions -
                                       s.rcache_evictions),
                  (unsigned long long)(a.oneshot_registrations -
                                       s.oneshot_registrations));
    EXPECT_LIVE(r.p.init, 3u, 3 * len, "3 new entries");

    for (int i = 0; i < 10; i++)
        tu_free_buf(bufs[i], len);
    tu_free_buf(big, 4 * len);
    rig_close(&r);
}
END_TEST

/*
 * The bounds from the environment: FERRY_RCACHE_MAX_ENTRIES and
 * FERRY_RCACHE_MAX_BYTES, read by ferry_config_init (through tu_config,
 * which the rig's NULL base takes), cap the cache of the context made from
 * that config.  With the defaults (16384 entries, 64 GiB) none of these
 * transfers would evict.
 */
START_TEST(test_env_cap_entries)
{
    struct rig r;
    uint8_t *bufs[8];

    setenv("FERRY_RCACHE_MAX_ENTRIES", "3", 1);
    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    put_distinct(&r, bufs, 8, 2 * PG, 3, "FERRY_RCACHE_MAX_ENTRIES=3");
    for (int i = 0; i < 8; i++)
        tu_free_buf(bufs[i], 2 * PG);
    rig_close(&r);
    unsetenv("FERRY_RCACHE_MAX_ENTRIES");
}
END_TEST

START_TEST(test_env_cap_bytes)
{
    struct rig r;
    size_t len = 16 * PG;
    uint8_t *bufs[6], *big;
    struct ferry_stats s;
    char v[32];

    snprintf(v, sizeof(v), "%zu", 2 * len);
    setenv("FERRY_RCACHE_MAX_BYTES", v, 1);
    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    put_distinct(&r, bufs, 6, len, 2, "FERRY_RCACHE_MAX_BYTES = 2 buffers");
    /* Larger than the cap: registered for its request only. */
    big = tu_alloc_buf(3 * len);
    s = stats(r.p.init);
    put_check(&r, big, 3 * len, 0x60, "larger than FERRY_RCACHE_MAX_BYTES");
    EXPECT_DELTA(r.p.init, s, 0, 1, 1, "larger than the cap: a one-shot");
    for (int i = 0; i < 6; i++)
        tu_free_buf(bufs[i], len);
    tu_free_buf(big, 3 * len);
    rig_close(&r);
    unsetenv("FERRY_RCACHE_MAX_BYTES");
}
END_TEST

/* A miss made directly (no transfer): a writer turn of ctx's cache. */
static void writer_turn(ferry_context_t *ctx, bool expect_cached)
{
    uint8_t *b = tu_alloc_buf(PG);
    struct ferry_mem *mem;
    struct ferry__rc_entry *e;

    ck_assert_int_eq(ferry__rcache_get(ctx, b, PG, &mem, &e), 0);
    if (expect_cached)
        ck_assert_ptr_nonnull(e);
    if (e != NULL) {
        ferry__rcache_put(e);
    } else {
        ck_assert(mem->oneshot);
        ferry__mem_close(mem);
    }
    /* The mapping stays: unmapping it would invalidate, not evict. */
}

/*
 * A registration in use by a request in flight is not closed when its
 * entry dies (invalidated) and not evicted while busy; it is closed only
 * after the request is freed and its operation has come back.
 */
static void in_flight(const char *prov, bool evict)
{
    struct ferry_config cfg;
    struct rig r;
    size_t len = 16 * MiB;
    uint8_t *buf;
    struct ferry_iov iov;
    ferry_req_t *req;
    struct ferry__rc_entry *e;
    struct ferry_mem *m;
    double until;
    struct ferry_stats s;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    uint8_t *before;

    tu_config(&cfg, prov);
    if (evict)
        cfg.rcache_max_entries = 1;
    rig_open(&r, prov, &cfg, true, len);
    buf = tu_alloc_buf(len);
    tu_fill(buf, len, 0x51);
    before = tu_alloc_buf(len);
    memcpy(before, r.tbuf, len);
    iov = (struct ferry_iov){buf, NULL, r.rmem, 0, len};
    ck_assert_int_eq(ferry_write(r.p.peer, &iov, 1, NULL, &req), 0);
    for (int i = 0; i < 1000 && req->cur_iov < req->niov; i++)
        ck_assert_int_ge(ferry_progress(r.p.init), 0);
    usleep(100 * 1000);
    ck_assert_int_ge(ferry_progress(r.p.init), 0);
    ck_assert_msg(ferry_req_test(req) == FERRY_EINPROGRESS,
                  "the write completed without the target's progress: the "
                  "test cannot hold a request in flight on %s",
                  prov);
    ck_assert_ptr_nonnull(req->found);
    e = req->found[0].entry;
    m = req->found[0].mem;
    ck_assert_msg(e != NULL, "the transfer's registration was not cached");
    ck_assert_ptr_eq(e->mem, m);
    ck_assert_uint_eq(ferry__rc_refs(e), 1);
    /* The entry lives in the cache's slab: reclaiming it closes its
     * registration, whose struct is freed, and gives it back at once. */
    rh_watch_free(m);

    s = stats(r.p.init);
    if (evict) {
        /* The cache holds one entry, busy: nothing can be evicted, so the
         * next misses register one-shots. */
        for (int i = 0; i < 3; i++)
            writer_turn(r.p.init, false);
        ck_assert_uint_eq(stats(r.p.init).rcache_evictions,
                          s.rcache_evictions);
        ck_assert(!ferry__rc_dead(e));
    } else {
        ferry_mem_invalidate(buf + len / 2, 1);
        ck_assert(ferry__rc_dead(e));
        ck_assert_uint_eq(stats(r.p.init).rcache_invalidations,
                          s.rcache_invalidations + 1);
        /* Writer turns retire the dead entry and reclaim what they can. */
        for (int i = 0; i < 4; i++)
            writer_turn(r.p.init, true);
    }
    ck_assert_msg(!rh_was_freed(m),
                  "the registration of a request in flight was closed");
    ck_assert_uint_eq(m->magic, FERRY__MAGIC_MEM);
    ck_assert_ptr_nonnull(m->mr[0]);
    ck_assert_uint_eq(ferry__rc_refs(e), 1);

    /* Freeing the request keeps it too: the operation is still out. */
    ferry_req_close(req);
    ck_assert_int_ge(ferry_progress(r.p.init), 0);
    if (!evict)
        writer_turn(r.p.init, true);
    ck_assert(!rh_was_freed(m));
    ck_assert_uint_eq(ferry__rc_refs(e), 1);
    ck_assert_uint_eq(m->magic, FERRY__MAGIC_MEM);

    /* Let the target progress: the operation comes back, the request goes
     * and drops its reference. */
    until = now_s() + 30;
    while (ferry__rc_refs(e) != 0) {
        ck_assert_int_ge(ferry_progress(r.p.target), 0);
        ck_assert_int_ge(ferry_progress(r.p.init), 0);
        ck_assert_msg(now_s() < until, "the write never came back");
    }
    /* Freed in flight, the request was cancelled: what was posted landed
     * whole, what the provider pushed back was never posted. */
    ck_assert_int_eq(ferry_context_info(r.p.init, &info), 0);
    tu_assert_landed_prefix(r.tbuf, before, len, info.max_msg_size, 0x51,
                            prov);
    tu_free_buf(before, len);

    /* Now the next writer turns may close it. */
    for (int i = 0; i < 10 && !rh_was_freed(m); i++)
        writer_turn(r.p.init, !evict);
    ck_assert_msg(rh_was_freed(m),
                  "the entry was not reclaimed after its request ended");
    if (evict)
        ck_assert_uint_ge(stats(r.p.init).rcache_evictions,
                          s.rcache_evictions + 1);

    tu_free_buf(buf, len);
    rig_close(&r);
}

static void *put_main(void *arg)
{
    ferry__rcache_put(arg);
    return NULL;
}

/*
 * A reference taken in one thread and dropped in another (a request
 * completed by whichever thread progresses) counts in two shards; their
 * sum is what makes the entry busy or free.
 */
START_TEST(test_reference_dropped_by_another_thread)
{
    struct ferry_config cfg;
    struct rig r;
    uint8_t *buf = tu_alloc_buf(4 * PG);
    struct ferry_mem *mem;
    struct ferry__rc_entry *e;
    pthread_t th;
    uint64_t ev;

    tu_config(&cfg, tu_providers[_i]);
    cfg.rcache_max_entries = 1;
    rig_open(&r, tu_providers[_i], &cfg, false, MiB);
    ck_assert_int_eq(ferry__rcache_get(r.p.init, buf, 4 * PG, &mem, &e), 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(ferry__rcache_get(r.p.init, buf, PG, &mem, &e), 0);
    ck_assert_uint_eq(ferry__rc_refs(e), 2);
    /* Busy: the next miss cannot evict it. */
    ev = stats(r.p.init).rcache_evictions;
    writer_turn(r.p.init, false);
    ck_assert_uint_eq(stats(r.p.init).rcache_evictions, ev);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pthread_create(&th, NULL, put_main, e), 0);
        pthread_join(th, NULL);
    }
    ck_assert_uint_eq(ferry__rc_refs(e), 0);
    /* Reclaiming the entry (it lives in the cache's slab) closes its
     * registration, whose struct is freed. */
    rh_watch_free(mem);
    /* Free now: evicted by the next miss, then reclaimed. */
    writer_turn(r.p.init, true);
    ck_assert_uint_eq(stats(r.p.init).rcache_evictions, ev + 1);
    for (int i = 0; i < 10 && !rh_was_freed(mem); i++)
        writer_turn(r.p.init, true);
    ck_assert_msg(rh_was_freed(mem), "the entry was never reclaimed");
    tu_free_buf(buf, 4 * PG);
    rig_close(&r);
}
END_TEST

/*
 * A forked child has no monitor thread and does not own the parent's
 * registrations: there, a range the parent has cached misses and comes
 * back as a one-shot, and invalidations and stats still return.
 */
START_TEST(test_forked_child)
{
    ferry_context_t *ctx = tu_context(tu_providers[_i]);
    uint8_t *buf = tu_alloc_buf(4 * PG);
    struct ferry_mem *mem, *cached;
    struct ferry__rc_entry *e;
    int status;
    pid_t pid;

    ck_assert_int_eq(ferry__rcache_get(ctx, buf, 4 * PG, &cached, &e), 0);
    ck_assert_ptr_nonnull(e);
    ferry__rcache_put(e);
    settle_monitor();
    ck_assert_int_eq(ferry__rcache_get(ctx, buf, PG, &mem, &e), 0);
    ck_assert_msg(e != NULL && mem == cached, "the parent does not hit");
    ferry__rcache_put(e);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct ferry_stats st = FERRY_STATS_INIT;

        if (ferry__rcache_get(ctx, buf, PG, &mem, &e) != 0)
            _exit(2);
        if (e != NULL || mem == cached || !mem->oneshot)
            _exit(3); /* the parent's registration, in the child */
        ferry__mem_close(mem);
        ferry_mem_invalidate(buf, PG);
        if (ferry_context_stats(ctx, &st) != 0)
            _exit(4);
        _exit(0);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the child failed (status %#x)", status);
    /* The parent's cache is untouched. */
    ck_assert_int_eq(ferry__rcache_get(ctx, buf, PG, &mem, &e), 0);
    ck_assert_msg(e != NULL && mem == cached, "the parent lost its entry");
    ferry__rcache_put(e);
    tu_free_buf(buf, 4 * PG);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_in_flight_invalidated)
{
    in_flight(tu_providers[_i], false);
}
END_TEST

START_TEST(test_in_flight_not_evicted)
{
    in_flight(tu_providers[_i], true);
}
END_TEST

/* Runs fn with stderr going to a file; returns what was written. */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/ferry-rcache-stderr.XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    struct stat st;
    char *out;

    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_ge(saved, 0);
    fflush(stderr);
    ck_assert_int_ge(dup2(fd, 2), 0);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_int_eq(fstat(fd, &st), 0);
    out = calloc(1, (size_t)st.st_size + 1);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(pread(fd, out, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    return out;
}

static void open_two_rigs(void *arg)
{
    struct rig *r = arg;

    rig_open(&r[0], tu_tcp(), NULL, false, MiB);
    rig_open(&r[1], tu_tcp(), NULL, false, MiB);
}

static size_t occurrences(const char *hay, const char *needle)
{
    size_t n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/*
 * FERRY_NO_USERFAULTFD=1: no monitor (warned once per process), so
 * unmapping invalidates nothing and only explicit calls do.
 */
START_TEST(test_no_userfaultfd)
{
    struct rig r[2];
    size_t len = 8 * PG;
    uint8_t *buf;
    struct ferry_stats s;
    char *err;
    uint64_t inv;

    setenv("FERRY_NO_USERFAULTFD", "1", 1);
    setenv("FERRY_LOG", "warn", 1);
    err = capture_stderr(open_two_rigs, r);
    ck_assert_msg(occurrences(err, "FERRY_NO_USERFAULTFD") == 1,
                  "expected one warning naming FERRY_NO_USERFAULTFD for four "
                  "caches, got:\n%s",
                  err);
    ck_assert_ptr_nonnull(strstr(err, "ferry_mem_invalidate"));
    free(err);
    ck_assert_ptr_nonnull(strstr(ferry__monitor_status(), "disabled"));

    buf = tu_alloc_buf(len);
    put_check(&r[0], buf, len, 0x61, "cache without the monitor");
    s = stats(r[0].p.init);
    put_check(&r[0], buf, len, 0x62, "hit without the monitor");
    EXPECT_DELTA(r[0].p.init, s, 1, 0, 0, "without the monitor: a hit");

    /* Without the monitor, new pages at the address go unnoticed... */
    inv = invalidations(r[0].p.init);
    ck_assert_int_eq(munmap(buf, len), 0);
    ck_assert_ptr_eq(mmap(buf, len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
                     buf);
    ck_assert_uint_eq(invalidations(r[0].p.init), inv);
    EXPECT_LIVE(r[0].p.init, 1u, len, "the monitor is off");

    /* ...until the application says so. */
    ferry_mem_invalidate(buf, len);
    ck_assert_uint_eq(invalidations(r[0].p.init), inv + 1);
    EXPECT_LIVE(r[0].p.init, 0u, 0u, "explicitly invalidated");
    s = stats(r[0].p.init);
    put_check(&r[0], buf, len, 0x63, "after the explicit invalidation");
    EXPECT_DELTA(r[0].p.init, s, 0, 1, 0, "explicit invalidation: a miss");

    /* A sub-range invalidates the whole entry, in every context. */
    put_check(&r[1], buf, len, 0x64, "the other pair caches it too");
    inv = invalidations(r[1].p.init);
    ferry_mem_invalidate(buf + 3 * PG + 1, 5);
    ck_assert_uint_eq(invalidations(r[1].p.init), inv + 1);
    EXPECT_LIVE(r[0].p.init, 0u, 0u, "first pair");
    EXPECT_LIVE(r[1].p.init, 0u, 0u, "second pair");

    tu_free_buf(buf, len);
    rig_close(&r[0]);
    rig_close(&r[1]);
}
END_TEST

/* A directory on a file system whose files userfaultfd cannot watch. */
static const char *disk_dir(void)
{
    static const char *const dirs[] = {".", "/var/tmp", "/tmp"};

    for (size_t i = 0; i < TU_ARRAY_LEN(dirs); i++) {
        struct statfs sfs;
        if (statfs(dirs[i], &sfs) == 0 && sfs.f_type != TMPFS_MAGIC &&
            access(dirs[i], W_OK) == 0)
            return dirs[i];
    }
    return NULL;
}

START_TEST(test_file_backed)
{
    struct rig r;
    size_t len = 16 * PG;
    const char *dir = disk_dir();
    char path[256];
    uint8_t *data, *map;
    struct ferry_stats s;
    int fd;

    ck_assert_msg(dir != NULL, "no writable directory off tmpfs");
    snprintf(path, sizeof(path), "%s/ferry-rcache-file.XXXXXX", dir);
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    data = malloc(len);
    tu_fill(data, len, 0x71);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    free(data);

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    for (int shared = 0; shared < 2; shared++) {
        map = mmap(NULL, len, PROT_READ, shared ? MAP_SHARED : MAP_PRIVATE, fd,
                   0);
        ck_assert_ptr_ne(map, MAP_FAILED);
        for (int round = 0; round < 2; round++) {
            s = stats(r.p.init);
            put_at(&r, map, len, 0, "file-backed");
            ck_assert_uint_eq(tu_check(r.tbuf, len, 0x71), SIZE_MAX);
            EXPECT_DELTA(r.p.init, s, 0, 1, 1,
                         msg("%s file mapping, round %d: a one-shot",
                             shared ? "shared" : "private", round));
            EXPECT_LIVE(r.p.init, 0u, 0u, "file mappings are not cached");
            memset(r.tbuf, 0, len);
        }
        munmap(map, len);
    }
    close(fd);
    rig_close(&r);
}
END_TEST

START_TEST(test_cache_disabled)
{
    struct ferry_config cfg;
    struct rig r;
    uint8_t *buf = tu_alloc_buf(8 * PG);
    struct ferry_stats s;

    tu_config(&cfg, tu_providers[_i]);
    cfg.registration_cache = 0;
    rig_open(&r, tu_providers[_i], &cfg, false, 4 * MiB);
    ck_assert_ptr_null(ferry__reg_of(r.p.init)->rcache);
    s = stats(r.p.init);
    for (int i = 0; i < 5; i++)
        put_check(&r, buf + (i % 2) * PG, 4 * PG, (uint64_t)i,
                  "without a cache");
    EXPECT_DELTA(r.p.init, s, 0, 0, 5, "without a cache: all one-shots");
    EXPECT_LIVE(r.p.init, 0u, 0u, "no cache");
    tu_free_buf(buf, 8 * PG);
    rig_close(&r);
}
END_TEST

/* ---- I1 ----------------------------------------------------------------------- */

START_TEST(test_invalidate_preserves_errno)
{
    struct rig r;
    uint8_t *buf = tu_alloc_buf(8 * PG);
    static const int values[] = {1234, 0, EINTR, ENOMEM};

    rig_open(&r, tu_tcp(), NULL, false, MiB);
    for (size_t i = 0; i < TU_ARRAY_LEN(values); i++) {
        put_check(&r, buf, 8 * PG, i, "cache it");
        errno = values[i];
        ferry_mem_invalidate(buf, 8 * PG); /* marks an entry */
        ck_assert_int_eq(errno, values[i]);
        ferry_mem_invalidate(buf, 8 * PG); /* marks none */
        ck_assert_int_eq(errno, values[i]);
        ferry_mem_invalidate(buf, 0);
        ck_assert_int_eq(errno, values[i]);
        ferry_mem_invalidate((void *)(UINTPTR_MAX - 10), 100);
        ck_assert_int_eq(errno, values[i]);
        ferry_mem_invalidate(NULL, SIZE_MAX);
        ck_assert_int_eq(errno, values[i]);
    }
    tu_free_buf(buf, 8 * PG);
    rig_close(&r);
}
END_TEST

static uint8_t *i1_buf;
static void i1_calls(void *arg)
{
    struct rh_counts *c = arg;

    rh_count_begin();
    for (int i = 0; i < 100; i++) {
        ferry_mem_invalidate(i1_buf + (size_t)(i % 8) * PG, PG);
        ferry_mem_invalidate(i1_buf + 64 * PG, PG); /* nothing there */
        ferry_mem_invalidate(i1_buf, 0);
        ferry_mem_invalidate((void *)UINTPTR_MAX, 2);
    }
    rh_count_end(c);
}

/* No allocation, no lock, no log line (with FERRY_LOG=debug). */
START_TEST(test_invalidate_allocates_locks_logs_nothing)
{
    struct rig r;
    struct rh_counts c;
    char *err;
    uint64_t inv;

    setenv("FERRY_LOG", "debug", 1);
    rig_open(&r, tu_providers[_i], NULL, false, MiB);
    i1_buf = tu_alloc_buf(128 * PG);
    for (int i = 0; i < 8; i++)
        put_check(&r, i1_buf + (size_t)i * PG, PG, (uint64_t)i, "cache a page");
    EXPECT_LIVE(r.p.init, 8u, 8 * PG, "8 pages cached");

    /* The counting works: a malloc is seen.  Through a volatile pointer:
     * at -O2 the compiler drops a malloc whose result is only freed. */
    rh_count_begin();
    {
        void *volatile p = malloc(10);
        free(p);
    }
    rh_count_end(&c);
    ck_assert_uint_eq(c.allocs, 1);
    ck_assert_uint_eq(c.frees, 1);

    inv = invalidations(r.p.init);
    err = capture_stderr(i1_calls, &c);
    ck_assert_msg(c.allocs == 0 && c.frees == 0,
                  "ferry_mem_invalidate allocated %lu times and freed %lu "
                  "times",
                  c.allocs, c.frees);
    ck_assert_msg(c.locks == 0, "ferry_mem_invalidate took %lu locks",
                  c.locks);
    ck_assert_msg(err[0] == '\0', "ferry_mem_invalidate logged: %s", err);
    free(err);
    ck_assert_uint_eq(invalidations(r.p.init), inv + 8);
    EXPECT_LIVE(r.p.init, 0u, 0u, "all 8 invalidated");

    tu_free_buf(i1_buf, 128 * PG);
    rig_close(&r);
}
END_TEST

START_TEST(test_invalidate_empty_and_wrapping)
{
    struct rig r;
    uint8_t *buf = tu_alloc_buf(8 * PG);
    struct ferry_stats s;

    rig_open(&r, tu_providers[_i], NULL, false, MiB);
    put_check(&r, buf, 8 * PG, 1, "cache it");
    ferry_mem_invalidate(buf, 0);
    ferry_mem_invalidate(buf + 4 * PG, 0);
    ferry_mem_invalidate(buf + PG, SIZE_MAX);          /* wraps */
    ferry_mem_invalidate(buf, (size_t)0 - (uintptr_t)buf + 1); /* wraps */
    ferry_mem_invalidate((void *)(UINTPTR_MAX - PG), 2 * PG);  /* wraps */
    ferry_mem_invalidate(NULL, 0);
    ck_assert_uint_eq(stats(r.p.init).rcache_invalidations, 0);
    EXPECT_LIVE(r.p.init, 1u, 8 * PG, "still cached");
    s = stats(r.p.init);
    put_check(&r, buf, 8 * PG, 2, "after empty and wrapping invalidations");
    EXPECT_DELTA(r.p.init, s, 1, 0, 0, "still a hit");
    /* The last byte of the address space is a valid, non-wrapping end. */
    ferry_mem_invalidate(buf, (size_t)(UINTPTR_MAX - (uintptr_t)buf));
    ck_assert_uint_eq(stats(r.p.init).rcache_invalidations, 1);
    tu_free_buf(buf, 8 * PG);
    rig_close(&r);
}
END_TEST

/* Signal handlers that invalidate while writer threads transfer. */
#define SIG_BUFS 8
#define SIG_THREADS 2
static _Atomic(uint8_t *) sig_bufs[SIG_THREADS][SIG_BUFS];
static atomic_uint sig_handled, sig_errno_bad;
static _Atomic uint64_t sig_rng;

static void on_sigusr1(int signo)
{
    int saved = errno;
    uint64_t x = atomic_fetch_add_explicit(&sig_rng, 0x9e3779b97f4a7c15ull,
                                           memory_order_relaxed);
    uint8_t *b;

    (void)signo;
    x ^= x >> 29;
    b = atomic_load_explicit(&sig_bufs[x % SIG_THREADS][(x >> 8) % SIG_BUFS],
                             memory_order_relaxed);
    errno = 4321;
    if (b != NULL)
        ferry_mem_invalidate(b + ((x >> 16) % 4) * PG, PG);
    if ((x & 15) == 0)
        ferry_mem_invalidate(b, 0);
    if (errno != 4321)
        atomic_fetch_add(&sig_errno_bad, 1);
    atomic_fetch_add_explicit(&sig_handled, 1, memory_order_relaxed);
    errno = saved;
}

struct sig_worker {
    struct rig *r;
    unsigned idx;
    struct watchdog *wd;
    double until;
    unsigned long iterations;
    size_t bad; /* first mismatching byte, or SIZE_MAX */
    unsigned long bad_iter;
    atomic_bool done;
};

static void *sig_worker_main(void *arg)
{
    struct sig_worker *w = arg;
    uint8_t *bufs[SIG_BUFS];
    size_t lens[SIG_BUFS];
    uint64_t roff = (uint64_t)w->idx * MiB;
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    for (unsigned i = 0; i < SIG_BUFS; i++) {
        lens[i] = (i + 1) * 4 * PG;
        bufs[i] = mmap(NULL, lens[i], PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (bufs[i] == MAP_FAILED)
            abort();
        atomic_store(&sig_bufs[w->idx][i], bufs[i]);
    }
    w->bad = SIZE_MAX;
    /* Signals reach this thread only, inside ferry's calls. */
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    while (now_s() < w->until || w->iterations < 3) {
        unsigned i = (unsigned)(w->iterations % SIG_BUFS);
        uint64_t seed = w->idx * 1000003ull + w->iterations;
        struct ferry_iov iov = {bufs[i], NULL, w->r->rmem, roff, lens[i]};
        ferry_req_t *req;
        size_t bad;

        atomic_store(&w->wd->stage[w->idx], "filling");
        tu_fill(bufs[i], lens[i], seed);
        atomic_store(&w->wd->stage[w->idx], "ferry_write");
        if (ferry_write(w->r->p.peer, &iov, 1, NULL, &req) != 0) {
            w->bad_iter = w->iterations;
            w->bad = 0;
            break;
        }
        atomic_store(&w->wd->stage[w->idx], "ferry_req_wait");
        if (ferry_req_wait(req, 60000) != 0) {
            w->bad_iter = w->iterations;
            w->bad = 1;
            ferry_req_close(req);
            break;
        }
        ferry_req_close(req);
        atomic_store(&w->wd->stage[w->idx], "checking");
        bad = tu_check(w->r->tbuf + roff, lens[i], seed);
        if (bad != SIZE_MAX) {
            w->bad = bad;
            w->bad_iter = w->iterations;
            break;
        }
        w->iterations++;
        atomic_fetch_add(&w->wd->progress[w->idx], 1);
    }
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    for (unsigned i = 0; i < SIG_BUFS; i++)
        atomic_store(&sig_bufs[w->idx][i], NULL);
    for (unsigned i = 0; i < SIG_BUFS; i++)
        munmap(bufs[i], lens[i]);
    atomic_store(&w->done, true);
    return NULL;
}

START_TEST(test_invalidate_in_signal_handlers)
{
    struct rig r;
    struct sigaction sa;
    sigset_t set;
    struct watchdog wd;
    struct sig_worker w[SIG_THREADS];
    pthread_t th[SIG_THREADS];
    unsigned long sent = 0;
    struct ferry_stats s;

    /* Only the workers take SIGUSR1: ferry's threads, created below,
     * inherit the blocked mask. */
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);

    rig_open(&r, tu_providers[_i], NULL, false, 4 * MiB);
    watchdog_start(&wd, "transfers with invalidating signal handlers",
                   SIG_THREADS, 30);
    for (unsigned i = 0; i < SIG_THREADS; i++) {
        w[i] = (struct sig_worker){.r = &r, .idx = i, .wd = &wd,
                                   .until = now_s() + 2.0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, sig_worker_main, &w[i]),
                         0);
    }
    /* Signal the workers as fast as they take it, until they end (the
     * watchdog ends the test if they stop making progress). */
    while (!atomic_load(&w[0].done) || !atomic_load(&w[1].done)) {
        for (unsigned i = 0; i < SIG_THREADS; i++)
            if (!atomic_load(&w[i].done) && pthread_kill(th[i], SIGUSR1) == 0)
                sent++;
        for (volatile int spin = 0; spin < 2000; spin++)
            ;
    }
    for (unsigned i = 0; i < SIG_THREADS; i++)
        pthread_join(th[i], NULL);
    watchdog_stop(&wd);
    s = stats(r.p.init);
    for (unsigned i = 0; i < SIG_THREADS; i++) {
        ck_assert_msg(w[i].bad == SIZE_MAX,
                      "worker %u, iteration %lu: %s %zu", i, w[i].bad_iter,
                      w[i].bad <= 1 ? "transfer failed:" : "bad byte",
                      w[i].bad);
        ck_assert_uint_ge(w[i].iterations, 3);
    }
    ck_assert_msg(atomic_load(&sig_errno_bad) == 0,
                  "ferry_mem_invalidate changed errno in %u signal handlers",
                  atomic_load(&sig_errno_bad));
    ck_assert_msg(atomic_load(&sig_handled) >= 20,
                  "only %u of %lu signals were handled",
                  atomic_load(&sig_handled), sent);
    ck_assert_uint_ge(s.rcache_invalidations, 1);
    fprintf(stderr,
            "signals: %u handled; %lu + %lu transfers; %llu hits, %llu "
            "misses, %llu invalidations\n",
            atomic_load(&sig_handled), w[0].iterations, w[1].iterations,
            (unsigned long long)s.rcache_hits,
            (unsigned long long)s.rcache_misses,
            (unsigned long long)s.rcache_invalidations);
    rig_close(&r);
}
END_TEST

/* ---- the purging allocator ------------------------------------------------- */

#define ARENA_PAGES 32
#define LOOP_THREADS 2

struct loop_worker {
    struct rig *r;
    unsigned idx;
    struct watchdog *wd;
    uint8_t *arena;
    double until;
    unsigned long min_iterations;
    unsigned long iterations;
    char failure[200];
};

static void *loop_worker_main(void *arg)
{
    static const size_t sizes[] = {1000, 8 * KiB, 20 * KiB, 64 * KiB,
                                   200 * KiB, 300 * KiB};
    struct loop_worker *w = arg;
    uint64_t rng = 0x1234567 + w->idx;
    uint64_t roff = (uint64_t)w->idx * MiB;

    rh_participate();
    while (now_s() < w->until || w->iterations < w->min_iterations) {
        size_t size = sizes[rng_next(&rng) % TU_ARRAY_LEN(sizes)];
        uint64_t seed = w->idx * 1000003ull + w->iterations;
        bool explicit_reg = w->iterations % 4 == 3;
        uint8_t *buf;
        ferry_mem_t *m = NULL;
        ferry_req_t *req;
        struct ferry_iov iov;
        size_t k, n, bad;
        int ret;

        atomic_store(&w->wd->stage[w->idx], "malloc");
        buf = malloc(size);
        if (buf == NULL) {
            snprintf(w->failure, sizeof(w->failure), "malloc failed");
            break;
        }
        tu_fill(buf, size, seed);
        if (explicit_reg) {
            atomic_store(&w->wd->stage[w->idx], "ferry_mem_register");
            ret = ferry_mem_register(w->r->p.init, buf, size, FERRY_MEM_HOST,
                                     0, 0, &m);
            if (ret != 0) {
                snprintf(w->failure, sizeof(w->failure),
                         "ferry_mem_register: %s", ferry_last_error());
                free(buf);
                break;
            }
        }
        iov = (struct ferry_iov){buf, m, w->r->rmem, roff, size};
        atomic_store(&w->wd->stage[w->idx], "ferry_write");
        ret = ferry_write(w->r->p.peer, &iov, 1, NULL, &req);
        if (ret == 0) {
            atomic_store(&w->wd->stage[w->idx], "ferry_req_wait");
            ret = ferry_req_wait(req, 60000);
            ferry_req_close(req);
        }
        if (ret != 0) {
            snprintf(w->failure, sizeof(w->failure), "transfer: %s: %s",
                     ferry_strerror(ret), ferry_last_error());
            free(buf);
            break;
        }
        bad = tu_check(w->r->tbuf + roff, size, seed);
        if (bad != SIZE_MAX) {
            snprintf(w->failure, sizeof(w->failure),
                     "iteration %lu: byte %zu of %zu landed wrong",
                     w->iterations, bad, size);
            free(buf);
            break;
        }
        if (m != NULL) {
            atomic_store(&w->wd->stage[w->idx], "ferry_mem_close");
            ret = ferry_mem_close(m);
            if (ret != 0) {
                snprintf(w->failure, sizeof(w->failure),
                         "ferry_mem_close: %s", ferry_last_error());
                free(buf);
                break;
            }
        }
        atomic_store(&w->wd->stage[w->idx], "free");
        free(buf);

        /* A registration through the cache of part of the purged arena:
         * this watches it again (what the allocator remapped no longer
         * is).  Only registered, never read: the allocator rewrites the
         * arena while we go (a transfer from it would be a data race). */
        k = rng_next(&rng) % ARENA_PAGES;
        n = 1 + rng_next(&rng) % (ARENA_PAGES - k);
        {
            struct ferry_mem *am;
            struct ferry__rc_entry *ae;

            atomic_store(&w->wd->stage[w->idx], "arena registration");
            ret = ferry__rcache_get(w->r->p.init, w->arena + k * PG, n * PG,
                                    &am, &ae);
            if (ret != 0) {
                snprintf(w->failure, sizeof(w->failure),
                         "arena registration: %s: %s", ferry_strerror(ret),
                         ferry_last_error());
                break;
            }
            if (ae != NULL)
                ferry__rcache_put(ae);
            else
                ferry__mem_close(am);
        }
        w->iterations++;
        atomic_fetch_add(&w->wd->progress[w->idx], 1);
    }
    return NULL;
}

/*
 * Two threads allocate, register (through the cache and explicitly),
 * transfer and free, with an allocator that gives memory back to the OS
 * in malloc and free and tells ferry, including from inside ferry's own
 * allocations under its writer lock.  Under FERRY_TEST_MIMALLOC=1
 * (test/rcache_mimalloc.sh) the shim only forwards, to the real mimalloc.
 */
START_TEST(test_purging_allocator)
{
    struct ferry_config cfg;
    struct rig r;
    struct watchdog wd;
    struct loop_worker w[LOOP_THREADS];
    pthread_t th[LOOP_THREADS];
    bool mimalloc = getenv("FERRY_TEST_MIMALLOC") != NULL;
    pthread_mutex_t *writer;
    struct rh_stats hs;
    struct ferry_stats s;
    uint8_t *arena;

    if (mimalloc)
        ck_assert_msg(strstr(rh_next_malloc_owner(), "mimalloc") != NULL,
                      "FERRY_TEST_MIMALLOC is set but malloc is %s's",
                      rh_next_malloc_owner());
    tu_config(&cfg, tu_providers[_i]);
    rig_open(&r, tu_providers[_i], &cfg, false, 4 * MiB);
    writer = writer_lock(r.p.init, cfg.rcache_max_entries,
                         cfg.rcache_max_bytes);
    arena = tu_alloc_buf(ARENA_PAGES * PG);
    put_check(&r, arena, ARENA_PAGES * PG, 1, "watch the arena");
    if (!mimalloc)
        rh_purge_start(arena, ARENA_PAGES, writer);

    watchdog_start(&wd, "the purging allocator loop", LOOP_THREADS, 30);
    for (unsigned i = 0; i < LOOP_THREADS; i++) {
        w[i] = (struct loop_worker){.r = &r, .idx = i, .wd = &wd,
                                    .arena = arena,
                                    .until = now_s() + (mimalloc ? 3.0 : 1.5),
                                    .min_iterations = 20};
        ck_assert_int_eq(
            pthread_create(&th[i], NULL, loop_worker_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < LOOP_THREADS; i++)
        pthread_join(th[i], NULL);
    watchdog_stop(&wd);
    rh_purge_stop();
    rh_stats(&hs);
    s = stats(r.p.init);
    fprintf(stderr,
            "%s on %s: %lu + %lu iterations; allocator purges %llu (%llu "
            "unmaps, %llu under ferry's writer lock), %llu frees madvised; "
            "cache: %llu hits, %llu misses, %llu invalidations, %llu "
            "one-shots\n",
            mimalloc ? "mimalloc" : "purging shim", tu_providers[_i],
            w[0].iterations, w[1].iterations,
            (unsigned long long)hs.purges,
            (unsigned long long)hs.purge_unmaps,
            (unsigned long long)hs.purges_under_writer,
            (unsigned long long)hs.free_madvises,
            (unsigned long long)s.rcache_hits,
            (unsigned long long)s.rcache_misses,
            (unsigned long long)s.rcache_invalidations,
            (unsigned long long)s.oneshot_registrations);
    for (unsigned i = 0; i < LOOP_THREADS; i++)
        ck_assert_msg(w[i].failure[0] == '\0', "worker %u: %s", i,
                      w[i].failure);
    if (!mimalloc) {
        /* The loop did what it is for. */
        ck_assert_uint_ge(hs.purges, 100);
        ck_assert_uint_ge(hs.purge_unmaps, 10);
        ck_assert_uint_ge(hs.free_madvises, 10);
        ck_assert_msg(hs.purges_under_writer >= 1,
                      "no purge happened under ferry's writer lock");
        ck_assert_uint_ge(s.rcache_invalidations, 10);
    } else {
        /* Only the monitor invalidates here: mimalloc gave memory the
         * cache watched back to the OS, and ferry saw it. */
        ck_assert_msg(s.rcache_invalidations >= 10,
                      "mimalloc's purges invalidated %llu entries: is it "
                      "purging eagerly (MIMALLOC_PAGE_RESET=1, "
                      "MIMALLOC_DECOMMIT_DELAY=0)?",
                      (unsigned long long)s.rcache_invalidations);
    }
    tu_free_buf(arena, ARENA_PAGES * PG);
    rig_close(&r);
}
END_TEST

/*
 * Every allocation munmaps (mmap MAP_FIXED) a watched page, so the one
 * made under the writer lock (the new snapshot) blocks in the kernel until
 * the monitor has read the UNMAP event.  A monitor that needed the writer
 * lock would deadlock here.
 */
START_TEST(test_unmap_under_writer_lock)
{
    struct ferry_config cfg;
    struct rig r;
    struct watchdog wd;
    pthread_mutex_t *writer;
    struct rh_stats hs;
    uint8_t *arena, *bufs[8];
    uint64_t seq0;

    tu_config(&cfg, tu_tcp());
    rig_open(&r, tu_tcp(), &cfg, false, 4 * MiB);
    writer = writer_lock(r.p.init, cfg.rcache_max_entries,
                         cfg.rcache_max_bytes);
    arena = tu_alloc_buf(256 * PG);
    rh_participate();
    watchdog_start(&wd, "munmap under the writer lock", 1, 30);
    for (int i = 0; i < 8; i++) {
        bufs[i] = tu_alloc_buf(PG);
        /* Watch the whole arena again, then miss with purging on. */
        put_check(&r, arena, 256 * PG, (uint64_t)i, "watch the arena");
        seq0 = ferry__monitor_seq();
        atomic_store(&wd.stage[0], "a miss with the allocator unmapping");
        rh_purge_start(arena, 256, writer);
        put_at(&r, bufs[i], PG, 0, "a miss");
        rh_purge_stop();
        ck_assert_msg(ferry__monitor_seq() > seq0,
                      "the monitor saw no event: the arena was not watched");
        atomic_fetch_add(&wd.progress[0], 1);
    }
    watchdog_stop(&wd);
    rh_stats(&hs);
    ck_assert_msg(hs.purges_under_writer >= 8,
                  "%llu of %llu purges were under ferry's writer lock",
                  (unsigned long long)hs.purges_under_writer,
                  (unsigned long long)hs.purges);
    ck_assert_uint_ge(stats(r.p.init).rcache_invalidations, 8);
    for (int i = 0; i < 8; i++)
        tu_free_buf(bufs[i], PG);
    tu_free_buf(arena, 256 * PG);
    rig_close(&r);
}
END_TEST

/* ---- a large cache: the splice path and the reused snapshot ---------------- */

#define MANY_PAGES 6000 /* past the size from which snapshots are reused */

/*
 * Thousands of one-page entries inserted in a random order (each miss
 * splices its entry into a copy of the sorted arrays, the snapshot
 * reused once reclaimed), then every seventh page invalidated (the next
 * miss must filter the dead out): every page must then hit or miss as
 * the model says, and the cache must count exactly its live entries.
 */
START_TEST(test_many_entries)
{
    struct ferry_config cfg;
    struct rig r;
    uint8_t *mem = tu_alloc_buf(MANY_PAGES * PG);
    uint32_t *order = malloc(MANY_PAGES * sizeof(*order));
    uint64_t rng = 20261124, dead = 0;
    struct ferry_stats s;

    ck_assert_ptr_nonnull(order);
    tu_config(&cfg, tu_tcp());
    cfg.rcache_max_entries = 2 * MANY_PAGES;
    cfg.rcache_max_bytes = 2ul * MANY_PAGES * PG;
    rig_open(&r, tu_tcp(), &cfg, false, PG);
    for (uint32_t i = 0; i < MANY_PAGES; i++)
        order[i] = i;
    for (uint32_t i = MANY_PAGES - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(rng_next(&rng) % (i + 1)), t = order[i];

        order[i] = order[j];
        order[j] = t;
    }
    s = stats(r.p.init);
    for (uint32_t i = 0; i < MANY_PAGES; i++)
        put_at(&r, mem + (size_t)order[i] * PG, PG, 0, "filling");
    EXPECT_DELTA(r.p.init, s, 0, MANY_PAGES, 0, "one miss per page");
    EXPECT_LIVE(r.p.init, MANY_PAGES, MANY_PAGES * PG, "filled");

    for (uint32_t p = 0; p < MANY_PAGES; p += 7, dead++)
        ferry_mem_invalidate(mem + (size_t)p * PG, PG);
    EXPECT_LIVE(r.p.init, MANY_PAGES - dead, (MANY_PAGES - dead) * PG,
                "every seventh page invalidated");
    s = stats(r.p.init);
    for (uint32_t i = 0; i < MANY_PAGES; i++) {
        uint32_t p = order[i];
        struct ferry_stats b = stats(r.p.init);

        put_check(&r, mem + (size_t)p * PG, PG, p, "again");
        EXPECT_DELTA(r.p.init, b, p % 7 != 0, p % 7 == 0, 0,
                     p % 7 ? "a live page hits" : "an invalidated page misses");
    }
    EXPECT_DELTA(r.p.init, s, MANY_PAGES - dead, dead, 0, "the second pass");
    EXPECT_LIVE(r.p.init, MANY_PAGES, MANY_PAGES * PG, "all cached again");
    free(order);
    rig_close(&r);
    tu_free_buf(mem, MANY_PAGES * PG);
}
END_TEST

/* ---- the invalidation ring wrapping during a registration ------------------ */

/*
 * An allocator hook invalidating the very range being inserted, from the
 * first allocation under the writer lock (the entry's slab chunk, or the
 * new snapshot): after the
 * insertion's first look at the ring, before the snapshot holding the new
 * entry is published, so the invalidation marks nothing.  Only the look
 * at the ring after publishing can catch it.
 */
struct publish_race {
    pthread_mutex_t *writer;
    pid_t tid;
    uint8_t *buf;
    size_t len;
    bool acted;
};

static void invalidate_if_publishing(void *arg)
{
    struct publish_race *pr = arg;

    if (__atomic_load_n(&pr->writer->__data.__owner, __ATOMIC_RELAXED) !=
        pr->tid) {
        rh_on_alloc_size(SIZE_MAX, invalidate_if_publishing, pr);
        return;
    }
    ferry_mem_invalidate(pr->buf + PG, 1);
    pr->acted = true;
}

START_TEST(test_invalidation_while_publishing)
{
    struct ferry_config cfg;
    struct rig r;
    struct publish_race pr = {.len = 4 * PG};
    struct ferry_stats s;
    struct watchdog wd;

    tu_config(&cfg, tu_tcp());
    rig_open(&r, tu_tcp(), &cfg, false, MiB);
    pr.writer = writer_lock(r.p.init, cfg.rcache_max_entries,
                            cfg.rcache_max_bytes);
    pr.tid = (pid_t)syscall(SYS_gettid);
    pr.buf = tu_alloc_buf(pr.len);
    watchdog_start(&wd, "invalidating from an allocation under the writer "
                   "lock", 1, 30);
    atomic_store(&wd.stage[0], "inserting");
    for (int round = 0; round < 2; round++) {
        /* Round 0 inserts into an empty cache, round 1 next to an entry. */
        uint8_t *other = tu_alloc_buf(PG);

        if (round == 1)
            put_check(&r, other, PG, 9, "another entry");
        pr.acted = false;
        rh_on_alloc_size(SIZE_MAX, invalidate_if_publishing, &pr);
        s = stats(r.p.init);
        put_check(&r, pr.buf, pr.len, (uint64_t)round, "insert, raced");
        rh_on_alloc_size(0, NULL, NULL);
        ck_assert_msg(pr.acted, "no allocation happened under the writer "
                      "lock");
        EXPECT_DELTA(r.p.init, s, 0, 1, 0, "the raced insertion");
        EXPECT_LIVE(r.p.init, (uint64_t)round, round * PG,
                    "the raced entry is not live");
        s = stats(r.p.init);
        put_check(&r, pr.buf, pr.len, 10 + (uint64_t)round, "again");
        EXPECT_DELTA(r.p.init, s, 0, 1, 0,
                     "the range invalidated while its entry was being "
                     "published: a miss, not a stale hit");
        ferry_mem_invalidate(pr.buf, pr.len);
        ferry_mem_invalidate(other, PG);
        tu_free_buf(other, PG);
        atomic_fetch_add(&wd.progress[0], 1);
    }
    watchdog_stop(&wd);
    tu_free_buf(pr.buf, pr.len);
    rig_close(&r);
}
END_TEST

/* A second thread that sends invalidations of [base + i * PG, +PG). */
struct spammer {
    pthread_t thread;
    _Atomic(uint8_t *) base;
    _Atomic size_t pages;
    atomic_int go;   /* invalidations to send now; -1: exit */
    atomic_bool done;
    atomic_bool bursty; /* send bursts on its own, with pauses */
    _Atomic uint64_t sent;
    int n_next; /* what spam_now asks for */
};

static void spray(struct spammer *s, int n)
{
    uint8_t *base = atomic_load(&s->base);
    size_t pages = atomic_load(&s->pages);

    for (int i = 0; i < n; i++) {
        ferry_mem_invalidate(base + ((size_t)i % pages) * PG, PG);
        atomic_fetch_add(&s->sent, 1);
    }
}

static void *spammer_main(void *arg)
{
    struct spammer *s = arg;
    uint64_t rng = 99;

    rh_exempt_thread();
    for (;;) {
        int n = atomic_load(&s->go);

        if (n < 0)
            break;
        if (atomic_load(&s->bursty)) {
            struct timespec ts = {0, (long)(rng_next(&rng) % 300) * 1000};
            spray(s, (int)(rng_next(&rng) % 1600));
            nanosleep(&ts, NULL);
        } else if (n > 0) {
            spray(s, n);
            atomic_store(&s->go, 0);
            atomic_store(&s->done, true);
        } else {
            sched_yield();
        }
    }
    return NULL;
}

static void spammer_start(struct spammer *s, uint8_t *base, size_t pages)
{
    memset(s, 0, sizeof(*s));
    atomic_store(&s->base, base);
    atomic_store(&s->pages, pages);
    ck_assert_int_eq(pthread_create(&s->thread, NULL, spammer_main, s), 0);
}

static void spammer_stop(struct spammer *s)
{
    atomic_store(&s->go, -1);
    pthread_join(s->thread, NULL);
}

/* Runs inside the miss's allocation of its registration (ferry_mem), after
 * the miss noted the ring position: the spammer sends n_next and this
 * thread waits for it. */
static void spam_now(void *arg)
{
    struct spammer *s = arg;
    double until = now_s() + 20;

    atomic_store(&s->done, false);
    atomic_store(&s->go, s->n_next);
    while (!atomic_load(&s->done) && now_s() < until)
        sched_yield();
}

/*
 * A miss of buf while `n` invalidations of [base, +pages) arrive from
 * another thread during its registration.  cached: whether the new
 * registration may be cached.  Then the same range again, undisturbed.
 */
static void miss_during_spam(struct rig *r, struct spammer *sp, uint8_t *buf,
                             size_t len, uint8_t *base, size_t pages, int n,
                             bool cached, const char *what)
{
    struct ferry_stats s = stats(r->p.init);
    uint64_t entries = s.rcache_entries, sent = atomic_load(&sp->sent);
    bool fired;

    atomic_store(&sp->base, base);
    atomic_store(&sp->pages, pages);
    sp->n_next = n;
    rh_on_alloc_size(sizeof(struct ferry_mem), spam_now, sp);
    put_check(r, buf, len, (uint64_t)n, what);
    fired = rh_on_alloc_fired();
    rh_on_alloc_size(0, NULL, NULL);
    ck_assert_msg(fired, "%s: the registration's allocation was not seen",
                  what);
    ck_assert_uint_eq(atomic_load(&sp->sent) - sent, (uint64_t)n);
    EXPECT_DELTA(r->p.init, s, 0, 1, cached ? 0 : 1,
                 msg("%s: %s", what, cached ? "cached" : "a one-shot"));
    EXPECT_LIVE(r->p.init, entries + (cached ? 1 : 0),
                stats(r->p.init).rcache_bytes, what);

    /* Undisturbed, the same range: a hit if cached, else a miss that is
     * cached now. */
    s = stats(r->p.init);
    put_check(r, buf, len, (uint64_t)n + 1, what);
    EXPECT_DELTA(r->p.init, s, cached ? 1 : 0, cached ? 0 : 1, 0,
                 msg("%s, then undisturbed", what));
    EXPECT_LIVE(r->p.init, entries + 1, stats(r->p.init).rcache_bytes, what);
}

START_TEST(test_ring_wraps_during_registration)
{
    struct rig r;
    struct spammer sp;
    uint8_t *far = tu_alloc_buf(64 * PG), *bufs[4];

    rig_open(&r, tu_tcp(), NULL, false, MiB);
    spammer_start(&sp, far, 64);
    for (int i = 0; i < 4; i++)
        bufs[i] = tu_alloc_buf(4 * PG);
    /* Fewer than the ring holds, none overlapping: cached. */
    miss_during_spam(&r, &sp, bufs[0], 4 * PG, far, 64, RING_SLOTS - 24,
                     true, "1000 unrelated invalidations");
    /* More than the ring holds: the overlap check cannot see them all, so
     * the registration must not be cached. */
    miss_during_spam(&r, &sp, bufs[1], 4 * PG, far, 64, RING_SLOTS + 76,
                     false, "1100 unrelated invalidations (the ring wraps)");
    miss_during_spam(&r, &sp, bufs[2], 4 * PG, far, 64, 3 * RING_SLOTS,
                     false, "3072 unrelated invalidations");
    /* One overlapping invalidation: not cached either. */
    miss_during_spam(&r, &sp, bufs[3], 4 * PG, bufs[3] + 2 * PG, 1, 1, false,
                     "one overlapping invalidation");
    spammer_stop(&sp);
    for (int i = 0; i < 4; i++)
        tu_free_buf(bufs[i], 4 * PG);
    tu_free_buf(far, 64 * PG);
    rig_close(&r);
}
END_TEST

/*
 * Misses racing a thread that sends bursts of unrelated invalidations,
 * some longer than the ring: every byte lands, and a miss during which no
 * invalidation arrived at all is cached.
 */
START_TEST(test_ring_wraps_under_stress)
{
    struct rig r;
    struct spammer sp;
    size_t pages = 256;
    uint8_t *far = tu_alloc_buf(64 * PG), *big = tu_alloc_buf(pages * PG);
    unsigned quiet = 0, busy = 0, oneshots = 0;
    bool *was_quiet = calloc(pages, sizeof(bool));
    struct watchdog wd;
    struct ferry_stats s;

    rig_open(&r, tu_tcp(), NULL, false, MiB);
    spammer_start(&sp, far, 64);
    atomic_store(&sp.bursty, true);
    watchdog_start(&wd, "misses racing invalidation bursts", 1, 30);
    for (size_t i = 0; i < pages; i++) {
        uint64_t c0 = atomic_load(&sp.sent), c1;
        struct ferry_stats a;

        s = stats(r.p.init);
        put_check(&r, big + i * PG, PG / 2, i, "a miss during bursts");
        c1 = atomic_load(&sp.sent);
        a = stats(r.p.init);
        ck_assert_uint_eq(a.rcache_misses - s.rcache_misses, 1);
        oneshots += (unsigned)(a.oneshot_registrations -
                               s.oneshot_registrations);
        if (c1 == c0) {
            quiet++;
            was_quiet[i] = true;
            ck_assert_msg(a.oneshot_registrations == s.oneshot_registrations,
                          "page %zu: no invalidation arrived, yet the miss "
                          "was not cached",
                          i);
        } else {
            busy++;
        }
        atomic_fetch_add(&wd.progress[0], 1);
    }
    watchdog_stop(&wd);
    spammer_stop(&sp);
    s = stats(r.p.init);
    fprintf(stderr,
            "ring stress: %u quiet misses, %u during bursts, %u one-shots, "
            "%llu live entries, %llu invalidations sent\n",
            quiet, busy, oneshots, (unsigned long long)s.rcache_entries,
            (unsigned long long)atomic_load(&sp.sent));
    /* A miss raced by an invalidation may be cached and marked dead at
     * once (conservatively); one that saw none stays live. */
    ck_assert_uint_le(s.rcache_entries, pages - oneshots);
    ck_assert_uint_ge(s.rcache_entries, quiet);
    for (size_t i = 0; i < pages; i++) {
        if (!was_quiet[i])
            continue;
        s = stats(r.p.init);
        put_check(&r, big + i * PG, PG / 2, i + 1, "a quiet page again");
        EXPECT_DELTA(r.p.init, s, 1, 0, 0, "a quiet page again: a hit");
    }
    free(was_quiet);
    tu_free_buf(far, 64 * PG);
    tu_free_buf(big, pages * PG);
    rig_close(&r);
}
END_TEST

/* ---- the model ------------------------------------------------------------ */

/*
 * A model of one cache, fed the same operations: live entries sorted by
 * start (dead ones stay until the next insertion drops them), the
 * lookup's scan of at most LOOKUP_SCAN entries to the left, CLOCK
 * eviction with a hand that walks the current array, and caps counted on
 * live entries.  It mirrors rcache.c's policy on purpose: any difference
 * in hits, misses, one-shots, evictions, invalidations, live entries or
 * bytes fails the step that caused it.
 */
#define LOOKUP_SCAN 8 /* rcache.c */
#define M_ARENAS 4
#define M_PAGES 32
#define M_STRIDE 36 /* pages between arena starts */
#define M_MAX_ENTRIES 6
#define M_MAX_BYTES (24 * PG) /* less than an arena: some misses cannot be cached */

struct m_entry {
    uintptr_t start, end;
    bool dead, ref;
};

struct model {
    struct m_entry e[128];
    size_t n, hand;
    uint64_t hits, misses, oneshots, evictions, invalidations;
};

static size_t m_lower_bound(const struct model *m, uintptr_t key)
{
    size_t i = 0;

    while (i < m->n && m->e[i].start < key)
        i++;
    return i;
}

static bool m_lookup(struct model *m, uintptr_t start, uintptr_t end)
{
    size_t i = m_lower_bound(m, start + 1);

    for (size_t k = 0; i-- > 0 && k < LOOKUP_SCAN; k++) {
        if (m->e[i].end < end || m->e[i].dead)
            continue;
        m->e[i].ref = true;
        return true;
    }
    return false;
}

static bool m_evict(struct model *m, size_t need)
{
    size_t live = 0, bytes = 0;

    for (size_t i = 0; i < m->n; i++)
        if (!m->e[i].dead) {
            live++;
            bytes += m->e[i].end - m->e[i].start;
        }
    for (size_t turn = 0; turn < 2 * m->n &&
                          (live + 1 > M_MAX_ENTRIES ||
                           bytes + need > M_MAX_BYTES);
         turn++) {
        struct m_entry *x = &m->e[m->hand++ % m->n];

        if (x->dead)
            continue;
        if (x->ref) {
            x->ref = false;
            continue;
        }
        x->dead = true;
        m->evictions++;
        live--;
        bytes -= x->end - x->start;
    }
    return live + 1 <= M_MAX_ENTRIES && bytes + need <= M_MAX_BYTES;
}

static void m_insert(struct model *m, uintptr_t start, uintptr_t end)
{
    struct m_entry out[128];
    size_t k = 0;
    bool placed = false;

    for (size_t i = 0; i < m->n; i++) {
        if (m->e[i].dead)
            continue;
        if (!placed && start < m->e[i].start) {
            out[k++] = (struct m_entry){start, end, false, true};
            placed = true;
        }
        out[k++] = m->e[i];
    }
    if (!placed)
        out[k++] = (struct m_entry){start, end, false, true};
    memcpy(m->e, out, k * sizeof(out[0]));
    m->n = k;
}

static void m_transfer(struct model *m, uintptr_t start, uintptr_t end)
{
    if (m_lookup(m, start, end)) {
        m->hits++;
        return;
    }
    m->misses++;
    if (m_evict(m, end - start))
        m_insert(m, start, end);
    else
        m->oneshots++;
}

static void m_invalidate(struct model *m, uintptr_t start, uintptr_t end)
{
    if (end <= start)
        return;
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].start < end && m->e[i].end > start && !m->e[i].dead) {
            m->e[i].dead = true;
            m->invalidations++;
        }
}

static void m_compare(const struct model *m, ferry_context_t *ctx,
                      const struct ferry_stats *base, int step,
                      const char *op)
{
    struct ferry_stats s = stats(ctx);
    uint64_t live = 0, bytes = 0;

    for (size_t i = 0; i < m->n; i++)
        if (!m->e[i].dead) {
            live++;
            bytes += m->e[i].end - m->e[i].start;
        }
    ck_assert_msg(s.rcache_hits - base->rcache_hits == m->hits &&
                      s.rcache_misses - base->rcache_misses == m->misses &&
                      s.oneshot_registrations -
                              base->oneshot_registrations ==
                          m->oneshots &&
                      s.rcache_evictions - base->rcache_evictions ==
                          m->evictions &&
                      s.rcache_invalidations - base->rcache_invalidations ==
                          m->invalidations &&
                      s.rcache_entries == live && s.rcache_bytes == bytes,
                  "step %d (%s): cache hits %llu misses %llu one-shots %llu "
                  "evictions %llu invalidations %llu live %llu/%llu B; model "
                  "%llu %llu %llu %llu %llu %llu/%llu B",
                  step, op,
                  (unsigned long long)(s.rcache_hits - base->rcache_hits),
                  (unsigned long long)(s.rcache_misses - base->rcache_misses),
                  (unsigned long long)(s.oneshot_registrations -
                                       base->oneshot_registrations),
                  (unsigned long long)(s.rcache_evictions -
                                       base->rcache_evictions),
                  (unsigned long long)(s.rcache_invalidations -
                                       base->rcache_invalidations),
                  (unsigned long long)s.rcache_entries,
                  (unsigned long long)s.rcache_bytes,
                  (unsigned long long)m->hits, (unsigned long long)m->misses,
                  (unsigned long long)m->oneshots,
                  (unsigned long long)m->evictions,
                  (unsigned long long)m->invalidations,
                  (unsigned long long)live, (unsigned long long)bytes);
}

START_TEST(test_model_random_walk)
{
    struct ferry_config cfg;
    struct rig r;
    struct model *m = calloc(1, sizeof(*m));
    uint64_t rng = 20240611;
    size_t span = M_ARENAS * M_STRIDE * PG;
    uint8_t *mem;
    struct ferry_stats base;
    unsigned counts[6] = {0};

    tu_config(&cfg, tu_providers[_i]);
    cfg.rcache_max_entries = M_MAX_ENTRIES;
    cfg.rcache_max_bytes = M_MAX_BYTES;
    rig_open(&r, tu_providers[_i], &cfg, false, MiB);
    mem = tu_alloc_buf(span);
    base = stats(r.p.init);

    for (int step = 0; step < 600; step++) {
        unsigned op = (unsigned)(rng_next(&rng) % 100);
        uint8_t *arena = mem + (rng_next(&rng) % M_ARENAS) * M_STRIDE * PG;
        size_t k = rng_next(&rng) % M_PAGES;
        size_t n = 1 + rng_next(&rng) % (M_PAGES - k);
        const char *what;

        if (op < 30 && m->n > 0) {
            /* Inside an entry of the model, live or not. */
            struct m_entry *x = &m->e[rng_next(&rng) % m->n];
            size_t len = x->end - x->start;
            size_t off = rng_next(&rng) % len;
            size_t l = 1 + rng_next(&rng) % (len - off);
            uint8_t *p = (uint8_t *)x->start + off;

            what = "transfer inside an entry";
            counts[0]++;
            m_transfer(m, page_down((uintptr_t)p), page_up((uintptr_t)p + l));
            put_check(&r, p, l, (uint64_t)step, what);
        } else if (op < 70) {
            /* Anywhere in an arena, at most 8 pages, any alignment. */
            size_t off = rng_next(&rng) % PG;
            size_t l = 1 + rng_next(&rng) % (n > 8 ? 8 * PG : n * PG - off);
            uint8_t *p = arena + k * PG + off;

            if (p + l > arena + M_PAGES * PG)
                l = (size_t)(arena + M_PAGES * PG - p);
            what = "transfer";
            counts[1]++;
            m_transfer(m, page_down((uintptr_t)p), page_up((uintptr_t)p + l));
            put_check(&r, p, l, (uint64_t)step, what);
        } else if (op < 80) {
            /* Explicit, any bytes, possibly across arenas, possibly empty. */
            size_t off = rng_next(&rng) % (span - 16 * PG);
            size_t l = rng_next(&rng) % (16 * PG);

            what = "ferry_mem_invalidate";
            counts[2]++;
            ferry_mem_invalidate(mem + off, l);
            m_invalidate(m, (uintptr_t)mem + off, (uintptr_t)mem + off + l);
        } else if (op < 88) {
            what = "munmap + mmap MAP_FIXED";
            counts[3]++;
            ck_assert_int_eq(munmap(arena + k * PG, n * PG), 0);
            ck_assert_ptr_eq(mmap(arena + k * PG, n * PG,
                                  PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                                  0),
                             arena + k * PG);
            settle_monitor();
            m_invalidate(m, (uintptr_t)(arena + k * PG),
                         (uintptr_t)(arena + (k + n) * PG));
        } else if (op < 96) {
            what = "madvise(MADV_DONTNEED)";
            counts[4]++;
            ck_assert_int_eq(madvise(arena + k * PG, n * PG, MADV_DONTNEED),
                             0);
            settle_monitor();
            m_invalidate(m, (uintptr_t)(arena + k * PG),
                         (uintptr_t)(arena + (k + n) * PG));
        } else {
            /* The same whole arena, twice: larger than the byte cap, so
             * two one-shots. */
            what = "whole arena twice";
            counts[5]++;
            for (int t = 0; t < 2; t++) {
                m_transfer(m, (uintptr_t)arena,
                           (uintptr_t)(arena + M_PAGES * PG));
                put_check(&r, arena, M_PAGES * PG, (uint64_t)step, what);
            }
        }
        m_compare(m, r.p.init, &base, step, what);
    }
    fprintf(stderr,
            "model walk: %u+%u transfers, %u invalidations, %u remaps, %u "
            "madvises, %u whole arenas; %llu hits, %llu misses, %llu "
            "one-shots, %llu evictions, %llu invalidated\n",
            counts[0], counts[1], counts[2], counts[3], counts[4], counts[5],
            (unsigned long long)m->hits, (unsigned long long)m->misses,
            (unsigned long long)m->oneshots,
            (unsigned long long)m->evictions,
            (unsigned long long)m->invalidations);
    /* The walk exercised every outcome. */
    ck_assert_uint_ge(m->hits, 20);
    ck_assert_uint_ge(m->evictions, 5);
    ck_assert_uint_ge(m->invalidations, 5);
    ck_assert_uint_ge(m->oneshots, 1);
    tu_free_buf(mem, span);
    free(m);
    rig_close(&r);
}
END_TEST

/* ---- suite ------------------------------------------------------------------ */

/*
 * Under ThreadSanitizer, ten times slower (opening a tcp pair alone takes
 * 2 s), the single-threaded semantics run on shm only; the concurrent
 * tests run on every provider.
 */
#if defined(__SANITIZE_THREAD__)
#define SEMANTICS_FIRST 1
#else
#define SEMANTICS_FIRST 0
#endif

static Suite *rcache_suite(void)
{
    Suite *s = suite_create("rcache");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "semantics", 60);
    tcase_add_loop_test(tc, test_hit_miss_subrange, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_overlapping_ranges, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_partial_munmap, SEMANTICS_FIRST, np);
    tcase_add_test(tc, test_munmap_mmap_fixed);
    tcase_add_loop_test(tc, test_mremap_moves, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_madvise_dontneed, SEMANTICS_FIRST, np);
#if !defined(__SANITIZE_THREAD__)
    /* TSan intercepts clone() and cannot run a CLONE_VM tracer. */
    tcase_add_loop_test(tc, test_dropped_page_readable_with_monitor_stopped,
                        0, 1);
#endif
    tcase_add_loop_test(tc, test_sbrk_shrink, 0, 1);
    tcase_add_loop_test(tc, test_cap_entries, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_cap_bytes, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_env_cap_entries, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_env_cap_bytes, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_reference_dropped_by_another_thread,
                        SEMANTICS_FIRST, SEMANTICS_FIRST + 1);
    tcase_add_loop_test(tc, test_forked_child, SEMANTICS_FIRST,
                        SEMANTICS_FIRST + 1);
    tcase_add_loop_test(tc, test_in_flight_invalidated, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_in_flight_not_evicted, SEMANTICS_FIRST, np);
    tcase_add_test(tc, test_no_userfaultfd);
    tcase_add_loop_test(tc, test_file_backed, SEMANTICS_FIRST, np);
    tcase_add_loop_test(tc, test_cache_disabled, SEMANTICS_FIRST, np);

    tc = tu_tcase(s, "i1", 60);
    tcase_add_test(tc, test_invalidate_preserves_errno);
    tcase_add_loop_test(tc, test_invalidate_allocates_locks_logs_nothing, 0,
                        1);
    tcase_add_loop_test(tc, test_invalidate_empty_and_wrapping, 0, 1);
    tcase_add_loop_test(tc, test_invalidate_in_signal_handlers, 0, np);

    tc = tu_tcase(s, "allocator", 120);
    tcase_add_loop_test(tc, test_purging_allocator, 0, np);
    tcase_add_test(tc, test_unmap_under_writer_lock);
    tcase_add_test(tc, test_ring_wraps_during_registration);
    tcase_add_test(tc, test_invalidation_while_publishing);
    tcase_add_test(tc, test_ring_wraps_under_stress);

    tc = tu_tcase(s, "model", 120);
    tcase_add_loop_test(tc, test_model_random_walk, 0, 1);
    tcase_add_test(tc, test_many_entries);
    return s;
}

int main(void)
{
    if (sysconf(_SC_PAGESIZE) != (long)PG) {
        fprintf(stderr, "check_rcache assumes %zu-byte pages\n", PG);
        return 1;
    }
    return tu_run(rcache_suite());
}
