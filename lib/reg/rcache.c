/*
 * The lock-free registration cache.
 *
 * Readers (lookups, and ferry_mem_invalidate) see an immutable array of
 * entries sorted by start address, the snapshot, through one atomic
 * pointer.  Writers (misses, eviction, pruning) build a new snapshot under
 * a writer lock that no invalidation source ever takes, publish it, and
 * retire the old one.  Retired snapshots and entries are freed once no
 * reader can hold them (epochs, below) and, for entries, once no transfer
 * uses them; their registrations are closed with no cache lock held, and
 * the entries go back to the cache's slab (slab.h), which keeps a large
 * cache's entries in a few huge pages.
 *
 * Invalidations append their range to a fixed ring and mark overlapping
 * entries dead.  A miss notes the ring position before it registers; if
 * an overlapping range (or a wrap) appears in the ring while it registered
 * without the lock, its registration is not cached.  After publishing, it
 * checks the ring once more, so an invalidation that read the previous
 * snapshot cannot leave the new entry alive.
 *
 * Epochs (below): a lookup pins the epoch in its thread's slot, an
 * invalidation counts itself in a shared counter; what was retired at
 * epoch t is freed at t + 2.
 */
#include "reg/rcache.h"

#include "dev/hmem.h"
#include "reg/monitor.h"
#include "reg/sindex.h"
#include "reg/slab.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ferry_mem_invalidate may run in a signal handler: its atomics must not
 * fall back to libatomic's locks. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_LONG_LOCK_FREE == 2 &&
                   ATOMIC_INT_LOCK_FREE == 2 &&
                   ATOMIC_POINTER_LOCK_FREE == 2,
               "the invalidation path needs lock-free atomics");
/* Entries come from a slab (slab.h), whose objects start cache lines. */
_Static_assert(_Alignof(struct ferry__rc_entry) <= 64,
               "an entry needs more alignment than the slab gives");

/* Hit counters per cache, spread over the readers. */
#define STRIPES 16
#define RING_SLOTS 1024
#define MAX_CACHES 64
/* Snapshots smaller than this are freed, not kept for reuse (keep_spare). */
#define SPARE_MIN_CAP 4096
/* Entries a lookup examines left of its position (overlapping entries). */
#define LOOKUP_SCAN 8

/* ---- epochs ---------------------------------------------------------------- */

/*
 * Lookup threads each own a reader slot: (epoch << 1) | 1 while the thread
 * is inside a lookup, 0 outside.  Entering stores the slot with no locked
 * instruction and no fence: the writer supplies both sides' fence with
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) before it reads the slots
 * (an asymmetric fence; perf: the locked increment and decrement of a
 * shared epoch counter were two of the four locked instructions of a hit).
 * Where membarrier is unavailable, readers fence themselves.
 *
 * ferry_mem_invalidate may not touch thread-local storage, so it has no
 * slot: it counts itself in inval.active[epoch & 1] (seq_cst), re-checks
 * the epoch, reads, and decrements.
 *
 * The epoch moves from e to e + 1 only when every busy reader slot holds e
 * and no invalidation of epoch e - 1 remains (inval.active[(e + 1) & 1] is
 * 0).  Something retired while the epoch was t is freed once the epoch is
 * t + 2: a reader that could still hold it would have pinned t or earlier,
 * or be an invalidation of t or earlier, and either stops the epoch at
 * t + 1.  Readers never wait; the writer never waits either: it frees what
 * it can and leaves the rest for its next turn.
 */
struct reader {
    _Atomic uint64_t slot;
    atomic_bool owned;   /* by a live thread; released at its exit */
    unsigned index;      /* creation order: picks hit counters and shards */
    struct reader *next; /* every reader ever made; the list never shrinks */
} __attribute__((aligned(64))); /* one cache line each: no false sharing */

static _Atomic(struct reader *) readers;
static _Atomic unsigned nreaders;
/* Initial-exec: one load from the thread pointer, where the default model
 * of a shared library calls __tls_get_addr. */
static _Thread_local struct reader *my_reader
    __attribute__((tls_model("initial-exec")));
static pthread_key_t reader_key; /* releases my_reader at thread exit */
static pthread_once_t epoch_once = PTHREAD_ONCE_INIT;
/* Readers skip their fence (the writers call membarrier); set once by
 * epoch_init before any cache exists, cleared in a forked child. */
static atomic_bool asymmetric;

static struct {
    _Atomic uint64_t active[2];
} __attribute__((aligned(64))) inval; /* ferry_mem_invalidate's counters */

static _Atomic uint64_t epoch;

static void reader_release(void *p)
{
    struct reader *r = p;

    my_reader = NULL;
    /* Release: this thread's last lookup happens before the next owner's
     * first. */
    atomic_store_explicit(&r->owned, false, memory_order_release);
}

/* In a forked child, the only thread is the one that called fork(), which
 * was in no lookup nor invalidation: any busy slot or count belongs to a
 * thread the child does not have, and would stop its epoch for ever. */
static void epoch_in_child(void)
{
    for (struct reader *r = atomic_load(&readers); r != NULL; r = r->next)
        atomic_store(&r->slot, 0);
    atomic_store(&inval.active[0], 0);
    atomic_store(&inval.active[1], 0);
    /* The child's registration for membarrier is not the parent's. */
    atomic_store(&asymmetric, false);
}

static void epoch_init(void)
{
    pthread_key_create(&reader_key, reader_release);
    pthread_atfork(NULL, NULL, epoch_in_child);
    atomic_store(&asymmetric,
                 syscall(SYS_membarrier,
                         MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0);
}

/* This thread's slot: a free one reused, or a new one.  NULL if out of
 * memory (the lookup then misses). */
static struct reader *reader_new(void)
{
    struct reader *r;

    pthread_once(&epoch_once, epoch_init);
    for (r = atomic_load_explicit(&readers, memory_order_acquire); r != NULL;
         r = r->next) {
        bool unowned = false;

        if (!atomic_load_explicit(&r->owned, memory_order_relaxed) &&
            atomic_compare_exchange_strong(&r->owned, &unowned, true))
            break;
    }
    if (r == NULL) {
        r = aligned_alloc(64, sizeof(*r));
        if (r == NULL)
            return NULL;
        atomic_init(&r->slot, 0);
        atomic_init(&r->owned, true);
        r->index = atomic_fetch_add_explicit(&nreaders, 1,
                                             memory_order_relaxed);
        r->next = atomic_load_explicit(&readers, memory_order_relaxed);
        /* Release: a writer walking the list sees r's fields. */
        while (!atomic_compare_exchange_weak_explicit(
            &readers, &r->next, r, memory_order_release,
            memory_order_relaxed))
            ;
    }
    pthread_setspecific(reader_key, r);
    my_reader = r;
    return r;
}

/* Pins the current epoch in this thread's slot. */
static inline struct reader *reader_enter(void)
{
    struct reader *r = my_reader;
    uint64_t e;

    if (r == NULL && (r = reader_new()) == NULL)
        return NULL;
    /* Acquire: pairs with the CAS that made the epoch e, so whatever was
     * unpublished before it is out of this reader's reach. */
    e = atomic_load_explicit(&epoch, memory_order_acquire);
    atomic_store_explicit(&r->slot, e << 1 | 1, memory_order_relaxed);
    if (atomic_load_explicit(&asymmetric, memory_order_relaxed))
        /* Compiler-only: the writer's membarrier() runs the CPU fence
         * between the slot store above and the snapshot load after. */
        atomic_signal_fence(memory_order_seq_cst);
    else
        /* Store-load: a writer that reads the slot as 0 after its fence
         * knows this reader will load the snapshot it published. */
        atomic_thread_fence(memory_order_seq_cst);
    return r;
}

static inline void reader_leave(struct reader *r)
{
    /* Release: the lookup's loads of the snapshot and its entries happen
     * before a writer sees the slot free and frees them. */
    atomic_store_explicit(&r->slot, 0, memory_order_release);
}

/* ferry_mem_invalidate's side: no thread-local storage, never waits. */
static unsigned inval_enter(void)
{
    for (;;) {
        uint64_t e = atomic_load(&epoch);
        /* seq_cst increment, then seq_cst re-read: a writer that later
         * reads this counter as 0 knows this reader has not loaded the
         * snapshot yet, and the re-read sends it to the new parity if the
         * epoch moved in between. */
        atomic_fetch_add(&inval.active[e & 1], 1);
        if (atomic_load(&epoch) == e)
            return (unsigned)(e & 1);
        atomic_fetch_sub(&inval.active[e & 1], 1);
    }
}

static void inval_leave(unsigned parity)
{
    /* Release: the invalidation's loads of the snapshot happen before the
     * writer can see the counter drop. */
    atomic_fetch_sub_explicit(&inval.active[parity], 1, memory_order_release);
}

/* The writer's half of the readers' fence (see reader_enter). */
static void heavy_fence(void)
{
    if (atomic_load_explicit(&asymmetric, memory_order_relaxed) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        return;
    /* Full fence: orders this writer's publish before its slot reads; with
     * readers that fence themselves, that is the whole Dekker pairing. */
    atomic_thread_fence(memory_order_seq_cst);
}

/* Every busy reader pinned e, and no invalidation of e - 1 is left. */
static bool all_at(uint64_t e)
{
    for (struct reader *r = atomic_load_explicit(&readers,
                                                 memory_order_acquire);
         r != NULL; r = r->next) {
        /* Acquire: pairs with reader_leave's release. */
        uint64_t v = atomic_load_explicit(&r->slot, memory_order_acquire);
        if ((v & 1) && v >> 1 != e)
            return false;
    }
    return atomic_load(&inval.active[(e + 1) & 1]) == 0;
}

/* Moves the epoch on if no reader of the epoch before it remains. */
static void epoch_try_advance(void)
{
    uint64_t e = atomic_load(&epoch);

    heavy_fence();
    if (all_at(e))
        atomic_compare_exchange_strong(&epoch, &e, e + 1);
}

/* Something retired at epoch `tag` can no longer be seen by a reader. */
static bool epoch_passed(uint64_t tag)
{
    return atomic_load(&epoch) >= tag + 2;
}

/* ---- snapshots and the invalidation ring ------------------------------ */

struct snapshot {
    size_t n;
    size_t cap;                 /* entries it has room for */
    size_t max_len;             /* longest entry: bounds overlap searches */
    struct snapshot *retired_next;
    uint64_t retired_epoch;
    /* The keys are e[i]->start, in the same allocation after e[] (perf:
     * the search reads small arrays instead of chasing a pointer per
     * step). */
    struct ferry__sindex start;
    struct ferry__rc_entry *e[]; /* sorted by start */
};

struct ring_slot {
    _Atomic uint64_t seq; /* index + 1 once start/end are written */
    _Atomic uintptr_t start, end;
};

static struct ring_slot ring[RING_SLOTS];
static _Atomic uint64_t ring_head;

struct ferry__rcache {
    struct ferry_context *ctx;
    _Atomic(struct snapshot *) snap;
    size_t max_entries, max_bytes;
    pthread_mutex_t writer; /* never taken by an invalidation source */
    /* Under the writer lock: */
    size_t clock_hand;
    struct snapshot *retired_snaps;
    struct snapshot *spare; /* reclaimed, kept for the next publish() */
    struct ferry__rc_entry *retired_entries;
    struct ferry__slab entries; /* where every entry lives */
    /*
     * Bytes of the entries cached and not dead, and how many dead entries
     * the current snapshot still holds (its live ones are the rest):
     * kept as they change, so that a miss need not read every entry
     * (perf: evict() and publish() testing each entry made filling the
     * cache quadratic in cache misses).  Relaxed: evict() and publish()
     * read them under the writer lock, and a count that lags a kill
     * (dead may even dip below zero while a killer's increment is on its
     * way) costs at most one entry evicted early or one pass keeping a
     * dead entry, which the next pass drops; no entry's fate depends on
     * them.
     */
    _Atomic size_t live_bytes;
    _Atomic long dead;
    /* Statistics, relaxed. */
    _Atomic uint64_t misses, invalidations, evictions;
    /* Hits per reader (index % STRIPES), a cache line apart (perf: one
     * counter for all threads bounced between their cores on every hit).
     * Counted with a load and a store, not a locked add: exact while no
     * two live threads share a counter (up to STRIPES reader slots),
     * approximate beyond; only statistics read them. */
    struct {
        _Atomic uint64_t n;
        char pad[64 - sizeof(uint64_t)];
    } hits[STRIPES];
};

/* Every live cache, for ferry_mem_invalidate, which has no context. */
static _Atomic(struct ferry__rcache *) caches[MAX_CACHES];

/* Index of the first entry whose start is >= key. */
static inline size_t lower_bound(const struct snapshot *s, uintptr_t key)
{
    return ferry__sindex_lower_bound(&s->start, key);
}

/* ---- an entry's state ------------------------------------------------- */

unsigned ferry__rc_refs(struct ferry__rc_entry *e)
{
    unsigned n = 0;

    for (unsigned i = 0; i < FERRY__RC_REF_SHARDS; i++)
        n += atomic_load(&e->hot[i].refs);
    return n;
}

bool ferry__rc_dead(struct ferry__rc_entry *e)
{
    return atomic_load(&e->hot[0].flags) & FERRY__RC_DEAD;
}

/* Adds e's bytes to (sign 1) or takes them from (-1) the live bytes. */
static void count_live(struct ferry__rcache *rc, struct ferry__rc_entry *e,
                       int sign)
{
    size_t len = e->end - e->start;

    if (sign > 0)
        atomic_fetch_add_explicit(&rc->live_bytes, len, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(&rc->live_bytes, len, memory_order_relaxed);
}

/*
 * Marks e dead in every shard; true if this call was the first to.  The
 * marks are seq_cst and all made before the caller goes on to read refs:
 * a lookup in shard k increments hot[k].refs, then loads hot[k].flags
 * (both seq_cst), so either the caller sees that reference or the lookup
 * sees the mark.  A lookup in a shard not yet marked may still take a
 * reference meanwhile; a reference, not a use after free: reclaim()
 * closes nothing referenced.
 */
static bool entry_kill(struct ferry__rcache *rc, struct ferry__rc_entry *e)
{
    bool first = !(atomic_fetch_or(&e->hot[0].flags, FERRY__RC_DEAD) &
                   FERRY__RC_DEAD);

    for (unsigned i = 1; i < FERRY__RC_REF_SHARDS; i++)
        atomic_fetch_or(&e->hot[i].flags, FERRY__RC_DEAD);
    if (first) {
        count_live(rc, e, -1);
        atomic_fetch_add_explicit(&rc->dead, 1, memory_order_relaxed);
    }
    return first;
}

/* CLOCK: was e hit since the hand last passed (in any shard)?  Clears
 * the marks. */
static bool entry_take_referenced(struct ferry__rc_entry *e)
{
    bool referenced = false;

    for (unsigned i = 0; i < FERRY__RC_REF_SHARDS; i++)
        if (atomic_load(&e->hot[i].flags) & FERRY__RC_REFERENCED) {
            atomic_fetch_and(&e->hot[i].flags, ~FERRY__RC_REFERENCED);
            referenced = true;
        }
    return referenced;
}

/* Marks every entry of s, rc's snapshot, overlapping [start, end) dead;
 * counts them. */
static unsigned mark_dead(struct ferry__rcache *rc, const struct snapshot *s,
                          uintptr_t start, uintptr_t end)
{
    unsigned marked = 0;

    /* Candidates start before `end`; none starting before start - max_len
     * can reach `start`. */
    for (size_t i = lower_bound(s, end); i-- > 0;) {
        struct ferry__rc_entry *e = s->e[i];
        if (s->start.layer[0][i] + s->max_len <= start)
            break;
        if (e->end > start && entry_kill(rc, e))
            marked++;
    }
    return marked;
}

void ferry_mem_invalidate(const void *addr, size_t len)
{
    int saved_errno = errno;
    uintptr_t start = (uintptr_t)addr, end = start + len;
    uint64_t h;
    unsigned parity;

    if (len == 0 || end < start) {
        errno = saved_errno;
        return;
    }
    /* seq_cst: ordered before the snapshot loads below, against a
     * writer's publish-then-read-head (see the file comment). */
    h = atomic_fetch_add(&ring_head, 1);
    atomic_store_explicit(&ring[h % RING_SLOTS].start, start,
                          memory_order_relaxed);
    atomic_store_explicit(&ring[h % RING_SLOTS].end, end,
                          memory_order_relaxed);
    /* Release: a writer that sees seq == h + 1 sees the range too. */
    atomic_store_explicit(&ring[h % RING_SLOTS].seq, h + 1,
                          memory_order_release);

    parity = inval_enter();
    for (unsigned i = 0; i < MAX_CACHES; i++) {
        struct ferry__rcache *rc = atomic_load(&caches[i]);
        struct snapshot *s;
        unsigned n;

        if (rc == NULL)
            continue;
        s = atomic_load(&rc->snap);
        n = s != NULL ? mark_dead(rc, s, start, end) : 0;
        if (n != 0)
            atomic_fetch_add_explicit(&rc->invalidations, n,
                                      memory_order_relaxed);
    }
    inval_leave(parity);
    errno = saved_errno;
}

/*
 * Did an invalidation overlapping [start, end) arrive since ring position
 * `since`?  A slot not yet filled in, or overwritten (the ring wrapped),
 * counts as overlapping: the answer errs towards not caching.
 */
static bool invalidated_since(uint64_t since, uintptr_t start, uintptr_t end)
{
    uint64_t head = atomic_load(&ring_head);

    if (head - since > RING_SLOTS)
        return true;
    for (uint64_t i = since; i < head; i++) {
        struct ring_slot *slot = &ring[i % RING_SLOTS];
        if (atomic_load_explicit(&slot->seq, memory_order_acquire) != i + 1)
            return true;
        if (atomic_load_explicit(&slot->start, memory_order_relaxed) < end &&
            atomic_load_explicit(&slot->end, memory_order_relaxed) > start)
            return true;
    }
    return false;
}

/* ---- lookups ----------------------------------------------------------- */

/* The shard of e->hot this thread counts in (0 before its first
 * lookup). */
static inline unsigned ref_shard(const struct reader *r)
{
    return r != NULL ? r->index % FERRY__RC_REF_SHARDS : 0;
}

/*
 * A live entry covering [start, end) with a reference taken in shard sh,
 * or NULL.  The caller has checked that the monitor is not handling
 * events.
 */
static inline struct ferry__rc_entry *lookup(struct ferry__rcache *rc,
                                             unsigned sh, uintptr_t start,
                                             uintptr_t end)
{
    struct snapshot *s;

    s = atomic_load_explicit(&rc->snap, memory_order_acquire);
    for (size_t i = s ? lower_bound(s, start + 1) : 0, k = 0;
         i-- > 0 && k < LOOKUP_SCAN; k++) {
        struct ferry__rc_hot *h = &s->e[i]->hot[sh];

        if (h->end < end ||
            (atomic_load_explicit(&h->flags, memory_order_relaxed) &
             FERRY__RC_DEAD))
            continue;
        /* seq_cst increment then flag load: an evictor that marks the
         * entry dead and later reads refs sees this reference, or this
         * lookup sees the mark and backs off (entry_kill). */
        atomic_fetch_add(&h->refs, 1);
        if (atomic_load(&h->flags) & FERRY__RC_DEAD) {
            atomic_fetch_sub(&h->refs, 1);
            continue;
        }
        if (!(atomic_load_explicit(&h->flags, memory_order_relaxed) &
              FERRY__RC_REFERENCED))
            atomic_fetch_or_explicit(&h->flags, FERRY__RC_REFERENCED,
                                     memory_order_relaxed);
        return s->e[i];
    }
    return NULL;
}

void ferry__rcache_put(struct ferry__rc_entry *entry)
{
    /* Release: the transfer's use of the registration happens before a
     * reclaimer sees the count reach zero.  Any thread may drop it, in its
     * own shard. */
    atomic_fetch_sub_explicit(&entry->hot[ref_shard(my_reader)].refs, 1,
                              memory_order_release);
}

/* ---- the writer side (under rc->writer) ------------------------------- */

static void retire_entry(struct ferry__rcache *rc, struct ferry__rc_entry *e)
{
    e->retired_epoch = atomic_load(&epoch);
    e->retired_next = rc->retired_entries;
    rc->retired_entries = e;
}

/*
 * Keeps the larger of s and the spare snapshot for publish(); frees the
 * other.  Small snapshots are not kept: malloc recycles their chunks
 * without faulting pages in, and a cache of a few entries still
 * allocates under the writer lock on every miss, the case check_rcache's
 * allocator tests (hooks that unmap or invalidate from inside malloc)
 * exercise.
 */
static void keep_spare(struct ferry__rcache *rc, struct snapshot *s)
{
    if (s->cap < SPARE_MIN_CAP ||
        (rc->spare != NULL && rc->spare->cap >= s->cap)) {
        free(s);
        return;
    }
    free(rc->spare);
    rc->spare = s;
}

/*
 * Frees retired snapshots no reader can see (keeping one spare), and
 * moves retired entries no reader can see and no transfer uses to
 * *closable (closed by the caller after it drops the writer lock: I3).
 */
static void reclaim(struct ferry__rcache *rc,
                    struct ferry__rc_entry **closable)
{
    epoch_try_advance();
    for (struct snapshot **p = &rc->retired_snaps; *p != NULL;) {
        struct snapshot *s = *p;
        if (!epoch_passed(s->retired_epoch)) {
            p = &s->retired_next;
            continue;
        }
        *p = s->retired_next;
        keep_spare(rc, s);
    }
    for (struct ferry__rc_entry **p = &rc->retired_entries; *p != NULL;) {
        struct ferry__rc_entry *e = *p;
        if (!epoch_passed(e->retired_epoch) || ferry__rc_refs(e) != 0) {
            p = &e->retired_next;
            continue;
        }
        *p = e->retired_next;
        e->retired_next = *closable;
        *closable = e;
    }
}

/* Closes the registrations of list (no cache lock held: I3), then gives
 * the entries back to the slab. */
static void close_entries(struct ferry__rcache *rc,
                          struct ferry__rc_entry *list)
{
    if (list == NULL)
        return;
    for (struct ferry__rc_entry *e = list; e != NULL; e = e->retired_next)
        ferry__mem_close(e->mem);
    pthread_mutex_lock(&rc->writer);
    while (list != NULL) {
        struct ferry__rc_entry *next = list->retired_next;
        ferry__slab_free(&rc->entries, list);
        list = next;
    }
    pthread_mutex_unlock(&rc->writer);
}

/*
 * CLOCK: marks unused entries dead until the cache fits `need_bytes` more
 * bytes and one more entry.  Returns false if busy entries prevent it.
 */
static bool evict(struct ferry__rcache *rc, const struct snapshot *s,
                  size_t need_bytes)
{
    size_t n = s != NULL ? s->n : 0;
    /* Only live entries count (entries invalidated but still in the
     * snapshot take no room), and the caps hold for the first insertion
     * too, when s is NULL. */
    long dead = atomic_load_explicit(&rc->dead, memory_order_relaxed);
    size_t live = dead <= 0 ? n : dead >= (long)n ? 0 : n - (size_t)dead;
    size_t bytes = atomic_load_explicit(&rc->live_bytes, memory_order_relaxed);

    for (size_t turn = 0; turn < 2 * n &&
                          (live + 1 > rc->max_entries ||
                           bytes + need_bytes > rc->max_bytes);
         turn++) {
        struct ferry__rc_entry *e = s->e[rc->clock_hand++ % n];

        if (ferry__rc_dead(e) || ferry__rc_refs(e) != 0 ||
            entry_take_referenced(e))
            continue;
        if (entry_kill(rc, e)) /* else an invalidation was first */
            atomic_fetch_add_explicit(&rc->evictions, 1,
                                      memory_order_relaxed);
        live--;
        bytes -= e->end - e->start;
    }
    return live + 1 <= rc->max_entries && bytes + need_bytes <= rc->max_bytes;
}

/* Where a snapshot of room for cap entries keeps its index: after e[],
 * on a cache line boundary, so that each block of the index is one
 * line. */
static size_t index_offset(size_t cap)
{
    return (sizeof(struct snapshot) + cap * sizeof(struct ferry__rc_entry *) +
            63) & ~(size_t)63;
}

/*
 * A snapshot with room for n entries: the spare one reclaim() kept, when
 * it is large enough, else a new one with a quarter more room (perf: a
 * new allocation per miss faulted its pages in anew; at 30 K entries the
 * kernel's page faults were nine tenths of filling the cache).
 */
static struct snapshot *snapshot_alloc(struct ferry__rcache *rc, size_t n)
{
    struct snapshot *s = rc->spare;
    size_t cap = n + n / 4 + 8;

    if (s != NULL && s->cap >= n) {
        rc->spare = NULL;
        return s;
    }
    /* Both parts are whole cache lines, as aligned_alloc wants. */
    s = aligned_alloc(64, index_offset(cap) + ferry__sindex_bytes(cap));
    if (s != NULL)
        s->cap = cap;
    return s;
}

/* s = old's entries and keys with `add` inserted, copied as arrays, its
 * index laid out in `index`: used when no entry of old has died, so none
 * needs reading. */
static void splice(struct snapshot *s, void *index,
                   const struct snapshot *old, struct ferry__rc_entry *add)
{
    /* After the entries that start where add does, as the filtering
     * copy places it. */
    size_t n = old->n, at = lower_bound(old, add->start + 1);
    const uintptr_t *keys = old->start.layer[0];
    uintptr_t *to;

    s->n = n + 1;
    ferry__sindex_init(&s->start, index, s->n);
    to = s->start.layer[0];

    memcpy(s->e, old->e, at * sizeof(s->e[0]));
    s->e[at] = add;
    memcpy(s->e + at + 1, old->e + at, (n - at) * sizeof(s->e[0]));
    memcpy(to, keys, at * sizeof(*to));
    to[at] = add->start;
    memcpy(to + at + 1, keys + at, (n - at) * sizeof(*to));
    s->max_len = old->max_len > add->end - add->start
                     ? old->max_len
                     : add->end - add->start;
}

/*
 * s = old's live entries plus `add` (may be NULL), its index laid out in
 * `index`; the dead ones are retired.  Reads every entry of old.
 */
static void filter(struct ferry__rcache *rc, struct snapshot *s, void *index,
                   const struct snapshot *old, struct ferry__rc_entry *add)
{
    size_t n = old ? old->n : 0, k = 0;
    long dropped = 0;
    bool placed = add == NULL;

    for (size_t i = 0; i < n; i++) {
        struct ferry__rc_entry *e = old->e[i];

        if (ferry__rc_dead(e)) {
            retire_entry(rc, e);
            dropped++;
            continue;
        }
        if (!placed && add->start < e->start) {
            s->e[k++] = add;
            placed = true;
        }
        s->e[k++] = e;
    }
    if (!placed)
        s->e[k++] = add;
    atomic_fetch_sub_explicit(&rc->dead, dropped, memory_order_relaxed);
    s->n = k;
    ferry__sindex_init(&s->start, index, k);
    s->max_len = 0;
    for (size_t i = 0; i < k; i++) {
        s->start.layer[0][i] = s->e[i]->start;
        if (s->e[i]->end - s->e[i]->start > s->max_len)
            s->max_len = s->e[i]->end - s->e[i]->start;
    }
}

/*
 * Publishes old's live entries plus `add` (may be NULL) as a new snapshot,
 * retiring old and the dead entries it drops.
 */
static int publish(struct ferry__rcache *rc, struct ferry__rc_entry *add)
{
    struct snapshot *old = atomic_load(&rc->snap);
    size_t n = old ? old->n : 0;
    struct snapshot *s = snapshot_alloc(rc, n + 1);
    void *index;

    if (s == NULL)
        return FERRY_ENOMEM;
    index = (char *)s + index_offset(s->cap);
    if (old != NULL && add != NULL &&
        atomic_load_explicit(&rc->dead, memory_order_relaxed) <= 0)
        splice(s, index, old, add);
    else
        filter(rc, s, index, old, add);
    ferry__sindex_build(&s->start);
    /* seq_cst: ordered before the ring re-check that follows. */
    atomic_store(&rc->snap, s);
    if (old != NULL) {
        old->retired_epoch = atomic_load(&epoch);
        old->retired_next = rc->retired_snaps;
        rc->retired_snaps = old;
    }
    return 0;
}

/* e, new, for [start, end) of mem, with one reference in this thread's
 * shard.  Each shard of e->hot is on a cache line of its own: slab
 * objects start lines. */
static void entry_init(struct ferry__rc_entry *e, struct ferry_mem *mem,
                       uintptr_t start, uintptr_t end)
{
    memset(e, 0, sizeof(*e));
    e->mem = mem;
    e->start = start;
    e->end = end;
    for (unsigned i = 0; i < FERRY__RC_REF_SHARDS; i++) {
        bool mine = i == ref_shard(my_reader);

        atomic_init(&e->hot[i].refs, mine);
        atomic_init(&e->hot[i].flags, mine ? FERRY__RC_REFERENCED : 0);
        e->hot[i].end = end;
        e->hot[i].mem = mem;
        e->hot[i].device = mem->kind == FERRY_MEM_CUDA;
    }
}

/*
 * Caches a fresh registration of [start, end), made while no lock was
 * held, unless an invalidation overlapping it arrived since ring position
 * `since`.  Returns the entry with one reference, or NULL.
 */
static struct ferry__rc_entry *insert(struct ferry__rcache *rc,
                                      struct ferry_mem *mem, uintptr_t start,
                                      uintptr_t end, uint64_t since)
{
    struct ferry__rc_entry *e = NULL, *closable = NULL;
    struct snapshot *cur;
    bool cached = false;

    pthread_mutex_lock(&rc->writer);
    cur = atomic_load(&rc->snap);
    if (!invalidated_since(since, start, end) &&
        evict(rc, cur, end - start) &&
        (e = ferry__slab_alloc(&rc->entries)) != NULL) {
        entry_init(e, mem, start, end);
        /* Counted before it is visible: a kill, which uncounts it, can
         * only come after. */
        count_live(rc, e, 1);
        cached = publish(rc, e) == 0;
        if (!cached)
            count_live(rc, e, -1);
        /* An invalidation that read the previous snapshot missed e, but
         * it is in the ring: look again now that e is visible. */
        else if (invalidated_since(since, start, end))
            entry_kill(rc, e);
    }
    if (!cached) {
        ferry__slab_free(&rc->entries, e);
        e = NULL;
    }
    reclaim(rc, &closable);
    pthread_mutex_unlock(&rc->writer);
    close_entries(rc, closable);
    return e;
}

/* The page size, read once (perf: sysconf() on every lookup cost about as
 * much as the rest of a hit). */
static uintptr_t page_size(void)
{
    static _Atomic uintptr_t page;
    uintptr_t p = atomic_load_explicit(&page, memory_order_relaxed);

    if (p == 0) {
        p = (uintptr_t)sysconf(_SC_PAGESIZE);
        atomic_store_explicit(&page, p, memory_order_relaxed);
    }
    return p;
}

/*
 * Device memory is not mapped for the CPU, so no unmap event tells of its
 * end: a cached device entry is checked on each hit against the buffer id
 * of the allocation now at the address.  Memory freed and allocated again
 * at the same address has a new id; its old entry dies here.
 */
static bool device_entry_current(struct ferry__rcache *rc,
                                 struct ferry__rc_entry *e,
                                 const struct ferry__rc_hot *h,
                                 const void *addr)
{
    struct ferry__hmem_ptr pi;

    if (!h->device) /* on the line the hit read: no trip to h->mem */
        return true;
    if (ferry__hmem()->ptr_info(addr, &pi) == 0 && pi.device &&
        pi.buffer_id == h->mem->buffer_id)
        return true;
    if (entry_kill(rc, e))
        atomic_fetch_add_explicit(&rc->invalidations, 1,
                                  memory_order_relaxed);
    ferry__rcache_put(e);
    return false;
}

/*
 * The range a miss registers and caches: the pages around a host range,
 * or the whole allocation of a device pointer (cached by buffer id, not
 * watched; its entry spans whole pages so page-rounded lookups of its
 * tail hit).  An error for a pointer the backend cannot describe.
 */
static int miss_range(void *addr, struct ferry__hmem_ptr *pi,
                      uintptr_t *start, uintptr_t *end)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    uintptr_t page = page_size();
    int ret;

    memset(pi, 0, sizeof(*pi));
    if (ops != NULL && (ret = ops->ptr_info(addr, pi)) != 0)
        return ret;
    if (pi->device) {
        *start = pi->base;
        *end = (pi->base + pi->size + page - 1) & ~(page - 1);
    }
    return 0;
}

int ferry__rcache_get(struct ferry_context *ctx, void *addr, size_t len,
                      struct ferry_mem **mem, struct ferry__rc_entry **entry)
{
    struct ferry__rcache *rc = ferry__reg_of(ctx)->rcache;
    uintptr_t page = page_size();
    uintptr_t start = (uintptr_t)addr & ~(page - 1);
    uintptr_t end = ((uintptr_t)addr + len + page - 1) & ~(page - 1);
    struct ferry__hmem_ptr pi;
    struct ferry__rc_entry *e;
    uint64_t since;
    int ret;

    *entry = NULL;
    /*
     * The monitor's sequence is odd while it handles events, and for ever
     * in a forked child: then go the slow way.  Read once, before the
     * lookup: an unmap that returned before this call had its event read,
     * so the sequence is odd now or its entries are marked (acquire); an
     * unmap concurrent with the lookup may be ordered after it, as the
     * caller's own use of the buffer would be.
     */
    if (rc != NULL && !(ferry__monitor_seq() & 1)) {
        struct reader *r = reader_enter();
        unsigned sh = ref_shard(r);

        e = r != NULL ? lookup(rc, sh, start, end) : NULL;
        if (r != NULL)
            reader_leave(r);
        if (e != NULL && !device_entry_current(rc, e, &e->hot[sh], addr))
            e = NULL;
        if (e != NULL) {
            _Atomic uint64_t *hits = &rc->hits[r->index % STRIPES].n;

            atomic_store_explicit(
                hits, atomic_load_explicit(hits, memory_order_relaxed) + 1,
                memory_order_relaxed);
            *mem = e->hot[sh].mem;
            *entry = e;
            return 0;
        }
    }
    if (rc != NULL && !ferry__in_forked_child())
        atomic_fetch_add_explicit(&rc->misses, 1, memory_order_relaxed);
    /* A miss: note the ring first, watch and register with no lock. */
    since = atomic_load(&ring_head);
    if ((ret = miss_range(addr, &pi, &start, &end)) != 0)
        return ret;
    if (rc == NULL || ferry__in_forked_child() ||
        (!pi.device && !ferry__monitor_watch(start, end))) {
        start = pi.device ? pi.base : (uintptr_t)addr;
        end = pi.device ? pi.base + pi.size : (uintptr_t)addr + len;
        rc = NULL; /* not cacheable: a one-shot of just the range */
    }
    /* A device entry registers exactly its allocation; its cached range
     * may extend to the page end (miss_range). */
    ret = ferry__mem_register_any(
        ctx, (void *)start,
        pi.device ? pi.size - (start - pi.base) : end - start,
        pi.device ? FERRY_MEM_CUDA : FERRY_MEM_HOST, -1, 0, rc == NULL,
        "a transfer's local buffer", mem);
    if (ret != 0 || rc == NULL)
        return ret;
    e = insert(rc, *mem, start, end, since);
    if (e == NULL) {
        (*mem)->oneshot = true;
        return 0;
    }
    *entry = e;
    return 0;
}

/* ---- life cycle ---------------------------------------------------------- */

int ferry__rcache_create(struct ferry_context *ctx, size_t max_entries,
                         size_t max_bytes, struct ferry__rcache **out)
{
    struct ferry__rcache *rc;

    *out = NULL;
    /* Before any cache exists: readers and writers then agree on
     * `asymmetric`. */
    pthread_once(&epoch_once, epoch_init);
    rc = calloc(1, sizeof(*rc));
    if (rc == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for the cache");
    rc->ctx = ctx;
    rc->max_entries = max_entries ? max_entries : 1;
    rc->max_bytes = max_bytes ? max_bytes : 1;
    pthread_mutex_init(&rc->writer, NULL);
    ferry__slab_init(&rc->entries, sizeof(struct ferry__rc_entry));
    ferry__monitor_start(ferry_mem_invalidate);
    for (unsigned i = 0; i < MAX_CACHES; i++) {
        struct ferry__rcache *expected = NULL;
        if (atomic_compare_exchange_strong(&caches[i], &expected, rc)) {
            *out = rc;
            return 0;
        }
    }
    pthread_mutex_destroy(&rc->writer);
    free(rc); /* its slab is still empty */
    FERRY_LOG_WARN("more than %d contexts with a registration cache: this "
                   "one registers without caching",
                   MAX_CACHES);
    return 0;
}

void ferry__rcache_destroy(struct ferry__rcache *rc)
{
    struct ferry__rc_entry *closable = NULL;
    struct snapshot *s;

    if (rc == NULL)
        return;
    for (unsigned i = 0; i < MAX_CACHES; i++) {
        struct ferry__rcache *expected = rc;
        atomic_compare_exchange_strong(&caches[i], &expected, NULL);
    }
    /* No invalidation can reach rc once every reader that might have
     * loaded it has left: wait for two epoch flips.  Invalidations never
     * wait, so this cannot deadlock with one. */
    for (uint64_t target = atomic_load(&epoch) + 2;
         atomic_load(&epoch) < target;)
        epoch_try_advance();
    while (atomic_load(&inval.active[0]) != 0 ||
           atomic_load(&inval.active[1]) != 0)
        ;
    s = atomic_load(&rc->snap);
    for (size_t i = 0; s != NULL && i < s->n; i++)
        entry_kill(rc, s->e[i]);
    pthread_mutex_lock(&rc->writer);
    if (s != NULL)
        publish(rc, NULL); /* retires every entry */
    /* Every reader is gone: all retired snapshots and entries can go. */
    free(atomic_load(&rc->snap));
    free(rc->spare);
    while (rc->retired_snaps != NULL) {
        s = rc->retired_snaps;
        rc->retired_snaps = s->retired_next;
        free(s);
    }
    closable = rc->retired_entries;
    rc->retired_entries = NULL;
    pthread_mutex_unlock(&rc->writer);
    /* In a forked child the registrations belong to the parent; the
     * entries go with the slab. */
    if (!ferry__in_forked_child())
        close_entries(rc, closable);
    ferry__slab_destroy(&rc->entries);
    pthread_mutex_destroy(&rc->writer);
    free(rc);
}

void ferry__rcache_stats(struct ferry__rcache *rc, struct ferry__rc_stats *st)
{
    struct snapshot *s;
    struct reader *r;

    memset(st, 0, sizeof(*st));
    if (rc == NULL)
        return;
    for (unsigned i = 0; i < STRIPES; i++)
        st->hits += atomic_load_explicit(&rc->hits[i].n, memory_order_relaxed);
    st->misses = atomic_load(&rc->misses);
    st->invalidations = atomic_load(&rc->invalidations);
    st->evictions = atomic_load(&rc->evictions);
    if ((r = reader_enter()) == NULL)
        return;
    s = atomic_load(&rc->snap);
    for (size_t i = 0; s != NULL && i < s->n; i++) {
        if (ferry__rc_dead(s->e[i]))
            continue;
        st->entries++;
        st->bytes += s->e[i]->end - s->e[i]->start;
    }
    reader_leave(r);
}
