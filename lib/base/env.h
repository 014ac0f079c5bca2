/*
 * The process environment libfabric reads, and the clock.
 */
#ifndef FERRY_BASE_ENV_H
#define FERRY_BASE_ENV_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/*
 * Turns libfabric's own MR caches off (unless the user set the variables,
 * or FERRY_KEEP_FI_MR_CACHE=1) before ferry's first libfabric call: the
 * first call decides for the process.  Idempotent and thread-safe.
 * ferry_fi_mr_cache_state() and _status() (ferry.h) report what it did.
 */
void ferry__env_prepare(void);
/* True when the user, not ferry, set a variable that controls the cache. */
bool ferry__env_user_set_mr_cache(void);
/*
 * FERRY_KEEP_FI_MR_CACHE as ferry_config_init checks it: 0 when unset, 0
 * or 1; FERRY_EINVAL, with the sentence, for anything else.  Reads only:
 * the decision is ferry__env_prepare's.
 */
int ferry__env_check_keep_fi_mr_cache(void);

/* Monotonic clock in nanoseconds. */
uint64_t ferry__now_ns(void);
/* The CLOCK_REALTIME time ms (ns) from now, as pthread_cond_timedwait
 * takes its deadline. */
struct timespec ferry__realtime_after(uint64_t ms);
struct timespec ferry__realtime_after_ns(uint64_t ns);
/*
 * The same clock at the kernel tick's resolution (a few ms behind at
 * most), read without a time source access: for deadlines, checked on
 * every progress call (perf: the precise clock was about 10 % of a shm
 * 4 KiB x 64 profile).
 */
uint64_t ferry__now_coarse_ns(void);

#endif /* FERRY_BASE_ENV_H */
