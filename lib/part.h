/*
 * struct ferry_context: every layer's part nested (the fabric part in the
 * reg part in the xfer part, fabric.h says why), then the progress
 * part.  Only the top of lib/ (context.c, progress.c) includes this.
 */
#ifndef FERRY_PART_H
#define FERRY_PART_H

#include <pthread.h>

#include "xfer/part.h"

/* progress.c: the optional progress thread, and the waiters it wakes. */
struct ferry__progress_part {
    pthread_t thread;
    bool started;
    char cpus[256];            /* near the first rail's NIC, or "" */
    pthread_cond_t progressed; /* the thread handled events; under lock */
    unsigned waiters;          /* threads waiting on it; under lock */
    atomic_bool stopping;
    /* ferry_context_fd: an eventfd written when, armed (ferry_context_arm),
     * the events counted since the arm (requests ended, notifications
     * received) change; under the lock.  has_fd: made. */
    bool has_fd, armed;
    int event_fd;
    uint64_t armed_events;
};

/* fan.c: the fan-outs this context sends or forwards. */
struct ferry__fan_event {
    uint64_t id, value;
};

struct ferry__fan_peer;

#define FERRY__FAN_ENDED 16

struct ferry__fan_part {
    /* One thread at a time drives the fan-outs (fan.c says why the
     * context lock cannot be the one). */
    pthread_mutex_t run;
    struct ferry_fanout *nodes; /* under run */
    /* Peers receivers added from plans, one per address, kept for the
     * context's life; under run. */
    struct ferry__fan_peer *peers;
    /* Tags of the last fan-outs received here that ended; under run. */
    uint64_t ended[FERRY__FAN_ENDED];
    size_t ended_next;
    /* Events for fan-outs whose plan has not come yet; under run. */
    struct ferry__fan_event *early;
    size_t nearly, early_head;
    /* Arrived notifications of ferry's own, under the context lock. */
    struct ferry__fan_event *events;
    size_t nevents, events_cap;
    /* Whether there is anything to drive: nodes or events (a hint read
     * without either lock, so progress costs nothing without fan-outs). */
    atomic_uint work;
};

struct ferry_context {
    struct ferry__xfer xfer; /* first: ferry__xfer_of & co. cast to it */
    struct ferry__progress_part progress;
    struct ferry__fan_part fan;
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

#endif /* FERRY_PART_H */
