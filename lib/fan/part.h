/*
 * The fan-out's part of a context (ferry__fan_init makes it; the context
 * points at it, progress/part.h).
 */
#ifndef FERRY_FAN_PART_H
#define FERRY_FAN_PART_H

#include "progress/part.h"

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
    /* Metrics (lib/metrics.c), under run: the fan-outs this context
     * started, those that ended by outcome (reg/traffic.h's slots), and
     * the receivers they reached and missed. */
    uint64_t started, outcomes[FERRY__OUTCOMES], reached, missed;
};

#endif /* FERRY_FAN_PART_H */
