/*
 * The allocator shim of check_rcache (see rcache_hooks.h).
 *
 * Defining malloc & co. in the executable puts them ahead of every shared
 * library in symbol lookup, so libc, libfabric, Check and ferry all call
 * these.  Each forwards to the next definition found with
 * dlsym(RTLD_NEXT): glibc's, the sanitizer runtime's (so ASan and TSan
 * still see every allocation), or that of an allocator in LD_PRELOAD
 * (mimalloc, for test/rcache_mimalloc.sh).  dlsym may allocate while it
 * resolves: those allocations come from a static buffer and are never
 * freed.
 *
 * Everything the hooks do on the allocation path is async-signal-safe and
 * allocation-free (atomics, madvise, mmap, ferry_mem_invalidate), and
 * errno is preserved, as a real allocator's would be.
 */
#include "rcache_hooks.h"

#include "ferry.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096u

/* ---- resolution of the next definitions ---------------------------------- */

static struct {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    size_t (*usable)(void *);
    int (*mutex_lock)(pthread_mutex_t *);
    int (*mutex_trylock)(pthread_mutex_t *);
} next;

static _Atomic int state; /* 0 unresolved, 1 resolving, 2 resolved */
static __thread int in_resolve;

/* Allocations made by dlsym while it resolves (never freed). */
static _Alignas(64) unsigned char boot[64 * 1024];
static size_t boot_used;

static bool in_boot(const void *p)
{
    return (const unsigned char *)p >= boot &&
           (const unsigned char *)p < boot + sizeof(boot);
}

static void *boot_alloc(size_t size)
{
    size_t at = (boot_used + 15) & ~(size_t)15;

    if (at + size + 16 > sizeof(boot)) {
        static const char msg[] = "rcache_hooks: bootstrap buffer exhausted\n";
        ssize_t w = write(2, msg, sizeof(msg) - 1);
        (void)w;
        abort();
    }
    boot_used = at + 16 + size;
    memcpy(boot + at, &size, sizeof(size));
    return boot + at + 16;
}

#define RESOLVE(field, name) (*(void **)&next.field = dlsym(RTLD_NEXT, name))

static void resolve(void)
{
    int expected = 0;

    if (atomic_load(&state) == 2)
        return;
    if (atomic_compare_exchange_strong(&state, &expected, 1)) {
        in_resolve = 1;
        RESOLVE(malloc, "malloc");
        RESOLVE(calloc, "calloc");
        RESOLVE(realloc, "realloc");
        RESOLVE(free, "free");
        RESOLVE(posix_memalign, "posix_memalign");
        RESOLVE(aligned_alloc, "aligned_alloc");
        RESOLVE(memalign, "memalign");
        RESOLVE(usable, "malloc_usable_size");
        RESOLVE(mutex_lock, "pthread_mutex_lock");
        RESOLVE(mutex_trylock, "pthread_mutex_trylock");
        in_resolve = 0;
        if (!next.malloc || !next.calloc || !next.realloc || !next.free ||
            !next.usable || !next.mutex_lock || !next.mutex_trylock) {
            static const char msg[] =
                "rcache_hooks: dlsym(RTLD_NEXT) found no malloc family\n";
            ssize_t w = write(2, msg, sizeof(msg) - 1);
            (void)w;
            abort();
        }
        atomic_store(&state, 2);
        return;
    }
    while (atomic_load(&state) != 2)
        ; /* another thread resolves; it allocates only from boot */
}

/* ---- state the tests arm -------------------------------------------------- */

static __thread bool counting, exempt, participant;
static __thread struct rh_counts tcounts;
static __thread int in_hook;
static __thread pid_t my_tid;

static atomic_bool purging;
static _Atomic(unsigned char *) arena;
static _Atomic size_t arena_pages;
static _Atomic(pthread_mutex_t *) writer_mx;
static _Atomic uint64_t cursor, st_purges, st_unmaps, st_under_writer,
    st_free_madvises;

static _Atomic size_t cb_size;
static _Atomic pid_t cb_tid;
static _Atomic(void (*)(void *)) cb_fn;
static _Atomic(void *) cb_arg;
static atomic_bool cb_fired;

#define NWATCH 4
static _Atomic(const void *) watched[NWATCH];
static atomic_bool freed[NWATCH];

void rh_count_begin(void)
{
    memset(&tcounts, 0, sizeof(tcounts));
    counting = true;
}

void rh_count_end(struct rh_counts *out)
{
    counting = false;
    *out = tcounts;
}

void rh_exempt_thread(void)
{
    exempt = true;
}

/*
 * Under ThreadSanitizer a new thread allocates (pthread_getattr_np) before
 * its TSan state exists, and an instrumented call from the hook (into
 * ferry_mem_invalidate) then crashes: with TSan, only threads that said
 * so purge.  Its runtime defines __tsan_init.
 */
extern void __tsan_init(void) __attribute__((weak));

void rh_participate(void)
{
    participant = true;
}

static bool may_purge(void)
{
    return participant || &__tsan_init == NULL;
}

void rh_purge_start(void *a, size_t npages, pthread_mutex_t *writer)
{
    resolve();
    atomic_store(&arena, (unsigned char *)a);
    atomic_store(&arena_pages, a != NULL ? npages : 0);
    atomic_store(&writer_mx, writer);
    atomic_store(&purging, true);
}

void rh_purge_stop(void)
{
    atomic_store(&purging, false);
    atomic_store(&arena, NULL);
    atomic_store(&arena_pages, 0);
    atomic_store(&writer_mx, NULL);
}

void rh_stats(struct rh_stats *out)
{
    out->purges = atomic_load(&st_purges);
    out->purge_unmaps = atomic_load(&st_unmaps);
    out->purges_under_writer = atomic_load(&st_under_writer);
    out->free_madvises = atomic_load(&st_free_madvises);
}

static pid_t tid(void);

void rh_on_alloc_size(size_t size, void (*fn)(void *), void *arg)
{
    atomic_store(&cb_fired, false);
    atomic_store(&cb_tid, tid());
    atomic_store(&cb_arg, arg);
    atomic_store(&cb_size, size);
    atomic_store(&cb_fn, fn);
}

bool rh_on_alloc_fired(void)
{
    return atomic_load(&cb_fired);
}

void rh_watch_free(const void *p)
{
    for (unsigned i = 0; i < NWATCH; i++) {
        const void *expected = NULL;
        if (atomic_compare_exchange_strong(&watched[i], &expected, p)) {
            atomic_store(&freed[i], false);
            return;
        }
    }
    abort(); /* a test watches too many pointers */
}

bool rh_was_freed(const void *p)
{
    for (unsigned i = 0; i < NWATCH; i++)
        if (atomic_load(&watched[i]) == p)
            return atomic_load(&freed[i]);
    return false;
}

const char *rh_next_malloc_owner(void)
{
    Dl_info info;

    resolve();
    if (dladdr(*(void **)&next.malloc, &info) == 0 || info.dli_fname == NULL)
        return "?";
    return info.dli_fname;
}

/* ---- the hooks ------------------------------------------------------------ */

static pid_t tid(void)
{
    if (my_tid == 0)
        my_tid = (pid_t)syscall(SYS_gettid);
    return my_tid;
}

/* An allocation "returns memory to the OS" in the arena. */
static void purge_on_alloc(void)
{
    unsigned char *a = atomic_load(&arena);
    size_t n = atomic_load(&arena_pages);
    pthread_mutex_t *w = atomic_load(&writer_mx);
    uint64_t c;
    unsigned char *p;

    if (a == NULL || n == 0)
        return;
    c = atomic_fetch_add(&cursor, 1);
    p = a + (c % n) * PAGE;
    /* The writer lock's owner (glibc records it for every mutex type):
     * are we purging while ferry holds its cache's writer lock? */
    if (w != NULL &&
        __atomic_load_n(&w->__data.__owner, __ATOMIC_RELAXED) == tid())
        atomic_fetch_add(&st_under_writer, 1);
    if (c % 4 == 3) {
        /* mimalloc-style decommit by remapping: an UNMAP event. */
        if (mmap(p, PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
            atomic_fetch_add(&st_unmaps, 1);
    } else {
        madvise(p, PAGE, MADV_DONTNEED); /* a REMOVE event */
    }
    ferry_mem_invalidate(p, PAGE);
    atomic_fetch_add(&st_purges, 1);
}

static void on_alloc(size_t size)
{
    int saved = errno;

    if (counting)
        tcounts.allocs++;
    if (in_hook || exempt) {
        errno = saved;
        return;
    }
    in_hook = 1;
    if ((atomic_load_explicit(&cb_size, memory_order_relaxed) == size ||
         atomic_load_explicit(&cb_size, memory_order_relaxed) == SIZE_MAX) &&
        atomic_load(&cb_fn) != NULL && atomic_load(&cb_tid) == tid()) {
        void (*fn)(void *) = atomic_exchange(&cb_fn, NULL);
        if (fn != NULL) {
            fn(atomic_load(&cb_arg));
            atomic_store(&cb_fired, true);
        }
    }
    if (atomic_load_explicit(&purging, memory_order_relaxed) && may_purge())
        purge_on_alloc();
    in_hook = 0;
    errno = saved;
}

static void on_free(void *p)
{
    int saved = errno;

    if (counting)
        tcounts.frees++;
    for (unsigned i = 0; i < NWATCH; i++)
        if (atomic_load_explicit(&watched[i], memory_order_relaxed) == p)
            atomic_store(&freed[i], true);
    if (in_hook || exempt || !may_purge() ||
        !atomic_load_explicit(&purging, memory_order_relaxed)) {
        errno = saved;
        return;
    }
    in_hook = 1;
    {
        uintptr_t lo = ((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
        uintptr_t hi = ((uintptr_t)p + next.usable(p)) & ~(uintptr_t)(PAGE - 1);

        /* Chunks of two pages or more: the whole pages inside go back. */
        if (hi > lo && hi - lo >= PAGE) {
            madvise((void *)lo, hi - lo, MADV_DONTNEED);
            ferry_mem_invalidate((const void *)lo, hi - lo);
            atomic_fetch_add(&st_free_madvises, 1);
        }
    }
    in_hook = 0;
    errno = saved;
}

void *malloc(size_t size)
{
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        if (in_resolve)
            return boot_alloc(size);
        resolve();
    }
    on_alloc(size);
    return next.malloc(size);
}

void *calloc(size_t n, size_t size)
{
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        if (in_resolve) {
            if (size != 0 && n > SIZE_MAX / size)
                return NULL;
            return boot_alloc(n * size); /* static: already zero */
        }
        resolve();
    }
    on_alloc(size != 0 && n <= SIZE_MAX / size ? n * size : SIZE_MAX);
    return next.calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        if (in_resolve) {
            void *q = boot_alloc(size);
            if (p != NULL) {
                size_t old;
                memcpy(&old, (unsigned char *)p - 16, sizeof(old));
                memcpy(q, p, old < size ? old : size);
            }
            return q;
        }
        resolve();
    }
    if (p != NULL && in_boot(p)) {
        size_t old;
        void *q = malloc(size);
        memcpy(&old, (unsigned char *)p - 16, sizeof(old));
        if (q != NULL)
            memcpy(q, p, old < size ? old : size);
        return q;
    }
    on_alloc(size);
    return next.realloc(p, size);
}

void free(void *p)
{
    if (p == NULL || in_boot(p))
        return;
    resolve();
    on_free(p);
    next.free(p);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    resolve();
    on_alloc(size);
    return next.posix_memalign(out, align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    resolve();
    on_alloc(size);
    return next.aligned_alloc(align, size);
}

void *memalign(size_t align, size_t size)
{
    resolve();
    on_alloc(size);
    return next.memalign(align, size);
}

size_t malloc_usable_size(void *p)
{
    if (p != NULL && in_boot(p)) {
        size_t n;
        memcpy(&n, (unsigned char *)p - 16, sizeof(n));
        return n;
    }
    resolve();
    return next.usable(p);
}

int pthread_mutex_lock(pthread_mutex_t *m)
{
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        if (in_resolve)
            abort(); /* dlsym took a public mutex: cannot happen on glibc */
        resolve();
    }
    if (counting)
        tcounts.locks++;
    return next.mutex_lock(m);
}

int pthread_mutex_trylock(pthread_mutex_t *m)
{
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        if (in_resolve)
            abort();
        resolve();
    }
    if (counting)
        tcounts.locks++;
    return next.mutex_trylock(m);
}
