/*
 * struct ferry_context: every layer's part nested (the fabric part in the
 * reg part in the xfer part, fabric.h says why), then the progress part,
 * and the fan-out's part by pointer.  Only progress/, fan/ and the top of
 * lib/ (context.c) include this.
 */
#ifndef FERRY_PROGRESS_PART_H
#define FERRY_PROGRESS_PART_H

#include <pthread.h>

#include "xfer/part.h"

/* progress.c: the optional progress thread, and the waiters it wakes. */
struct ferry__progress_part {
    /* What progresses with the context above this layer: the fan-out's
     * driver (fan/fan.c), set before the progress thread starts, called
     * without the lock after each pass of whoever progresses. */
    void (*after_pass)(struct ferry_context *ctx);
    pthread_t thread;
    bool started;
    char cpus[256];            /* near the first rail's NIC, or "" */
    pthread_cond_t progressed; /* the thread handled events; under lock */
    unsigned waiters;          /* threads waiting on it; under lock */
    atomic_bool stopping;
    /* Tests of running requests made while the thread runs, whether one
     * armed the descriptor since the last, and whether the thread stands
     * aside for them, so that they progress in its place (stand_aside).
     * The first two are stored under the lock and read by the thread
     * without it; the thread stores the third. */
    _Atomic uint64_t tester_calls;
    atomic_bool tester_armed;
    atomic_bool thread_aside;
    /* The thread's naps while it stands aside; an arm ends them. */
    pthread_cond_t handed_back;
    /* ferry_context_fd: an eventfd written when, armed (ferry_context_arm),
     * the events counted since the arm (requests ended, notifications
     * received) change; under the lock.  has_fd: made. */
    bool has_fd, armed;
    int event_fd;
    uint64_t armed_events;
};

/* fan/: the fan-outs this context sends or forwards (fan/part.h), made
 * by ferry__fan_init; a pointer, since the fan-out is a layer above. */
struct ferry__fan_part;
/* telemetry.c: its snapshots' writer, or NULL (config.telemetry_dir). */
struct ferry__telemetry;

struct ferry_context {
    struct ferry__xfer xfer; /* first: ferry__xfer_of & co. cast to it */
    struct ferry__progress_part progress;
    struct ferry__fan_part *fan;
    struct ferry__telemetry *telemetry;
    /* context.c: the next context of this process (its list's lock). */
    struct ferry_context *next_in_process;
};

/* The casts of ferry__fabric_of, ferry__reg_of and ferry__xfer_of hold
 * because each part is its container's first member. */
_Static_assert(offsetof(struct ferry_context, xfer) == 0,
               "the xfer part must start the context");
_Static_assert(offsetof(struct ferry__xfer, reg) == 0,
               "the reg part must start the xfer part");
_Static_assert(offsetof(struct ferry__reg, fab) == 0,
               "the fabric part must start the reg part");

#endif /* FERRY_PROGRESS_PART_H */
