/*
 * Helpers of the liveness suites that drive a target child
 * (test/api/check_death.c, test/api/check_netns.c): peer states, waits
 * that progress, and the child's peer and region, on the public API only.
 */
#ifndef FERRY_PEERUTIL_H
#define FERRY_PEERUTIL_H

#include "testutil.h"

/* "UP", "DEAD"... */
const char *state_name(enum ferry_peer_state s);

void sleep_ms(unsigned ms);

/* The peer's state (asserting the call works), its sentence into why. */
enum ferry_peer_state peer_state(ferry_peer_t *peer, char *why, size_t len);

/* Progresses ctx until peer is in state want, at most limit_ms; returns
 * the milliseconds it took, failing the test past the limit. */
uint64_t await_state(ferry_context_t *ctx, ferry_peer_t *peer,
                     enum ferry_peer_state want, unsigned limit_ms,
                     const char *what);

/* Calls fn(arg) while it returns FERRY_EBUSY, progressing ctx in between,
 * at most limit_ms; asserts that it ends with 0. */
typedef int busy_fn(void *arg);
void retry_busy(ferry_context_t *ctx, busy_fn *fn, void *arg,
                unsigned limit_ms, const char *what);
/* busy_fn wrappers of ferry_rmem_close, ferry_mem_close and
 * ferry_peer_close. */
int rmem_free_fn(void *arg);
int deregister_fn(void *arg);
int peer_remove_fn(void *arg);

/* The child as a peer of ctx, and its region imported (len bytes). */
ferry_peer_t *add_peer(ferry_context_t *ctx, const struct tu_child *c);
ferry_rmem_t *import_child(ferry_peer_t *peer, const struct tu_child *c,
                           size_t len);

/* Writes [buf, +len) over the whole of rmem and asserts success. */
void write_ok(ferry_peer_t *peer, void *buf, ferry_mem_t *lmem,
              ferry_rmem_t *rmem, size_t len, const char *what);

/*
 * A child target whose region this process wrote once and the child then
 * replaced (tu_child_reregister): ctx and its peer of the child; old, the
 * first region as imported (its key is stale now), and fresh, the new
 * one; l, len bytes of local memory registered as ml.  The child is
 * started into c first (tu_child_start, or _apart); replaced_open writes
 * pattern seed through old, checks it landed, and has the region
 * replaced; replaced_close releases everything and stops the child.
 */
struct replaced {
    struct tu_child c;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *old, *fresh;
    uint8_t *l;
    ferry_mem_t *ml;
    size_t len;
};
void replaced_open(struct replaced *r, const char *prov, size_t len,
                   uint64_t seed);
void replaced_close(struct replaced *r);

#endif /* FERRY_PEERUTIL_H */
