/*
 * ferry_bench: results, latency samples (a fixed reservoir), measured
 * windows and the once-a-second line (stats.c).
 */
#ifndef FERRY_BENCH_STATS_H
#define FERRY_BENCH_STATS_H

#include "options.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Latency samples kept per run, over all threads (8 bytes each). */
#define RESERVOIR_TOTAL (1u << 22)

/* --idle: the target at rest (its whole process, by its own clock), and
 * the round trip that follows a gap. */
struct idle_numbers {
    double window_s, cpu_s;
    uint64_t wakeups, preemptions; /* voluntary, involuntary switches */
    double first_p50_us, first_p99_us;
    uint64_t first_samples;
};

/* --call-times: ns inside ferry's calls (calls.h), per request unless
 * said; < 0: none was timed. */
struct call_numbers {
    bool present;
    double post_ns;         /* per ferry_write / ferry_read */
    double test_ns;         /* all ferry_req_test calls, per request */
    double running_tests;   /* tests per request that found it running */
    double running_test_ns; /* per such test */
    double close_ns;        /* per ferry_req_close */
    double request_ns;      /* a request's share of a worker's window */
};

struct result {
    uint64_t block;
    double seconds;
    uint64_t bytes, ops, reqs;
    double mean_us, p50_us, p99_us, p999_us;
    uint64_t samples, measured; /* kept for percentiles / all measured */
    double cpu_here_s, cpu_target_s; /* < 0: not known */
    double conn_ms;                  /* < 0: not known */
    double reg_ms_here, reg_ms_target;
    uint64_t reg_bytes;
    uint64_t notified, target_notified;
    uint64_t written, target_written;
    uint64_t first_bad; /* UINT64_MAX: none */
    unsigned verdict;
    int local_check; /* read validation here: 0 ok, 1 failed, -1 not done */
    struct idle_numbers idle;
    struct call_numbers calls;
    bool ok;
};

/* A fixed reservoir (Vitter's algorithm R): no allocation per sample. */
struct reservoir {
    uint64_t *v;
    size_t cap, n;
    uint64_t seen, rng;
};

/* The once-a-second line on stderr; in a sweep on a terminal, the
 * progress line's redraws instead (progress.h). */
struct ticker {
    uint64_t t0, t_last, next, bytes_last, ops_last;
};

struct window {
    uint64_t t_start, t_end, cpu_start, cpu_end;
};

/*
 * The measured window of a one-thread loop (--memcpy, --pingpong): open
 * from the start without a warm-up, else from the first step past it;
 * closed after --duration or --iterations measured steps.
 */
struct timed_loop {
    struct window win;
    bool measuring;
    uint64_t warm_end, stop_at;
};
void timed_loop_start(struct timed_loop *l, const struct options *o,
                      uint64_t t);
/* A step at time t after `measured` measured steps: true when it ends. */
bool timed_loop_step(struct timed_loop *l, const struct options *o,
                     uint64_t t, uint64_t measured);

int reservoir_init(struct reservoir *r, size_t cap, uint64_t seed);
void reservoir_add(struct reservoir *r, uint64_t x);
int latency_summary(struct reservoir *rs, size_t nrs, double scale,
                    struct result *res);
void ticker_start(struct ticker *tk, uint64_t t);
void ticker_tick(struct ticker *tk, uint64_t t, uint64_t bytes,
                 uint64_t ops, long inflight, bool warmup);
void result_init(struct result *r);

#endif /* FERRY_BENCH_STATS_H */
