/*
 * Helpers of the progress suites (test/api/check_progress.c and
 * test/unit/check_progress.c): deadlines, and targets killed in another
 * process, on the public API only.
 */
#ifndef FERRY_PROGRESSUTIL_H
#define FERRY_PROGRESSUTIL_H

#include "testutil.h"

/*
 * Requests against a stalled target: it never completes them whatever
 * their size (the provider's delivery-complete writes need the target's
 * progress), so they need not be big.
 */
#define STUCK (8 * MiB)
#define MS 1000000ull /* ns */

/* Seconds since t0, a tu_now_ns() time. */
double secs_since(uint64_t t0);

/* Waits (10 s at most) for req to end at its deadline of deadline_ms. */
void expect_deadline(ferry_req_t *req, int deadline_ms, const char *prov);

/*
 * SIGKILLs a child target and reaps it.  A killed shm endpoint never
 * unlinks its region (/dev/shm/<pid>:<domain>:<ep>): removes the child's.
 */
void reap_killed(struct tu_child *c);

/* A context of cfg with a child target of BIG bytes, imported as rmem, and
 * a local buffer as large; the deadline of its transfers. */
#define BIG (64 * MiB)
#define KILL_DEADLINE_MS 3000
struct victim {
    struct tu_child c;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    uint8_t *buf;
};
void victim_open(struct victim *v, const char *prov,
                 const struct ferry_config *cfg);
/* Waits for the request the kill interrupted; it must end in an error.
 * Then closes the context. */
void victim_finish(struct victim *v, ferry_req_t *req, uint64_t t_post,
                   const char *prov);

#endif /* FERRY_PROGRESSUTIL_H */
