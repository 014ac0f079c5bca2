/*
 * Process environment that must be right before libfabric first reads it,
 * and the clock.
 *
 * libfabric's own registration caches deadlock with malloc/madvise hooks
 * (libfabric #10879, #9594, #5554).  ferry keeps its own cache, so it turns
 * libfabric's off before its first libfabric call, which is when libfabric
 * reads these variables.  A value the user set is left alone.
 */
#include "base/env.h"

#include "base/defs.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool user_set_mr_cache;

static const char *const mr_cache_vars[] = {
    "FI_MR_CACHE_MAX_COUNT",  /* util cache: tcp, rxm, shm, verbs... */
    "FI_EFA_MR_CACHE_ENABLE", /* efa's own switch */
};

static void prepare(void)
{
    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_cache_vars); i++) {
        if (getenv(mr_cache_vars[i]) != NULL) {
            user_set_mr_cache = true;
            continue;
        }
        /* setenv is not thread-safe against getenv; this runs once, before
         * any libfabric call of ours, inside pthread_once. */
        setenv(mr_cache_vars[i], "0", 0);
    }
}

void ferry__env_prepare(void)
{
    pthread_once(&env_once, prepare);
}

bool ferry__env_user_set_mr_cache(void)
{
    ferry__env_prepare();
    return user_set_mr_cache;
}

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ferry__now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

uint64_t ferry__now_coarse_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC_COARSE);
}
