/*
 * An allocator shim linked into check_rcache (test/rcache_hooks.c): the
 * program's own malloc family and pthread_mutex_lock, which every caller
 * in the process reaches, forwarding to the next definition (glibc's, a
 * sanitizer's, or an LD_PRELOADed mimalloc's).  While nothing is armed it
 * only forwards.  The tests arm:
 *
 *  - counting: per thread, calls of the malloc family and of lock calls;
 *  - a purging allocator, the kind that deadlocked libfabric's MR cache
 *    (libfabric #10879, Open MPI #13149): free() madvises(MADV_DONTNEED)
 *    the page-aligned inside of every chunk of two pages or more and
 *    forwards the range to ferry_mem_invalidate(); malloc, calloc and
 *    realloc "return memory to the OS" in a scratch arena the cache
 *    watches (madvise(MADV_DONTNEED), or mmap(MAP_FIXED) over a page,
 *    which unmaps it) and forward that range too.  So allocations made
 *    inside ferry, under its writer lock or the context lock, block in
 *    the kernel until ferry's userfaultfd monitor has read the event;
 *  - a one-shot callback on the next allocation of a given size;
 *  - a watch for free() of given pointers.
 */
#ifndef FERRY_RCACHE_HOOKS_H
#define FERRY_RCACHE_HOOKS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Per-thread counts between rh_count_begin and rh_count_end. */
struct rh_counts {
    unsigned long allocs; /* malloc, calloc, realloc, aligned variants */
    unsigned long frees;
    unsigned long locks; /* pthread_mutex_lock/trylock */
};
void rh_count_begin(void);
void rh_count_end(struct rh_counts *out);

/*
 * The purging allocator.  arena (page aligned, npages pages) is where
 * allocations "purge"; NULL: allocations purge nothing, frees still do.
 * writer, if not NULL, is a mutex whose holder is noted at each purge
 * (rh_stats.purges_under_writer).
 */
void rh_purge_start(void *arena, size_t npages, pthread_mutex_t *writer);
void rh_purge_stop(void);

struct rh_stats {
    uint64_t purges;              /* allocation-side purges */
    uint64_t purge_unmaps;        /* of which mmap(MAP_FIXED) replacements */
    uint64_t purges_under_writer; /* made by the holder of `writer` */
    uint64_t free_madvises;       /* free-side madvise + invalidate */
};
void rh_stats(struct rh_stats *out);

/* This thread neither purges nor counts (a watchdog that must not block). */
void rh_exempt_thread(void);
/*
 * This thread purges.  Every thread does, except under ThreadSanitizer,
 * where only those that call this do (see rcache_hooks.c).
 */
void rh_participate(void);

/*
 * Calls fn(arg) once, on the calling thread's next allocation of exactly
 * `size` bytes (malloc(size) or calloc(1, size); SIZE_MAX: of any size),
 * before allocating.  fn may arm it again.
 */
void rh_on_alloc_size(size_t size, void (*fn)(void *), void *arg);
/* Whether the callback has run since armed. */
bool rh_on_alloc_fired(void);

/* Notes when free() is called on p (at most 4 watched pointers). */
void rh_watch_free(const void *p);
bool rh_was_freed(const void *p);

/* Path of the library whose malloc the shim forwards to. */
const char *rh_next_malloc_owner(void);

#endif /* FERRY_RCACHE_HOOKS_H */
