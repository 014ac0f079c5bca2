/*
 * Timing calls into a library from a bench's loop (ferry_bench
 * --call-times, rma_raw -C): a request's time split into the calls that
 * post, poll and close it, and the rest.  Header-only.
 *
 * Each call is timed by the CPU's time stamp counter where there is one
 * (x86-64: 9 ns a reading on the machine of docs/performance.md, where
 * clock_gettime costs 21), and by CLOCK_MONOTONIC elsewhere.  The
 * counter's rate comes from the run itself: a reading of both clocks
 * before it and one after.
 */
#ifndef FERRY_BENCH_CALLTICK_H
#define FERRY_BENCH_CALLTICK_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

static inline uint64_t call_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Ticks of the clock calls are timed by.  The fences keep the reading in
 * its place, at a price: the counter may otherwise be read before the
 * instructions ahead of it are done (a call's last locked instruction,
 * which waits for the call's stores to drain: that time would fall
 * outside the call), or after some of the next call's have begun.  A run
 * timed this way is slower, as the CPU no longer overlaps a call's end
 * with what follows it.
 */
static inline uint64_t call_ticks(void)
{
#if defined(__x86_64__)
    uint64_t t;

    _mm_lfence();
    t = __rdtsc();
    _mm_lfence();
    return t;
#else
    return call_clock_ns();
#endif
}

/* One kind of call: how many were timed, and their ticks in all. */
struct call_sum {
    uint64_t n, ticks;
};

/* Adds the call that began at tick t0 to s. */
static inline void call_note(struct call_sum *s, uint64_t t0)
{
    s->ticks += call_ticks() - t0;
    s->n++;
}

/* A reading of both clocks, for the rate. */
struct call_mark {
    uint64_t ticks, ns;
};

static inline struct call_mark call_mark_now(void)
{
    struct call_mark m;

    m.ticks = call_ticks();
    m.ns = call_clock_ns();
    return m;
}

/* Ticks per nanosecond between two marks; 0 if they are not apart. */
static inline double call_rate(struct call_mark from, struct call_mark to)
{
    if (to.ns <= from.ns || to.ticks <= from.ticks)
        return 0;
    return (double)(to.ticks - from.ticks) / (double)(to.ns - from.ns);
}

/* ns per call of s at rate ticks per ns, or -1 when none was timed. */
static inline double call_ns_each(const struct call_sum *s, double rate)
{
    return s->n == 0 || rate <= 0 ? -1 : (double)s->ticks / rate / (double)s->n;
}

#endif /* FERRY_BENCH_CALLTICK_H */
