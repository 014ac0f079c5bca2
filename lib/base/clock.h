/*
 * The times of requests (ferry_req_result's posted_ns and ended_ns, the
 * duration histogram), read through the CPU's time stamp counter.
 *
 * They are CLOCK_MONOTONIC, as ferry__now_ns reads it, but a request
 * takes one at its start: clock_gettime costs 21 ns a call on the VM of
 * docs/performance.md, rdtsc 9, and leaving that one reading out made
 * 4 KiB shm writes on libfabric 2.6.0 10 % faster.  So each thread
 * measures the counter's rate against clock_gettime (over
 * FERRY__CLOCK_MEASURE_NS at least) and from then on scales the counter
 * from its last reading of both, reading clock_gettime again every
 * FERRY__CLOCK_ANCHOR_NS: a value stays within a few microseconds of
 * clock_gettime's, and never goes back within one thread.
 *
 * Only where the kernel keeps CLOCK_MONOTONIC on the counter itself (its
 * clocksource is "tsc", which Linux picks only for a counter that runs at
 * a constant rate and agrees across CPUs), on x86-64; elsewhere, and
 * until a thread has measured the rate, ferry__clock_ns is ferry__now_ns.
 */
#ifndef FERRY_BASE_CLOCK_H
#define FERRY_BASE_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#define FERRY__CLOCK_MEASURE_NS (10u * 1000u * 1000u)
#define FERRY__CLOCK_ANCHOR_NS (20u * 1000u * 1000u)
/* Most counter ticks between the two halves of an anchoring pair (rdtsc,
 * clock_gettime, rdtsc takes about 60 here): 0.5-1 us at 2-4 GHz. */
#define FERRY__CLOCK_PAIR_TICKS 2000u

/* A thread's scale of the counter (zeroed: nothing measured yet). */
struct ferry__clock_scale {
    uint64_t tsc, ns;             /* the last reading of both together */
    uint64_t from_tsc, from_ns;   /* where the rate's measurement began */
    uint64_t ns_per_tick_q32;     /* the rate, 32 fraction bits; 0: none */
    uint64_t last;                /* the last value given */
};

/* CLOCK_MONOTONIC in nanoseconds, for the times of requests (above). */
uint64_t ferry__clock_ns(void);

/*
 * One reading of s: counter() scaled, or precise() read when s has no
 * rate yet, its anchor is FERRY__CLOCK_ANCHOR_NS old, or the counter
 * went back; s is anchored on that reading when counter() read before
 * and after it are FERRY__CLOCK_PAIR_TICKS apart at most.  Never less
 * than the last value it gave.
 */
uint64_t ferry__clock_scale_read(struct ferry__clock_scale *s,
                                 uint64_t (*counter)(void),
                                 uint64_t (*precise)(void));

/* Whether a clocksource name, as sysfs prints it, is the counter's. */
bool ferry__clock_source_is_tsc(const char *text);

#endif /* FERRY_BASE_CLOCK_H */
