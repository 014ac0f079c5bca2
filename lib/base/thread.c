/*
 * Detached threads started and running (thread.h).
 */
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>

struct start {
    void *(*fn)(void *);
    void *arg;
    sem_t running;
};

static void *trampoline(void *p)
{
    struct start *s = p;
    void *(*fn)(void *) = s->fn;
    void *arg = s->arg;

    /* s lives on the starter's stack until this post wakes it. */
    sem_post(&s->running);
    return fn(arg);
}

bool ferry__thread_start(void *(*fn)(void *), void *arg)
{
    struct start s = {.fn = fn, .arg = arg};
    pthread_attr_t attr;
    pthread_t thread;
    int ret;

    sem_init(&s.running, 0, 0);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    ret = pthread_create(&thread, &attr, trampoline, &s);
    pthread_attr_destroy(&attr);
    if (ret == 0)
        while (sem_wait(&s.running) != 0 && errno == EINTR)
            ;
    sem_destroy(&s.running);
    errno = ret;
    return ret == 0;
}
