/*
 * The context lock (lock.h): the mutex, and in debug builds the holder's
 * identity behind FERRY__ASSERT_LOCKED.
 */
#include "base/lock.h"

#ifndef NDEBUG
/* Its address is the thread's identity: distinct per live thread. */
static _Thread_local char self;

uintptr_t ferry__lock_self(void)
{
    return (uintptr_t)&self;
}
#endif

void ferry__lock_init(struct ferry__lock *l)
{
    pthread_mutex_init(&l->mutex, NULL);
#ifndef NDEBUG
    atomic_init(&l->owner, 0);
#endif
}

void ferry__lock_destroy(struct ferry__lock *l)
{
    pthread_mutex_destroy(&l->mutex);
}

void ferry__lock_wait(struct ferry__lock *l, pthread_cond_t *cond,
                      const struct timespec *until)
{
    FERRY__ASSERT_LOCKED(l);
#ifndef NDEBUG
    /* The wait lets other threads take the lock meanwhile. */
    atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
#endif
    pthread_cond_timedwait(cond, &l->mutex, until);
#ifndef NDEBUG
    atomic_store_explicit(&l->owner, ferry__lock_self(),
                          memory_order_relaxed);
#endif
}
