/*
 * The registration cache (rcache.c), fed by its invalidation sources
 * (monitor.h).  Private to libferry.
 *
 * Contract (DESIGN.md, invariants I1-I3):
 *   I1 ferry_mem_invalidate() takes no lock, allocates nothing, touches no
 *      thread-local storage, logs nothing, calls neither libfabric nor
 *      CUDA, and preserves errno: it may run inside a malloc or madvise
 *      hook or a signal handler.
 *   I2 No thread waits on something an invalidation source may be waiting
 *      for: lookups never wait; the writer lock is never taken by an
 *      invalidation source; the monitor thread waits only in poll().
 *   I3 fi_mr_regattr, fi_close and CUDA calls run with no cache lock held.
 */
#ifndef FERRY_REG_RCACHE_H
#define FERRY_REG_RCACHE_H

#include "reg/mem.h"

/* Shards of an entry's reference count and flags (see hot below). */
#define FERRY__RC_REF_SHARDS 4

/*
 * What a hit reads and writes, one cache line per shard of threads.  A
 * thread counts in the shard of its reader slot (rcache.c), so threads
 * hitting the same entry do not pass one line between their cores (perf:
 * with one counter, two threads hitting the same entries ran no faster
 * than one).  Each line also holds copies of the immutable fields a hit
 * needs, so a hit touches this one line of the entry (perf: at 100 K
 * entries, a line with end and the flags and another with the count were
 * two cache misses per hit, 84% of its time).
 */
struct ferry__rc_hot {
    /*
     * Transfers using the entry, counted in this shard.  A reference may be
     * dropped by another thread than the one that took it, in another
     * shard, which may then wrap below zero: only the sum over the shards
     * modulo 2^32 counts, ferry__rc_refs().
     */
    _Atomic unsigned refs;
    /* FERRY__RC_DEAD, set in every shard (shard 0's decides who set it
     * first); FERRY__RC_REFERENCED, set by the hits of this shard. */
    _Atomic unsigned flags;
    uintptr_t end;         /* copy of the entry's end */
    struct ferry_mem *mem; /* copy of the entry's mem */
    bool device;           /* device memory: checked by buffer id on hits */
} __attribute__((aligned(64)));

/* A cached registration.  Immutable but for the atomics. */
struct ferry__rc_entry {
    struct ferry__rc_hot hot[FERRY__RC_REF_SHARDS];
    struct ferry_mem *mem; /* owned; closed once retired and unused */
    uintptr_t start, end;  /* registered range, page aligned */
    /* Reclamation, under the writer lock. */
    struct ferry__rc_entry *retired_next;
    uint64_t retired_epoch;
};

/* References held on e (seq_cst loads of each shard, summed). */
unsigned ferry__rc_refs(struct ferry__rc_entry *e);
/* e was marked dead (seq_cst). */
bool ferry__rc_dead(struct ferry__rc_entry *e);

#define FERRY__RC_DEAD 1u        /* never returned by a lookup again */
#define FERRY__RC_REFERENCED 2u  /* CLOCK bit, set by hits */

struct ferry__rcache;

/* Counters of one cache (ferry_context_stats reports them). */
struct ferry__rc_stats {
    uint64_t hits, misses, invalidations, evictions;
    uint64_t entries, bytes;
};

/* NULL out when the cache is disabled by the config. */
int ferry__rcache_create(struct ferry_context *ctx, size_t max_entries,
                         size_t max_bytes, struct ferry__rcache **out);
/* Closes every entry; the caller guarantees no transfer uses one. */
void ferry__rcache_destroy(struct ferry__rcache *rc);

/*
 * A registration covering [addr, addr + len) for local use, from
 * ctx->rcache (which may be NULL: then always a one-shot).  On a hit or
 * a cached miss, *entry holds a reference (ferry__rcache_put it) and *mem
 * belongs to the cache.  When the range cannot be cached (refused by the
 * monitor, invalidated while being registered, cache full of busy
 * entries, or the cache disabled in a forked child), *entry is NULL and
 * *mem is a one-shot registration the caller closes.  Takes no lock on a
 * hit; registers with no cache lock held.
 */
int ferry__rcache_get(struct ferry_context *ctx, void *addr, size_t len,
                      struct ferry_mem **mem, struct ferry__rc_entry **entry);
/* Drops a reference taken by ferry__rcache_get.  Lock-free. */
void ferry__rcache_put(struct ferry__rc_entry *entry);
void ferry__rcache_stats(struct ferry__rcache *rc, struct ferry__rc_stats *s);

#endif /* FERRY_REG_RCACHE_H */
