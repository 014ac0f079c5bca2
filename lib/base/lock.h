/*
 * The context lock.  One mutex serialises posting, completion handling,
 * registration and request state: the endpoints are opened
 * FI_THREAD_DOMAIN, so ferry owns their serialisation.  It is never held
 * across a user callback or a sleep.
 *
 * Debug builds (--enable-debug: no NDEBUG) remember which thread holds
 * it, and every function whose comment says "caller holds the lock"
 * asserts so with FERRY__ASSERT_LOCKED (libfabric's ofi_genlock_held).
 * Release builds keep a plain mutex: the checks cost nothing there.
 */
#ifndef FERRY_BASE_LOCK_H
#define FERRY_BASE_LOCK_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

struct ferry__lock {
    pthread_mutex_t mutex;
#ifndef NDEBUG
    /* ferry__lock_self() of the holder, 0 when free.  Relaxed: only the
     * holder stores it, and a thread compares it only with its own
     * identity, which no other thread ever stores. */
    _Atomic uintptr_t owner;
#endif
};

void ferry__lock_init(struct ferry__lock *l);
void ferry__lock_destroy(struct ferry__lock *l);

#ifndef NDEBUG
/* An identity of the calling thread that is never 0. */
uintptr_t ferry__lock_self(void);
#endif

static inline void ferry__lock_acquire(struct ferry__lock *l)
{
    pthread_mutex_lock(&l->mutex);
#ifndef NDEBUG
    atomic_store_explicit(&l->owner, ferry__lock_self(),
                          memory_order_relaxed);
#endif
}

static inline void ferry__lock_release(struct ferry__lock *l)
{
#ifndef NDEBUG
    atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
#endif
    pthread_mutex_unlock(&l->mutex);
}

/* Waits on cond (releasing the lock meanwhile) until it is signalled or
 * the CLOCK_REALTIME time `until` passes; the caller holds the lock. */
void ferry__lock_wait(struct ferry__lock *l, pthread_cond_t *cond,
                      const struct timespec *until);

#ifndef NDEBUG
static inline bool ferry__lock_held(struct ferry__lock *l)
{
    return atomic_load_explicit(&l->owner, memory_order_relaxed) ==
           ferry__lock_self();
}
#define FERRY__ASSERT_LOCKED(l) assert(ferry__lock_held(l))
#else
#define FERRY__ASSERT_LOCKED(l) ((void)(l))
#endif

/*
 * The `users` counters of regions, lists and prepared transfers follow
 * one rule: a reference is taken only with the context lock held
 * (ferry__users_take asserts it) and may be dropped anywhere
 * (ferry__users_drop).  A release that checks for zero reads the count
 * with the lock held, so a zero it sees cannot rise before it unlinks
 * the object.  Relaxed: the lock orders the takes against that check,
 * and a drop publishes nothing a later reader needs.
 */
static inline void ferry__users_take(_Atomic unsigned *users,
                                     struct ferry__lock *l)
{
    FERRY__ASSERT_LOCKED(l);
    (void)l;
    atomic_fetch_add_explicit(users, 1, memory_order_relaxed);
}

static inline void ferry__users_drop(_Atomic unsigned *users)
{
    atomic_fetch_sub_explicit(users, 1, memory_order_relaxed);
}

/* The count, for a release that checks it with the lock held. */
static inline unsigned ferry__users_read(_Atomic unsigned *users,
                                         struct ferry__lock *l)
{
    FERRY__ASSERT_LOCKED(l);
    (void)l;
    return atomic_load_explicit(users, memory_order_relaxed);
}

/* Tells the CPU n times over that this thread is waiting (x86's pause,
 * arm64's yield; nothing elsewhere): a poller's back-off, far shorter
 * than a system call. */
static inline void ferry__cpu_pause(unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
}

#endif /* FERRY_BASE_LOCK_H */
