/*
 * ferry_bench --call-times: the time a worker spends inside ferry's own
 * calls, posting, testing and closing requests, so that a request's time
 * splits into what ferry takes and what the rest of the loop does
 * (bench/calltick.h times each call; rma_raw -C splits raw libfabric's
 * the same way).
 */
#ifndef FERRY_BENCH_CALLS_H
#define FERRY_BENCH_CALLS_H

#include "../calltick.h"
#include "stats.h"

#include <stdint.h>

/* What a worker's timed calls took, in the measured window. */
struct call_tally {
    struct call_sum post;         /* ferry_write / ferry_read */
    struct call_sum test_ended;   /* ferry_req_test that saw the end */
    struct call_sum test_running; /* ferry_req_test that found it running */
    struct call_sum close;        /* ferry_req_close of an ended request */
};

/* Adds b's sums to a. */
void call_tally_add(struct call_tally *a, const struct call_tally *b);
/* Turns the workers' tally into nanoseconds (struct result's calls):
 * reqs requests completed in the window, over threads workers whose
 * measured window lasted window_ns; the clock's rate is that between the
 * marks.  Leaves out->present false if nothing was timed. */
void call_numbers_fill(struct call_numbers *out, const struct call_tally *t,
                       uint64_t reqs, uint64_t threads, double window_ns,
                       struct call_mark from, struct call_mark to);

#endif /* FERRY_BENCH_CALLS_H */
