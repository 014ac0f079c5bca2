/*
 * A poller's sched_yield, given up while it does not pay.
 *
 * A thread that polls for work another process must do (a target's side
 * of shm or tcp, a peer's answer) gives the CPU away now and then, so
 * that a peer sharing its CPU runs now rather than at the end of the
 * poller's time slice: with ferry_bench's initiator and target on one CPU,
 * 4 KiB shm writes ran 0.95 GB/s with the yields and 0.018 without.
 *
 * A thread that never yields back (any CPU-bound process on that CPU)
 * turns each yield into the rest of its own slice: Linux's EEVDF
 * scheduler charges the yielder for its whole slice.  On Linux 6.18 here
 * a yield against a busy loop either came back at once (the loop had had
 * its share) or after 2-8 ms, where alone it takes 0.4 us, and a poller
 * yielding every few microseconds kept about 1 % of its CPU: 4 KiB shm
 * writes fell to 0.05 GB/s with a busy loop on each CPU, against 4.5-5
 * without the yields (docs/performance.md, "A busy machine").
 *
 * So a yield that took FERRY__YIELD_LONG_NS or more starts a quiet time
 * without yields: FERRY__YIELD_QUIET_MIN_NS, doubling with every long
 * yield up to FERRY__YIELD_QUIET_MAX_NS.  While quiet, the poller takes
 * its fair share like any other thread.  The yields between two long
 * ones come back short, so the quiet time goes back to none only after
 * FERRY__YIELD_SHORT_RUN short yields in a row.  A peer of ferry's own
 * hands the CPU back sooner than FERRY__YIELD_LONG_NS: with a threshold
 * of 1 ms, 1 MiB shm writes between two processes on one CPU (whose turns
 * are long copies) fell from 14 to 3.8 GB/s; at 2 ms they keep their 14.
 *
 * Header-only: ferry_bench's pollers use it as the library's do.
 */
#ifndef FERRY_BASE_YIELD_H
#define FERRY_BASE_YIELD_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define FERRY__YIELD_LONG_NS (2000u * 1000u)
#define FERRY__YIELD_QUIET_MIN_NS (1000u * 1000u)
#define FERRY__YIELD_QUIET_MAX_NS (128u * 1000u * 1000u)
#define FERRY__YIELD_SHORT_RUN 64u

/* One poller's yields; zeroed to start.  Not shared between threads. */
struct ferry__yield {
    uint64_t quiet_until_ns; /* no yield before this (monotonic clock) */
    uint64_t quiet_ns;       /* the last quiet time; 0: none */
    unsigned short_run;      /* short yields since the last long one */
};

/* Whether a yield is due at now_ns: outside any quiet time. */
static inline bool ferry__yield_due(const struct ferry__yield *y,
                                    uint64_t now_ns)
{
    return now_ns >= y->quiet_until_ns;
}

/* Takes note of a yield that began at start_ns and took took_ns. */
static inline void ferry__yield_took(struct ferry__yield *y,
                                     uint64_t start_ns, uint64_t took_ns)
{
    if (took_ns < FERRY__YIELD_LONG_NS) {
        if (++y->short_run >= FERRY__YIELD_SHORT_RUN)
            y->quiet_ns = 0;
        return;
    }
    y->short_run = 0;
    if (y->quiet_ns == 0)
        y->quiet_ns = FERRY__YIELD_QUIET_MIN_NS;
    else if (y->quiet_ns < FERRY__YIELD_QUIET_MAX_NS)
        y->quiet_ns *= 2;
    y->quiet_until_ns = start_ns + took_ns + y->quiet_ns;
}

static inline uint64_t ferry__yield_clock(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* sched_yield, unless a quiet time says not to (above). */
static inline void ferry__yield(struct ferry__yield *y)
{
    uint64_t start = ferry__yield_clock();

    if (!ferry__yield_due(y, start))
        return;
    sched_yield();
    ferry__yield_took(y, start, ferry__yield_clock() - start);
}

#endif /* FERRY_BASE_YIELD_H */
