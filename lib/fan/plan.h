/*
 * What fan-out nodes say to each other (fan.c): the ids of ferry's own
 * notifications that carry a fan-out's events, and the plan a parent
 * writes into its child's inbox.
 */
#ifndef FERRY_FAN_PLAN_H
#define FERRY_FAN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/ferry-internal.h"

/* A fan-out's events; the kind sits above the tag in the id. */
enum ferry__fan_kind {
    FERRY__FAN_PLAN = 1, /* value: the inbox id the plan is in */
    FERRY__FAN_CHUNK,    /* value: the chunk that landed */
    FERRY__FAN_DONE,     /* value: the receiver that holds everything */
    FERRY__FAN_DEAD,     /* value: the node lost */
    FERRY__FAN_FIN,      /* the fan-out ended */
};

#define FERRY__FAN_TAG_BITS 48
#define FERRY__FAN_TAG_MASK ((UINT64_C(1) << FERRY__FAN_TAG_BITS) - 1)
#define FERRY__FAN_NO_PARENT UINT32_MAX

/* The notification id of event `kind` of fan-out `tag` (0 for a plan,
 * which names its fan-out inside). */
static inline uint64_t ferry__fan_id(enum ferry__fan_kind kind, uint64_t tag)
{
    return FERRY_NOTIFY_ID_RESERVED | (uint64_t)kind << FERRY__FAN_TAG_BITS |
           (tag & FERRY__FAN_TAG_MASK);
}

static inline enum ferry__fan_kind ferry__fan_kind_of(uint64_t id)
{
    return (enum ferry__fan_kind)((id >> FERRY__FAN_TAG_BITS) & 0xff);
}

/* A fan-out's shape and every node's blobs; nodes are 0 (the source) to
 * n, and parent[i] < i for every receiver i. */
struct ferry__fan_plan {
    uint64_t tag, len, chunk, notify_id;
    uint32_t n, nchunks; /* n receivers: n + 1 nodes */
    uint32_t *parent;
    uint8_t **addr, **rkey; /* node 0 has no region: rkey of length 0 */
    size_t *addr_len, *rkey_len;
};

/* Whether node x has children in the plan, so that it forwards: a node
 * that has none never does, whoever dies (a dead node's children go to
 * one of its ancestors). */
bool ferry__fan_plan_forwards(const struct ferry__fan_plan *p, uint32_t x);
/* Room for the nodes of a plan of n receivers (zeroed); FERRY_ENOMEM
 * with p freed. */
int ferry__fan_plan_alloc(struct ferry__fan_plan *p, uint32_t n);
/* Frees what p holds and zeroes it; a zeroed p is fine. */
void ferry__fan_plan_free(struct ferry__fan_plan *p);
/* The plan as receiver `you` gets it (a blob, plan.c gives the
 * layout), into buf of cap bytes; buf NULL measures (*len).  Returns 0 or
 * FERRY_ENOSPC with *len the size needed. */
int ferry__fan_plan_encode(const struct ferry__fan_plan *p, uint32_t you,
                           uint8_t *buf, size_t cap, size_t *len);
/* Reads a plan written by ferry__fan_plan_encode and checks its shape;
 * FERRY_EBLOB with a sentence when it is not one.  The caller frees p. */
int ferry__fan_plan_decode(const uint8_t *buf, size_t len,
                           struct ferry__fan_plan *p, uint32_t *you);

#endif /* FERRY_FAN_PLAN_H */
