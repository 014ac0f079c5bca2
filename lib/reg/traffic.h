/*
 * What moved to and from one peer, for the metrics (lib/metrics.c): bytes
 * and operations per rail and direction, requests ended by outcome, and
 * the peer's liveness changes.  Counted under the context lock by the
 * transfer layer; a closed peer's counts are added to the context's
 * closed_peers (reg/part.h), so that no counter of the context ever goes
 * back.
 */
#ifndef FERRY_REG_TRAFFIC_H
#define FERRY_REG_TRAFFIC_H

#include "base/ferry-internal.h"

/* Directions: what an operation does to the peer's memory. */
enum ferry__dir { FERRY__DIR_WRITE, FERRY__DIR_READ, FERRY__DIRS };
/* Kinds of request: writes, reads and notifications alone, numbered as
 * the transfer layer's FERRY__OP_WRITE, _READ and _SEND. */
#define FERRY__REQ_KINDS 3

/* Outcomes: 0 is success, 1 + k the k-th code of FERRY_ERRNO_MAP, and
 * the last any other code. */
#define FERRY__ERRNO_COUNT (0 FERRY_ERRNO_MAP(FERRY__ERRNO_ONE))
#define FERRY__ERRNO_ONE(name, value, kind, text) +1
#define FERRY__OUTCOMES (FERRY__ERRNO_COUNT + 2)

/* The liveness states a peer can move into (ferry_peer_state's). */
#define FERRY__PEER_STATES 4

struct ferry__traffic {
    uint64_t bytes[FERRY__MAX_RAILS][FERRY__DIRS];
    uint64_t ops[FERRY__MAX_RAILS][FERRY__DIRS];
    uint64_t ended[FERRY__REQ_KINDS][FERRY__OUTCOMES];
    uint64_t became[FERRY__PEER_STATES]; /* indexed by ferry_peer_state */
};

/* The outcome slot of a request's status. */
static inline unsigned ferry__outcome_of(int status)
{
    static const int codes[] = {
#define FERRY__ERRNO_VALUE(name, value, kind, text) value,
        FERRY_ERRNO_MAP(FERRY__ERRNO_VALUE)
#undef FERRY__ERRNO_VALUE
    };

    if (status == 0)
        return 0;
    for (unsigned k = 0; k < FERRY__ERRNO_COUNT; k++)
        if (codes[k] == status)
            return 1 + k;
    return FERRY__OUTCOMES - 1;
}

/* Adds what from holds to into (a peer closes: the context keeps it). */
void ferry__traffic_add(struct ferry__traffic *into,
                        const struct ferry__traffic *from);

#endif /* FERRY_REG_TRAFFIC_H */
