/*
 * When a progress thread stands aside for callers that test in a loop
 * (progress.c: progress_test, stand_aside).  Two threads polling one
 * context take its lock from each other, and where CPUs are few (the
 * caller, the thread and a target's thread on two) the thread's turns
 * are the caller's lost: an initiator with a thread moved a tenth of
 * what one without moved (docs/performance.md).  So once a caller's
 * tests of running requests have kept coming, its tests progress and the
 * thread naps; an event loop's round of tests, shorter, or a caller that
 * arms the descriptor to sleep on it, leave the progress to the thread.
 */
#ifndef FERRY_PROGRESS_ASIDE_H
#define FERRY_PROGRESS_ASIDE_H

#include <stdbool.h>
#include <stdint.h>

/* The tests have kept coming while none is TESTER_QUIET_NS after the
 * last (longer than a busy tester's call), for TESTER_SUSTAIN_NS (longer
 * than an event loop's round).  The thread's naps: the first, doubled
 * while they go on, up to the last, which bounds how late it takes over
 * once they stop. */
#define TESTER_QUIET_NS (5u * 1000u)
#define TESTER_SUSTAIN_NS (50u * 1000u)
#define TESTER_NAP_MIN_NS (20u * 1000u)
#define TESTER_NAP_MAX_NS (320u * 1000u)

/* The progress thread's view of the testers. */
struct ferry__aside {
    uint64_t seen;     /* the count of tests at the last look */
    uint64_t moved_ns; /* when the thread last saw it move */
    uint64_t since_ns; /* when they began coming; 0: they do not */
    uint64_t nap_ns;   /* the thread's next nap */
};

#define FERRY__ASIDE_INIT {.nap_ns = TESTER_NAP_MIN_NS}

/*
 * A look of the thread's at now (the monotonic clock, never 0): calls is
 * the count of tests, armed whether a caller armed the descriptor since
 * the last test.  0: the thread progresses; else it stands aside and
 * naps this long.
 */
static inline uint64_t ferry__aside_look(struct ferry__aside *a,
                                         uint64_t calls, bool armed,
                                         uint64_t now)
{
    uint64_t nap;

    if (calls != a->seen) {
        a->seen = calls;
        a->moved_ns = now;
        if (a->since_ns == 0)
            a->since_ns = now;
    }
    if (a->since_ns == 0)
        return 0;
    if (now - a->moved_ns >= TESTER_QUIET_NS || armed) {
        a->since_ns = 0;
        a->nap_ns = TESTER_NAP_MIN_NS;
        return 0;
    }
    if (now - a->since_ns < TESTER_SUSTAIN_NS)
        return 0;
    nap = a->nap_ns;
    if (a->nap_ns < TESTER_NAP_MAX_NS)
        a->nap_ns *= 2;
    return nap;
}

#endif /* FERRY_PROGRESS_ASIDE_H */
