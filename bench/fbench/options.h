/*
 * ferry_bench: command-line options, resolved and checked (options.c).
 */
#ifndef FERRY_BENCH_OPTIONS_H
#define FERRY_BENCH_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEFAULT_PORT 18520
/* The most receivers --fanout takes. */
#define MAX_FANOUT 64
/* The most regions --regions cuts the target's buffer into. */
#define MAX_REGIONS 64

enum mode {
    MODE_LOOPBACK,
    MODE_TARGET,
    MODE_INITIATOR,
    MODE_MEMCPY,
    MODE_FANOUT, /* --fanout N */
};

struct options {
    enum mode mode;
    bool mode_set;
    const char *initiator_addr; /* HOST[:PORT] as given, or the target's
                                   name with --metadata */
    const char *metadata;       /* --metadata URL, else FERRY_METADATA */
    const char *name;           /* --name: the target's in the service */
    unsigned port;
    bool port_set;
    const char *provider, *domain;
    unsigned rails;
    uint64_t tx_depth; /* 0: the provider's */
    uint64_t max_op;   /* --max-op; 0: ferry's default */
    bool read;
    uint64_t block;
    bool block_set;
    uint64_t batch, threads, inflight;
    bool batch_set, threads_set, inflight_set;
    double duration; /* per run, once resolved */
    bool duration_set;
    uint64_t iterations; /* 0: run for a duration */
    double warmup;
    uint64_t buffer;
    bool buffer_set;
    bool cuda; /* --mem: this side's buffer (both sides in loopback) */
    unsigned cuda_device;
    const char *mem_text;
    bool target_mem_set; /* --target-mem: the loopback target's instead */
    bool target_cuda;
    unsigned target_cuda_device;
    const char *target_mem_text;
    bool notify, validate, json, pingpong;
    bool descending; /* a request's iovs from its last block to its first */
    bool same_block; /* every request moves the same blocks (slot 0) */
    bool target_polls; /* the target polls itself: no progress thread */
    bool initiator_thread; /* the initiator runs a progress thread */
    bool event_loop;       /* ... and sleeps on ferry_context_fd */
    bool pin;          /* --loopback: initiator on CPU 0, target on CPU 1 */
    bool call_times;   /* time ferry's calls in the initiator's workers */
    uint64_t idle_peers; /* peers the initiator adds and never uses */
    /* --regions: the target's buffer as this many regions of equal size,
     * each block written into the one it falls in (1: one region). */
    uint64_t regions;
    uint64_t sweep_lo, sweep_hi; /* 0: no sweep */
    const char *sweep_text;
    const char *csv;
    const char *plot; /* --plot FILE.svg|FILE.png; NULL: none */
    const char *metrics; /* --metrics FILE: each side's, at the end */
    int timeout_ms;
    double time_limit; /* 0: computed */
    uint64_t fanout;       /* --fanout: receivers */
    uint64_t fanout_chunk; /* --fanout-chunk; 0: ferry picks */
    uint64_t fanout_degree; /* --fanout-degree; 0: ferry picks */
    double idle;            /* --idle: seconds of the idle window; 0: none */
    uint64_t idle_gaps;     /* --idle-gaps; 0 until resolved */
    double gap_length;      /* --gap-length; 0 until resolved */
};

bool parse_args(int argc, char **argv, struct options *o);
size_t sweep_count(const struct options *o);
uint64_t block_of_run(const struct options *o, size_t i);
bool resolve_options(struct options *o);
double session_bound_s(const struct options *o);

#endif /* FERRY_BENCH_OPTIONS_H */
