/*
 * When the etcd backend's threads stop (etcd.h): the flag its keeper
 * (etcd.c) and watcher (etcd_watch.c) look at, and the nap they take
 * between requests, which the backend's close cuts short.  A file of its
 * own, below both, so that the threads' calls make no circle.
 */
#include "oob/etcd.h"

bool ferry__etcd_stopping(struct etcd *e)
{
    bool stop;

    pthread_mutex_lock(&e->lock);
    stop = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return stop;
}

bool ferry__etcd_nap(struct etcd *e, unsigned ms)
{
    struct timespec until = ferry__realtime_after(ms);
    bool stop;

    pthread_mutex_lock(&e->lock);
    while (!e->stopping &&
           pthread_cond_timedwait(&e->wake, &e->lock, &until) == 0)
        ;
    stop = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return stop;
}
